package analytics

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaykit/analytics-go/internal/diskbuf"
)

// The accounting audit runs when a test that built its client with
// newTestClient ends (t.Cleanup; under synctest the cleanup runs inside the
// bubble, so fake time applies). It closes the client if the test did not
// (short deadline), waits for hand-back callbacks that outlived Close, and
// checks what every test would otherwise have to check by hand:
//
//   - every capacity place is released and the waiting room is empty
//     (R43, R44);
//   - the ledger is empty and Stats.Pending is 0 (R41);
//   - every accepted event has one outcome: Accepted + Replayed =
//     Delivered + Failed + HandedBack (R42); with the callbacks recorder,
//     each accepted event is in exactly one callback call;
//   - Requests ≥ Batches, Delivered ≥ Batches, Retries ≤ Requests;
//   - against the wire (the transport newTestClient was given): Requests
//     equals the attempts that reached the transport, and the attempts
//     that were not a batch's first (X-Retry-Count present) are the
//     counted retries sent (Stats.Retries), the rate-limited retries
//     (at most RateLimited) and the first sends of 413 halves (at most two
//     per 413): without rate limiting and 413, Retries = Requests − first
//     attempts exactly;
//   - in durable mode, the directory holds exactly the handed-back (kept)
//     events, unless a later client of the same test opened it; with the
//     callbacks recorder, no callback has them and their number is
//     Stats.OnDisk (a kept event gets no callback from this client).
//
// A test that breaks accounting on purpose passes noAudit("why").

// noAudit is a test-only Option that turns the audit off for one client.
// The reason is required: say which identity the test breaks and why.
type noAudit string

func (noAudit) apply(*settings) {}

// auditWire counts the attempts that reach the transport.
type auditWire struct {
	next http.RoundTripper

	mu       sync.Mutex
	attempts int // POST …/v1/batch round trips that are not redirect hops
	first    int // of which without X-Retry-Count
	split    int // answered 413 (each may cause two re-sends of halves; a 400 may too: Stats.Isolations)
}

func (w *auditWire) RoundTrip(req *http.Request) (*http.Response, error) {
	batch := strings.HasSuffix(req.URL.Path, "/v1/batch") && req.Response == nil
	if batch {
		w.mu.Lock()
		w.attempts++
		if req.Header.Get("X-Retry-Count") == "" {
			w.first++
		}
		w.mu.Unlock()
	}
	resp, err := w.next.RoundTrip(req)
	if batch && err == nil && resp != nil && resp.StatusCode == http.StatusRequestEntityTooLarge {
		w.mu.Lock()
		w.split++
		w.mu.Unlock()
	}
	return resp, err
}

// durableOwners remembers, per disk buffer directory, the client that
// opened it last: only that one's audit may read the directory.
var durableOwners sync.Map // dir → *Client

// auditCloseDeadline bounds the Close the audit makes for a test that did
// not close its client.
const auditCloseDeadline = 200 * time.Millisecond

func registerAudit(t testing.TB, c *Client, wire *auditWire, cb *callbacks) {
	if c.disk != nil {
		durableOwners.Store(c.disk.dir, c)
	}
	t.Cleanup(func() { auditClient(t, c, wire, cb) })
}

