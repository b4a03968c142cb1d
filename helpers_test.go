package analytics

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relaykit/analytics-go/internal/wire"
)

func TestMain(m *testing.M) {
	wire.PoisonFreedSlabs = true
	goleak.VerifyTestMain(m)
}

// seen is one request as the fake API received it.
type seen struct {
	at      time.Time // arrival (fake time under synctest)
	done    time.Time // when the answer left (at + hold)
	url     string
	method  string
	header  http.Header
	body    []byte // gunzipped
	raw     []byte
	ids     []string
	sentAt  string
	wkey    string
	decoded map[string]any
}

func (s seen) retryCount() string { return s.header.Get("X-Retry-Count") }

// reply is the scripted answer to one request.
type reply struct {
	status int
	header map[string]string
	body   string
	hold   time.Duration // answer after this long (the request may be cancelled meanwhile)
	err    error         // transport error instead of a response
	cut    bool          // the body read fails after the first 3 bytes
}

type cutReader struct{}

func (cutReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// fakeAPI is an in-process tracking API: an http.RoundTripper, so tests run
// inside a synctest bubble with fake time and no sockets. It records what
// reached the "server" and answers from script.
type fakeAPI struct {
	mu     sync.Mutex
	reqs   []seen
	script func(n int, r seen) reply
}

func newFakeAPI(script func(n int, r seen) reply) *fakeAPI {
	if script == nil {
		script = func(int, seen) reply { return reply{status: 200} }
	}
	return &fakeAPI{script: script}
}

// sequence answers the i-th request with replies[i], repeating the last.
func sequence(replies ...reply) func(int, seen) reply {
	return func(n int, _ seen) reply {
		if n >= len(replies) {
			n = len(replies) - 1
		}
		return replies[n]
	}
}

func (f *fakeAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	raw, _ := io.ReadAll(req.Body)
	_ = req.Body.Close()
	body := raw
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err == nil {
			body, _ = io.ReadAll(zr)
		}
	}
	s := seen{at: time.Now(), url: req.URL.String(), method: req.Method, header: req.Header.Clone(), body: body, raw: raw}
	var env struct {
		Batch []struct {
			MessageID string `json:"messageId"`
		} `json:"batch"`
		SentAt   string `json:"sentAt"`
		WriteKey string `json:"writeKey"`
	}
	if json.Unmarshal(body, &env) == nil {
		for _, e := range env.Batch {
			s.ids = append(s.ids, e.MessageID)
		}
		s.sentAt, s.wkey = env.SentAt, env.WriteKey
	}
	_ = json.Unmarshal(body, &s.decoded)
	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, s)
	f.mu.Unlock()

	rep := f.script(n, s)
	if rep.hold > 0 {
		t := time.NewTimer(rep.hold)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		}
	}
	f.mu.Lock()
	f.reqs[n].done = time.Now()
	f.mu.Unlock()
	if rep.err != nil {
		return nil, rep.err
	}
	status := rep.status
	if status == 0 {
		status = 200
	}
	h := http.Header{}
	for k, v := range rep.header {
		h[http.CanonicalHeaderKey(k)] = []string{v}
	}
	var rb io.Reader = strings.NewReader(rep.body)
	if rep.cut {
		rb = io.MultiReader(strings.NewReader(rep.body[:min(3, len(rep.body))]), cutReader{})
	}
	return &http.Response{
		StatusCode: status, Status: http.StatusText(status), Header: h,
		Body: io.NopCloser(rb), Request: req,
		ContentLength: int64(len(rep.body)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}, nil
}

func (f *fakeAPI) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

// gap is the time from the answer of request i to the arrival of request i+1.
func gap(reqs []seen, i int) time.Duration { return reqs[i+1].at.Sub(reqs[i].done) }

// callbacks records what reached OnSuccess and OnError.
type callbacks struct {
	mu        sync.Mutex
	successes [][]Message
	errs      []errCall
}

type errCall struct {
	err  error
	msgs []Message
	at   time.Time
}

func (cb *callbacks) options() []Option {
	return []Option{
		WithOnSuccess(func(m []Message) {
			cb.mu.Lock()
			cb.successes = append(cb.successes, m)
			cb.mu.Unlock()
		}),
		WithOnError(func(err error, m []Message) {
			cb.mu.Lock()
			cb.errs = append(cb.errs, errCall{err: err, msgs: m, at: time.Now()})
			cb.mu.Unlock()
		}),
	}
}

func (cb *callbacks) delivered() []string {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	var ids []string
	for _, ms := range cb.successes {
		for _, m := range ms {
			ids = append(ids, m.ID())
		}
	}
	return ids
}

func (cb *callbacks) errors() []errCall {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return append([]errCall(nil), cb.errs...)
}

// dispositions counts, per messageId, the callback calls that included it.
func (cb *callbacks) dispositions() map[string]int {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	n := map[string]int{}
	for _, ms := range cb.successes {
		for _, m := range ms {
			n[m.ID()]++
		}
	}
	for _, e := range cb.errs {
		for _, m := range e.msgs {
			n[m.ID()]++
		}
	}
	return n
}

func (cb *callbacks) failedWith(target error) int {
	n := 0
	for _, e := range cb.errors() {
		if errors.Is(e.err, target) {
			n += len(e.msgs)
		}
	}
	return n
}

// newTestClient builds a client on the fake API with the recorder's callbacks.
// When the test ends, the accounting audit (audit_test.go) checks the client;
// pass noAudit("why") to turn it off.
func newTestClient(t testing.TB, api http.RoundTripper, cb *callbacks, opts ...Option) *Client {
	t.Helper()
	wire := &auditWire{next: api}
	all := []Option{WithEndpoint("http://api.test"), WithHTTPClient(&http.Client{Transport: wire})}
	if cb != nil {
		all = append(all, cb.options()...)
	}
	all = append(all, opts...)
	ramp := false
	for _, o := range opts {
		_, on := o.(withRamp)
		ramp = ramp || on
	}
	if !ramp {
		all = append(all, rampOff{}) // tests of other rules send full batches from the first request (R67's ramp over)
	}
	c, err := New("wk", all...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var probe settings
	for _, o := range all {
		o.apply(&probe)
	}
	if probe.httpClient == nil || probe.httpClient.Transport != wire {
		wire = nil // the test brought its own HTTP client: no wire counts
	}
	audit := true
	for _, o := range opts {
		if _, off := o.(noAudit); off {
			audit = false
		}
	}
	if audit {
		registerAudit(t, c, wire, cb)
	}
	return c
}

func track(id string) Track {
	return Track{MessageID: id, UserID: "u1", Event: "Tested", Properties: Properties{"n": 1}}
}

func mustTrack(t testing.TB, c *Client, id string) {
	t.Helper()
	if err := c.Track(track(id)); err != nil {
		t.Fatalf("Track(%s): %v", id, err)
	}
}

func closeClient(t testing.TB, c *Client, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Close(ctx)
}

func flush(t testing.TB, c *Client, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Flush(ctx)
}

// within asserts lo <= d <= hi.
func within(t testing.TB, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi {
		t.Errorf("%s = %v, want in [%v, %v]", what, d, lo, hi)
	}
}

// window is W_k of docs/delivery.md (timing notation) for a counted retry (fake time is exact, so
// no scheduling tolerance is needed beyond the jitter).
func window(k int) (time.Duration, time.Duration) {
	d := 500 * time.Millisecond << (k - 1)
	if k > 8 || d > 60*time.Second {
		d = 60 * time.Second
	}
	return time.Duration(float64(d) * 0.9), time.Duration(float64(d) * 1.1)
}
