package analyticstest_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticstest"
)

// post sends one well-formed batch request to srv and returns the answer's
// status, Retry-After header and body, or the transport's error.
func post(t *testing.T, srv *analyticstest.Server, body string) (int, string, string, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL()+"/v1/batch", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("key", "")
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b), nil
}

const oneEvent = `{"batch":[{"type":"track","messageId":"m1","userId":"u","event":"e"}]}`

func statuses(srv *analyticstest.Server) []int {
	var out []int
	for _, r := range srv.Requests() {
		out = append(out, r.Status)
	}
	return out
}

// FailNext answers exactly n requests with the fault (Retry-After in whole
// seconds, rounded up), records them, and then the normal answer resumes;
// the default fault is a 503 with a message.
func TestServerFailNext(t *testing.T) {
	srv := analyticstest.NewServer(t)
	srv.FailNext(2, analyticstest.Fault{Status: http.StatusTooManyRequests, RetryAfter: 1500 * time.Millisecond, Body: `{"message":"slow down"}`})
	for i := range 2 {
		status, retryAfter, body, err := post(t, srv, oneEvent)
		if err != nil || status != 429 || retryAfter != "2" || body != `{"message":"slow down"}` {
			t.Fatalf("request %d: %d Retry-After %q %q %v, want 429 Retry-After \"2\" and the fault's body", i, status, retryAfter, body, err)
		}
	}
	if status, retryAfter, body, err := post(t, srv, oneEvent); err != nil || status != 200 || retryAfter != "" || body != "{}" {
		t.Fatalf("third request: %d Retry-After %q %q %v, want 200 without Retry-After", status, retryAfter, body, err)
	}
	if got := fmt.Sprint(statuses(srv)); got != "[429 429 200]" {
		t.Errorf("recorded statuses %s, want [429 429 200]", got)
	}
	if ids := srv.MessageIDs(); len(ids) != 1 {
		t.Errorf("Events from %d requests, want only the one answered 200", len(ids))
	}

	srv.FailNext(1, analyticstest.Fault{})
	if status, retryAfter, body, _ := post(t, srv, oneEvent); status != 503 || retryAfter != "" || body != `{"message":"Service Unavailable"}` {
		t.Errorf("default fault: %d Retry-After %q %q, want 503 with a message and no Retry-After", status, retryAfter, body)
	}
	srv.FailNext(5, analyticstest.Fault{})
	srv.Reset()
	if status, _, _, _ := post(t, srv, oneEvent); status != 200 {
		t.Errorf("after Reset: %d, want 200", status)
	}
}

// FailFor fails every request until its duration has passed on the
// Server's clock, and not a request after.
func TestServerFailFor(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	srv := analyticstest.NewServer(t, analyticstest.WithServerClock(clock))
	srv.FailFor(30*time.Second, analyticstest.Fault{Status: 500})
	for _, step := range []time.Duration{0, 10 * time.Second, 19*time.Second + 999*time.Millisecond} {
		advance(step)
		if status, _, _, _ := post(t, srv, oneEvent); status != 500 {
			t.Fatalf("%v into a 30 s fault: %d, want 500", clock().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), status)
		}
	}
	advance(time.Millisecond)
	if status, _, _, _ := post(t, srv, oneEvent); status != 200 {
		t.Fatalf("30 s after FailFor(30s): %d, want 200", status)
	}
	srv.FailFor(time.Minute, analyticstest.Fault{})
	srv.FailFor(0, analyticstest.Fault{})
	if status, _, _, _ := post(t, srv, oneEvent); status != 200 {
		t.Errorf("FailFor(0) ends the fault; got %d", status)
	}
}

// Down refuses connections at the same address until Up; the client's
// events sent meanwhile arrive once the Server is up again, at the same
// URL.
func TestServerDownAndUp(t *testing.T) {
	srv := analyticstest.NewServer(t)
	url := srv.URL()
	srv.Down()
	srv.Down() // twice is harmless
	if _, _, _, err := post(t, srv, oneEvent); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("request while down: %v, want connection refused", err)
	}

	failed := make(chan struct{}, 1)
	c := newClient(t, srv, analytics.WithFlushAt(1), analytics.WithAttemptHook(func(a analytics.AttemptInfo) {
		if a.Err != nil {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	}))
	if err := c.Track(analytics.Track{MessageID: "while-down", UserID: "u", Event: "e"}); err != nil {
		t.Fatal(err)
	}
	<-failed // an attempt met the refused connection
	if err := srv.Up(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Up(); err != nil {
		t.Fatalf("Up on a Server that is up: %v", err)
	}
	if srv.URL() != url {
		t.Errorf("URL after Up %s, want %s", srv.URL(), url)
	}
	closeClient(t, c)
	if ids := srv.MessageIDs(); len(ids) != 1 || ids[0] != "while-down" {
		t.Errorf("delivered %v, want [while-down]", ids)
	}
	if got := fmt.Sprint(statuses(srv)); got != "[200]" {
		t.Errorf("recorded %s: nothing can be recorded while down", got)
	}
	srv.Close()
	if err := srv.Up(); err == nil {
		t.Error("Up after Close succeeded")
	}
}

// SetBodyLimit answers 413 above the limit, and the client, learning it,
// delivers every event of a larger batch in smaller requests.
func TestServerBodyLimit(t *testing.T) {
	srv := analyticstest.NewServer(t)
	srv.SetBodyLimit(len(oneEvent))
	if status, _, _, _ := post(t, srv, oneEvent); status != 200 {
		t.Fatalf("a body at the limit: %d, want 200", status)
	}
	srv.SetBodyLimit(len(oneEvent) - 1)
	if status, _, _, _ := post(t, srv, oneEvent); status != 413 {
		t.Fatalf("a body one byte over: %d, want 413", status)
	}
	if r := srv.Requests()[1]; r.Status != 413 || len(r.Body) != 0 {
		t.Errorf("the refused request is recorded as %d with %d body bytes, want 413 without its body", r.Status, len(r.Body))
	}

	srv.Reset()
	srv.SetBodyLimit(2000)
	c := newClient(t, srv, analytics.WithFlushAt(20))
	pad := strings.Repeat("x", 200)
	for i := range 20 {
		if err := c.Track(analytics.Track{MessageID: fmt.Sprint("m", i), UserID: "u", Event: "e", Properties: analytics.Properties{"pad": pad}}); err != nil {
			t.Fatal(err)
		}
	}
	closeClient(t, c)
	seen := map[string]int{}
	for _, id := range srv.MessageIDs() {
		seen[id]++
	}
	if len(seen) != 20 {
		t.Errorf("%d distinct events delivered, want 20", len(seen))
	}
	tooLarge := 0
	for _, r := range srv.Requests() {
		if r.Status == 413 {
			tooLarge++
		}
		if r.Status == 200 && len(r.Body) > 2000 {
			t.Errorf("a %d-byte body was accepted over the 2000-byte limit", len(r.Body))
		}
	}
	if tooLarge == 0 {
		t.Error("no 413: the 20-event batch (about 5 KB) fit the 2000-byte limit?")
	}
}