func auditClient(t testing.TB, c *Client, wire *auditWire, cb *callbacks) {
	t.Helper()
	if !c.closed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), auditCloseDeadline)
		_ = c.Close(ctx)
		cancel()
	}
	// Close may return while hand-back callbacks (or a callback a consumer
	// runs) still go on; the ledger is discharged after each callback.
	for i := 0; i < 500 && c.q.outstanding() > 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if t.Failed() {
		return // the test's own failure says more; do not pile on
	}
	st := c.Stats()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("accounting audit: "+format+"\nstats: %+v", append(args, st)...)
	}
	if n := c.q.outstanding(); n != 0 || st.Pending != 0 {
		fail("ledger holds %d event(s) after Close (Pending %d), want 0 (R41)", n, st.Pending)
	}
	if h := c.q.places.held(); h != 0 {
		fail("%d capacity place(s) still held after Close, want 0 (R43, R44)", h)
	}
	c.room.mu.Lock()
	waiting := len(c.room.waiting)
	c.room.mu.Unlock()
	if waiting != 0 {
		fail("%d batch(es) left in the waiting room after Close", waiting)
	}
	if in, out := st.Accepted+st.Replayed, st.Delivered+st.Failed+st.HandedBack; in != out {
		fail("Accepted+Replayed = %d, Delivered+Failed+HandedBack = %d (R42)", in, out)
	}
	if st.Batches > st.Requests || st.Batches > st.Delivered || (st.Delivered > 0 && st.Batches == 0) {
		fail("Batches %d does not fit Requests %d and Delivered %d", st.Batches, st.Requests, st.Delivered)
	}
	if st.Retries > st.Requests {
		fail("Retries %d > Requests %d", st.Retries, st.Requests)
	}
	if wire != nil {
		wire.mu.Lock()
		attempts, first, split := int64(wire.attempts), int64(wire.first), int64(wire.split)
		wire.mu.Unlock()
		others := attempts - first
		recuts := c.settle.stats.recuts.Load()
		switch {
		case st.Requests != attempts:
			fail("Requests %d, but %d attempt(s) reached the transport", st.Requests, attempts)
		case st.Retries > others:
			fail("Retries %d, but only %d attempt(s) were not a batch's first (retries counted but not sent?)", st.Retries, others)
		case others-st.Retries > st.RateLimited+2*split+2*st.Isolations+recuts:
			fail("%d attempt(s) were not a batch's first, Retries %d: %d re-send(s) not accounted for by RateLimited %d, %d 413 split(s), %d 400 isolation(s) and %d cut(s) of a refused batch",
				others, st.Retries, others-st.Retries, st.RateLimited, split, st.Isolations, recuts)
		}
	}
	if cb != nil {
		// Events Close kept on disk get no callback (Stats.OnDisk; they
		// are in HandedBack).
		auditCallbacks(t, cb, st.Accepted+st.Replayed-st.OnDisk, fail)
	}
	if c.disk != nil {
		if owner, _ := durableOwners.Load(c.disk.dir); owner == c {
			auditDisk(t, c.disk.dir, st, cb, fail)
		}
	}
}

func auditCallbacks(t testing.TB, cb *callbacks, accepted int64, fail func(string, ...any)) {
	t.Helper()
	var total int64
	twice := 0
	for _, n := range cb.dispositions() {
		total += int64(n)
		if n > 1 {
			twice++
		}
	}
	if total != accepted {
		fail("%d event(s) in callback calls, %d accepted (R42)", total, accepted)
	} else if twice > 0 {
		fail("%d messageId(s) in more than one callback call (R42)", twice)
	}
}

// auditDisk reopens a closed client's directory: what is left must be
// exactly the handed-back events (durable mode keeps them, R38).
func auditDisk(t testing.TB, dir string, st Stats, cb *callbacks, fail func(string, ...any)) {
	t.Helper()
	log, recs, err := diskbuf.Open(dir, diskbuf.Options{})
	if err != nil {
		fail("reopen %s: %v", dir, err)
		return
	}
	defer log.Close()
	if int64(len(recs)) != st.HandedBack {
		fail("the directory holds %d event(s), %d were handed back (kept)", len(recs), st.HandedBack)
		return
	}
	if cb == nil {
		return
	}
	seen := cb.dispositions()
	unread := int64(0) // handed back: kept without a callback
	for _, r := range recs {
		var ev struct {
			MessageID string `json:"messageId"`
		}
		if json.Unmarshal(r.Data, &ev) != nil {
			fail("the directory holds a record that is not an event")
			return
		}
		if seen[ev.MessageID] > 0 {
			fail("the directory holds %q, which had a callback", ev.MessageID)
			return
		}
		unread++
	}
	if unread != st.OnDisk {
		fail("the directory holds %d event(s) that got no callback, Stats.OnDisk is %d", unread, st.OnDisk)
	}
}

// auditLater registers the audit for a client a test built with New itself
// (its own server or HTTP client: no wire counts). cb is the recorder whose
// options the client was given, or nil.
func auditLater(t testing.TB, c *Client, cb *callbacks) {
	registerAudit(t, c, nil, cb)
}
