package e2e

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/relaykit/analytics-go"
)

// callbacks records the SDK's OnSuccess/OnError calls of an in-process
// client, by messageId.
type callbacks struct {
	mu       sync.Mutex
	outcome  map[string]string // messageId → outcome of its first callback
	calls    map[string]int    // messageId → number of callback calls that included it
	errs     map[string]error  // messageId → OnError's error
	okCalls  int               // OnSuccess calls (batches delivered)
	errCalls int
}

func (c *callbacks) record(id, outcome string, err error) {
	if c.outcome == nil {
		c.outcome, c.calls, c.errs = map[string]string{}, map[string]int{}, map[string]error{}
	}
	if c.calls[id] == 0 {
		c.outcome[id] = outcome
		c.errs[id] = err
	}
	c.calls[id]++
}

func (c *callbacks) options() []analytics.Option {
	return []analytics.Option{
		analytics.WithOnSuccess(func(msgs []analytics.Message) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.okCalls++
			for _, m := range msgs {
				c.record(m.ID(), outDelivered, nil)
			}
		}),
		analytics.WithOnError(func(err error, msgs []analytics.Message) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.errCalls++
			out := outFailed
			if errors.Is(err, analytics.ErrShutdownInterrupted) {
				out = outHandedBack
			}
			for _, m := range msgs {
				c.record(m.ID(), out, err)
			}
		}),
	}
}

// snapshot returns copies of the per-id outcome and call counts.
func (c *callbacks) snapshot() (outcome map[string]string, calls map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	outcome, calls = map[string]string{}, map[string]int{}
	for k, v := range c.outcome {
		outcome[k] = v
	}
	for k, v := range c.calls {
		calls[k] = v
	}
	return outcome, calls
}

// expect checks that exactly the given ids got callbacks, each in exactly
// one call, with the given outcomes (INV1).
func (c *callbacks) expect(t testing.TB, want map[string]string) {
	t.Helper()
	outcome, calls := c.snapshot()
	for id, w := range want {
		if calls[id] != 1 {
			t.Errorf("INV1: %s in %d callback calls, want 1", id, calls[id])
		}
		if outcome[id] != w {
			t.Errorf("%s: outcome %q, want %q", id, outcome[id], w)
		}
	}
	for id := range calls {
		if _, ok := want[id]; !ok {
			t.Errorf("unexpected callback for %s (%s)", id, outcome[id])
		}
	}
}

// newClient returns an in-process client for endpoint with rec's callbacks;
// it is closed (5 s deadline) when the test ends, if the test did not.
func newClient(t testing.TB, endpoint string, rec *callbacks, opts ...analytics.Option) *analytics.Client {
	t.Helper()
	all := append([]analytics.Option{analytics.WithEndpoint(endpoint)}, rec.options()...)
	all = append(all, opts...)
	c, err := analytics.New(defaultWriteKey, all...)
	if err != nil {
		t.Fatalf("analytics.New: %v", err)
	}
	t.Cleanup(func() {
		closeClient(t, c)
		auditClient(t, c, rec)
	})
	return c
}

// auditClient is the accounting audit of an in-process client after Close:
// no event left without an outcome, the Stats identities, and (with the
// recorder) every accepted event in exactly one callback call (R41, R42).
// It waits briefly for hand-back callbacks that outlived Close.
func auditClient(t testing.TB, c *analytics.Client, rec *callbacks) {
	t.Helper()
	st := c.Stats()
	for i := 0; i < 200 && st.Pending > 0; i++ {
		time.Sleep(10 * time.Millisecond)
		st = c.Stats()
	}
	if t.Failed() {
		return
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("accounting audit: "+format+"\nstats: %+v", append(args, st)...)
	}
	if st.Pending != 0 {
		fail("Pending %d after Close, want 0 (R41)", st.Pending)
	}
	if in, out := st.Accepted+st.Replayed, st.Delivered+st.Failed+st.HandedBack; in != out {
		fail("Accepted+Replayed = %d, Delivered+Failed+HandedBack = %d (R42)", in, out)
	}
	if st.Batches > st.Requests || st.Batches > st.Delivered || st.Retries > st.Requests {
		fail("Batches, Retries, Requests and Delivered do not fit")
	}
	if rec == nil {
		return
	}
	_, calls := rec.snapshot()
	var total int64
	for id, n := range calls {
		total += int64(n)
		if n != 1 {
			fail("%s in %d callback calls, want 1 (R42)", id, n)
		}
	}
	if total != st.Accepted+st.Replayed {
		fail("%d event(s) in callback calls, %d accepted (R42)", total, st.Accepted+st.Replayed)
	}
}

// closeClient closes c with a 5 s deadline; ErrClosed (already closed) is fine.
func closeClient(t testing.TB, c *analytics.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil && !errors.Is(err, analytics.ErrClosed) {
		t.Errorf("Close: %v", err)
	}
}

// quiet waits until the background build of the e2e-cli has finished, so
// that in-process timing checks do not compete with the compiler for the
// CPU.
func quiet(t testing.TB) {
	t.Helper()
	<-cliReady
}
