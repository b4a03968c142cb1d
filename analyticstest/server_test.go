package analyticstest_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticstest"
)

// newClient returns a client of srv that is closed when the test ends.
func newClient(t *testing.T, srv *analyticstest.Server, opts ...analytics.Option) *analytics.Client {
	t.Helper()
	c, err := analytics.New("test-key", append([]analytics.Option{analytics.WithEndpoint(srv.URL())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func closeClient(t *testing.T, c *analytics.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestServerRecordsWhatTheClientSends(t *testing.T) {
	srv := analyticstest.NewServer(t, analyticstest.WithWriteKey("test-key"))
	c := newClient(t, srv)
	if err := c.Track(analytics.Track{MessageID: "m1", UserID: "u", Event: "Signed Up",
		Properties: analytics.Properties{"plan": "pro", "seats": 3}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Identify(analytics.Identify{MessageID: "m2", UserID: "u", Traits: analytics.Traits{"name": "Ada"}}); err != nil {
		t.Fatal(err)
	}
	closeClient(t, c)

	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodPost || r.Path != "/v1/batch" || r.Status != http.StatusOK {
		t.Errorf("request %s %s answered %d", r.Method, r.Path, r.Status)
	}
	if r.WriteKey != "test-key" || r.Gzip || r.RetryCount() != "" || r.SentAt == "" {
		t.Errorf("WriteKey=%q Gzip=%t RetryCount=%q SentAt=%q", r.WriteKey, r.Gzip, r.RetryCount(), r.SentAt)
	}
	if got := r.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	if got := strings.Join(srv.MessageIDs(), ","); got != "m1,m2" {
		t.Errorf("MessageIDs %s, want m1,m2", got)
	}
	ev := srv.Events()
	if ev[0]["type"] != "track" || ev[0]["event"] != "Signed Up" || ev[1]["type"] != "identify" {
		t.Errorf("events %v", ev)
	}
	props, _ := ev[0]["properties"].(map[string]any)
	if props["plan"] != "pro" || props["seats"] != float64(3) {
		t.Errorf("properties %v", props)
	}
	if !bytes.Contains(r.Body, []byte(`"writeKey":"test-key"`)) {
		t.Errorf("body %s has no writeKey", r.Body)
	}
}

func TestServerDecodesGzip(t *testing.T) {
	srv := analyticstest.NewServer(t)
	c := newClient(t, srv, analytics.WithGzip(true))
	_ = c.Track(analytics.Track{UserID: "u", Event: "E"})
	closeClient(t, c)
	reqs := srv.Requests()
	if len(reqs) != 1 || !reqs[0].Gzip || reqs[0].Status != 200 || len(reqs[0].Events) != 1 {
		t.Fatalf("requests %+v", reqs)
	}
	if reqs[0].Events[0]["event"] != "E" {
		t.Errorf("decoded event %v", reqs[0].Events[0])
	}
}

func TestServerSetResponse(t *testing.T) {
	srv := analyticstest.NewServer(t)
	srv.SetResponse(http.StatusBadRequest, `{"message":"no such source"}`)
	var (
		mu     sync.Mutex
		gotErr error
	)
	c := newClient(t, srv, analytics.WithOnError(func(err error, _ []analytics.Message) {
		mu.Lock()
		defer mu.Unlock()
		gotErr = err
	}))
	_ = c.Track(analytics.Track{UserID: "u", Event: "E"})
	closeClient(t, c)

	var he *analytics.HTTPError
	mu.Lock()
	defer mu.Unlock()
	if !errors.As(gotErr, &he) || he.StatusCode != 400 || he.Message != "no such source" {
		t.Fatalf("OnError err = %v", gotErr)
	}
	if n := len(srv.Events()); n != 0 {
		t.Errorf("Events() has %d events of a request answered 400", n)
	}
	if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Status != 400 || len(reqs[0].Events) != 1 {
		t.Errorf("requests %+v", reqs)
	}

	srv.Reset()
	if len(srv.Requests()) != 0 {
		t.Error("Reset kept requests")
	}
}

func basic(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

func gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return b.Bytes()
}

func TestServerRejectsMalformedRequests(t *testing.T) {
	srv := analyticstest.NewServer(t, analyticstest.WithWriteKey("right"))
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport}

	const ok = `{"batch":[{"type":"track","messageId":"x"}],"sentAt":"2026-11-30T00:00:00Z"}`
	cases := []struct {
		name, method, path, auth, encoding string
		body                               []byte
		want                               int
	}{
		{"valid", "POST", "/v1/batch", basic("right", ""), "", []byte(ok), 200},
		{"valid gzip", "POST", "/v1/batch", basic("right", ""), "gzip", gzipped(ok), 200},
		{"wrong path", "POST", "/v1/track", basic("right", ""), "", []byte(ok), 404},
		{"wrong method", "GET", "/v1/batch", basic("right", ""), "", nil, 404},
		{"no auth", "POST", "/v1/batch", "", "", []byte(ok), 401},
		{"password set", "POST", "/v1/batch", basic("right", "secret"), "", []byte(ok), 401},
		{"wrong key", "POST", "/v1/batch", basic("wrong", ""), "", []byte(ok), 401},
		{"not json", "POST", "/v1/batch", basic("right", ""), "", []byte("hello"), 400},
		{"no batch", "POST", "/v1/batch", basic("right", ""), "", []byte(`{"sentAt":"x"}`), 400},
		{"bad gzip", "POST", "/v1/batch", basic("right", ""), "gzip", []byte(ok), 400},
	}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, srv.URL()+tc.path, bytes.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		if tc.encoding != "" {
			req.Header.Set("Content-Encoding", tc.encoding)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	if got := len(srv.Requests()); got != len(cases) {
		t.Errorf("%d requests recorded, want %d (every request is recorded)", got, len(cases))
	}
	if got := strings.Join(srv.MessageIDs(), ","); got != "x,x" {
		t.Errorf("MessageIDs %q, want the two valid requests' ids", got)
	}
}

func TestNewServerClosesAtCleanup(t *testing.T) {
	var url string
	t.Run("inner", func(t *testing.T) {
		url = analyticstest.NewServer(t).URL()
	})
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport, Timeout: 2 * time.Second}).Post(url+"/v1/batch", "application/json", strings.NewReader("{}"))
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("the server still answers after its test ended")
	}
}

func TestStartServer(t *testing.T) {
	srv, err := analyticstest.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") {
		t.Errorf("URL %s is not on 127.0.0.1", srv.URL())
	}
	srv.Close()
	srv.Close() // idempotent
}

// The typed accessors decode what the client sent into the message types,
// so assertions need no type assertions, and match what a Fake records for
// the same calls.
func TestServerTypedAccessors(t *testing.T) {
	srv := analyticstest.NewServer(t)
	c := newClient(t, srv, analytics.WithGzip(true))
	fake := analyticstest.NewFake()
	at := time.Date(2026, 11, 30, 9, 30, 0, 123_000_000, time.FixedZone("CET", 3600))
	send := func(tr analytics.Tracker) {
		t.Helper()
		for _, err := range []error{
			tr.Track(analytics.Track{MessageID: "t1", UserID: "u", Event: "Signed Up", Timestamp: at,
				Properties: analytics.Properties{"plan": "pro", "seats": 3}, Integrations: analytics.Integrations{"All": false}}),
			tr.Identify(analytics.Identify{MessageID: "i1", UserID: "u", Timestamp: at, Traits: analytics.Traits{"name": "Ada"}}),
			tr.Group(analytics.Group{MessageID: "g1", AnonymousID: "a", GroupID: "acme", Timestamp: at}),
			tr.Page(analytics.Page{MessageID: "p1", UserID: "u", Name: "Pricing", Category: "Docs", Timestamp: at}),
			tr.Screen(analytics.Screen{MessageID: "s1", UserID: "u", Name: "Settings", Timestamp: at,
				Context: analytics.ContextFields{"app": map[string]any{"version": "1.2"}}}),
			tr.Alias(analytics.Alias{MessageID: "a1", UserID: "u", PreviousID: "a", Timestamp: at}),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	send(c)
	send(fake)
	closeClient(t, c)

	tracks := srv.Tracks()
	if len(tracks) != 1 {
		t.Fatalf("%d tracks", len(tracks))
	}
	tr := tracks[0]
	if tr.MessageID != "t1" || tr.UserID != "u" || tr.Event != "Signed Up" || tr.Properties["plan"] != "pro" ||
		tr.Properties["seats"] != float64(3) || tr.Integrations["All"] != false {
		t.Errorf("track %+v", tr)
	}
	if tr.Timestamp.Location() != time.UTC || !tr.Timestamp.Equal(at) {
		t.Errorf("track timestamp %v, want %v", tr.Timestamp, at.UTC())
	}
	if lib, _ := tr.Context["library"].(map[string]any); lib["name"] != analytics.LibraryName {
		t.Errorf("track context %v has no library entry", tr.Context)
	}
	if id := srv.Identifies(); len(id) != 1 || id[0].Traits["name"] != "Ada" {
		t.Errorf("identifies %+v", id)
	}
	if g := srv.Groups(); len(g) != 1 || g[0].GroupID != "acme" || g[0].AnonymousID != "a" {
		t.Errorf("groups %+v", g)
	}
	if p := srv.Pages(); len(p) != 1 || p[0].Name != "Pricing" || p[0].Category != "Docs" {
		t.Errorf("pages %+v", p)
	}
	if s := srv.Screens(); len(s) != 1 || s[0].Context["app"].(map[string]any)["version"] != "1.2" {
		t.Errorf("screens %+v", s)
	}
	if a := srv.Aliases(); len(a) != 1 || a[0].PreviousID != "a" {
		t.Errorf("aliases %+v", a)
	}

	// The same calls recorded by the Fake: same types, ids, fields and
	// instants. The wire adds the library context and turns numbers into
	// float64; nothing else differs.
	got, want := srv.Messages(), fake.Messages()
	if len(got) != len(want) {
		t.Fatalf("server has %d messages, fake %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Type() != want[i].Type() || got[i].ID() != want[i].ID() {
			t.Errorf("message %d: server %s %s, fake %s %s", i, got[i].Type(), got[i].ID(), want[i].Type(), want[i].ID())
		}
	}
	if ft := fake.Tracks()[0]; ft.Event != tr.Event || !ft.Timestamp.Equal(tr.Timestamp) || ft.Timestamp.Location() != time.UTC {
		t.Errorf("fake track %+v, server track %+v", ft, tr)
	}

	raw := srv.RawEvents()
	if len(raw) != 6 || !bytes.Contains(raw[0], []byte(`"event":"Signed Up"`)) {
		t.Errorf("raw events %s", raw)
	}
	if r := srv.Requests()[0]; len(r.RawEvents) != 6 || len(r.Messages) != 6 || len(r.Events) != 6 {
		t.Errorf("request has %d raw, %d typed, %d decoded events", len(r.RawEvents), len(r.Messages), len(r.Events))
	}
}

// An element the typed view cannot decode stays in Events and RawEvents.
func TestServerMessagesSkipUnknownTypes(t *testing.T) {
	srv := analyticstest.NewServer(t)
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	body := `{"batch":[{"type":"track","event":"E","userId":"u"},{"type":"screenshot"},{"type":"page","timestamp":"yesterday"}]}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL()+"/v1/batch", strings.NewReader(body))
	req.Header.Set("Authorization", basic("k", ""))
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if n, m, r := len(srv.Events()), len(srv.Messages()), len(srv.RawEvents()); n != 3 || m != 1 || r != 3 {
		t.Errorf("Events %d, Messages %d, RawEvents %d; want 3, 1, 3", n, m, r)
	}
}
