package analytics

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// R72: in durable mode, Close during an outage does not wait
// out its deadline. Once the server is not answering (failing, and its
// latest answer a failure), every event without an outcome — queued,
// waiting for a retry, on the wire (the request is cancelled) or on disk
// only — is already in the disk buffer: Close syncs it and returns at
// once, with an error that counts the kept events and says why, and no
// callback runs for them. The next client, once the server is back,
// delivers every one of them.
func TestDurableCloseDuringOutage(t *testing.T) {
	for _, tc := range []struct {
		name string
		down reply
	}{
		{"500 after 2 s", reply{status: 500, hold: 2 * time.Second}}, // requests are on the wire at Close
		{"connection refused", reply{err: refused}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				start := time.Now()
				api := newFakeAPI(phased(start, phase{3 * time.Second, reply{status: 200}}, phase{0, tc.down}))
				cb := &callbacks{}
				c := newTestClient(t, api, cb, WithDiskBuffer(dir), WithFlushAt(10), WithQueueCapacity(100))
				ids := produce(t, c, "o", 20*time.Millisecond, 20*time.Second)
				delivered := cb.delivered()
				began := time.Now()
				err := closeClient(t, c, 10*time.Second)
				took := time.Since(began)
				kept := len(ids) - len(delivered)
				if took > 100*time.Millisecond {
					t.Errorf("Close(10 s) took %v during the outage", took)
				}
				if !errors.Is(err, ErrShutdownInterrupted) || !strings.Contains(err.Error(), "the server is not answering") ||
					!strings.Contains(err.Error(), fmt.Sprintf("%d event(s) handed back (kept in the disk buffer)", kept)) {
					t.Errorf("Close: %v; want %d events kept because the server is not answering", err, kept)
				}
				if errs := cb.errors(); len(errs) != 0 {
					t.Errorf("OnError ran for kept events: %v", errs[0].err)
				}
				if st := c.Stats(); st.OnDisk != int64(kept) || st.HandedBack != int64(kept) || kept < 500 {
					t.Errorf("OnDisk %d, HandedBack %d; want both %d (and hundreds)", st.OnDisk, st.HandedBack, kept)
				}

				api2 := newFakeAPI(nil)
				cb2 := &callbacks{}
				c2 := newTestClient(t, api2, cb2, WithDiskBuffer(dir))
				if err := closeClient(t, c2, 10*time.Second); err != nil {
					t.Fatalf("the next client's Close: %v", err)
				}
				got := append(slices.Clone(delivered), sentIDs(api2)...)
				slices.Sort(got)
				if distinct := slices.Compact(slices.Clone(got)); !slices.Equal(distinct, ids) || len(got) != len(ids) {
					t.Errorf("%d distinct events delivered over both clients (%d sends), want %d once each", len(distinct), len(got), len(ids))
				}
				if len(cb2.delivered()) != kept {
					t.Errorf("the next client's OnSuccess got %d events, want %d", len(cb2.delivered()), kept)
				}
			})
		})
	}
}
