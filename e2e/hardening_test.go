package e2e

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/e2e/faultserver"
)

// S45 (101) — a server that answers 101 Switching Protocols and holds the
// connection: each event fails at once as non-retryable with status 101,
// the consumer is not held, the run ends without waiting for the HTTP
// timeout, and the client closes the held connections (R15, R56).
func TestS45SwitchingProtocolsCLI(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		ids := []string{"s45-101-a", "s45-101-b", "s45-101-c"}
		r := runScenario(t, scenario{
			in: input{
				Sequences: one(tracks(ids...)...),
				// One consumer: the later batches are sent only if the first
				// 101 did not wedge it. The HTTP timeout is far above the run.
				Config: cfg("flushAt", 1, "consumers", 1, "httpTimeoutMs", 30_000, "closeTimeoutMs", 20_000),
			},
			respond: fixed(faultserver.SwitchingProtocols()),
		})
		expectCount(t, r.reqs, len(ids))
		for _, id := range ids {
			expectOutcome(t, r, id, outFailed, kindNonRetryable, 101)
		}
		if d := r.end.Sub(r.start); d > 15*time.Second {
			t.Errorf("R15: the run took %v; a 101 must be decided without waiting for its body", d)
		}
		// settled (runScenario) waited until the server saw every held
		// connection end: the client closed them, the server did not.
		for _, q := range r.reqs {
			if q.Status != 101 || !q.Done() {
				t.Errorf("request #%d: status %d, done %v; want a 101 whose connection the client closed", q.Index, q.Status, q.Done())
			}
		}
	})
}

// The same in process, with eight consumers and eight 101 answers (enough
// to hold every consumer if a 101 wedged one): the later events are
// delivered, each event gets exactly one callback, before Close returns,
// and Close returns at once.
func TestS45SwitchingProtocolsInProcess(t *testing.T) {
	t.Parallel()
	quiet(t)
	retry(t, func(t testing.TB) {
		var rs []faultserver.Response
		for range 8 {
			rs = append(rs, faultserver.SwitchingProtocols())
		}
		srv := serve(t, script(append(rs, ok200)...))
		rec := &callbacks{}
		c := newClient(t, srv.URL(), rec, analytics.WithFlushAt(1), analytics.WithConsumers(8),
			analytics.WithHTTPTimeout(30*time.Second))
		var ids []string
		for i := range 16 {
			id := fmt.Sprintf("s45-inproc-%02d", i)
			ids = append(ids, id)
			if err := c.Track(analytics.Track{MessageID: id, UserID: "u", Event: "e"}); err != nil {
				t.Fatalf("Track: %v", err)
			}
		}
		start := time.Now()
		closeClient(t, c)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Close took %v with 101 answers held open by the server", d)
		}
		outcome, calls := rec.snapshot()
		failed, delivered := 0, 0
		for _, id := range ids {
			if calls[id] != 1 {
				t.Errorf("INV1: %s in %d callback calls, want 1", id, calls[id])
			}
			switch outcome[id] {
			case outFailed:
				failed++
			case outDelivered:
				delivered++
			default:
				t.Errorf("%s: outcome %q", id, outcome[id])
			}
		}
		if failed != 8 || delivered != 8 {
			t.Errorf("failed %d, delivered %d; want 8 and 8 (the 101s fail, the rest go through)", failed, delivered)
		}
		srv.settled(t)
	})
}

// S38 (g) — a 307/308 to another host or another port is not followed: the
// event fails as a redirect, and the second server (a second listener)
// receives nothing, so neither the body's writeKey nor Authorization
// leaves the configured origin (R10, R11).
func TestS38gRedirectToAnotherHostCLI(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		to   func(second *server) string
	}{
		{"other-host", func(s *server) string { return s.URLAs("localhost") + "/v1/batch" }},
		{"other-port", func(s *server) string { return s.URL() + "/v1/batch" }},
	} {
		for _, st := range []int{307, 308} {
			t.Run(fmt.Sprintf("%s-%d", c.name, st), func(t *testing.T) {
				t.Parallel()
				retry(t, func(t testing.TB) {
					second := serve(t, nil)
					id := fmt.Sprintf("s38g-%s-%d", c.name, st)
					r := runScenario(t, scenario{
						in:      input{Sequences: one(track(id)), Config: cfg("flushAt", 1)},
						respond: fixed(faultserver.RedirectTo(st, c.to(second))),
					})
					expectCount(t, r.reqs, 1)
					expectOutcome(t, r, id, outFailed, kindRedirect, st)
					if got := second.Requests(); len(got) != 0 {
						t.Errorf("R11: the second server received %d request(s): %s", len(got), describe(got))
					}
					noKeyOutsideOrigin(t, second.Requests())
				})
			})
		}
	}
}

// The same in process: 8 events, the endpoint redirects every batch to
// another host; all fail as redirects, the other host sees nothing.
func TestS38gRedirectToAnotherHostInProcess(t *testing.T) {
	t.Parallel()
	quiet(t)
	second := serve(t, nil)
	origin := serve(t, fixed(faultserver.RedirectTo(307, second.URLAs("localhost")+"/v1/batch")))
	rec := &callbacks{}
	c := newClient(t, origin.URL(), rec, analytics.WithFlushAt(2))
	want := map[string]string{}
	for i := range 8 {
		id := fmt.Sprintf("s38g-inproc-%d", i)
		want[id] = outFailed
		if err := c.Track(analytics.Track{MessageID: id, UserID: "u", Event: "e"}); err != nil {
			t.Fatalf("Track: %v", err)
		}
	}
	closeClient(t, c)
	rec.expect(t, want)
	if got := second.Requests(); len(got) != 0 {
		t.Errorf("R11: the second server received %d request(s)", len(got))
	}
	for _, q := range origin.settled(t) {
		if q.Status != 307 {
			t.Errorf("origin request #%d answered %d", q.Index, q.Status)
		}
	}
}

// noKeyOutsideOrigin fails if any request carries the default write key in
// Authorization or in its body.
func noKeyOutsideOrigin(t testing.TB, reqs []faultserver.Request) {
	t.Helper()
	basic := base64.StdEncoding.EncodeToString([]byte(defaultWriteKey + ":"))
	for _, q := range reqs {
		if strings.Contains(q.Header.Get("Authorization"), basic) || strings.Contains(string(q.Body), defaultWriteKey) {
			t.Errorf("R11: the write key reached another server: %s %s", q.Method, q.Path)
		}
	}
}
