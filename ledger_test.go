package analytics

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// S33, R41: Flush waits through a rate-limit wait, no longer.
func TestFlushWaitsThroughRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(ra(429, "2"), reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb)
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, 10*time.Second))
		reqs := api.requests()
		require.Len(t, reqs, 2)
		assert.Equal(t, 2*time.Second, time.Since(reqs[0].done))
		assert.Equal(t, []string{"m1"}, cb.delivered(), "OnSuccess ran before Flush returned")
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R41: Flush waits for exactly the events accepted before it, and is reusable.
func TestFlushOrderingAndReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if r.ids[0] == "slow" {
				return reply{status: 200, hold: 10 * time.Second}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(2), WithFlushInterval(time.Hour))
		mustTrack(t, c, "a")
		require.NoError(t, flush(t, c, time.Second))
		assert.Equal(t, []string{"a"}, cb.delivered())

		mustTrack(t, c, "slow")
		synctest.Wait()
		// A Flush that times out hands nothing back; delivery goes on.
		err := flush(t, c, time.Second)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Empty(t, cb.errors())
		start := time.Now()
		require.NoError(t, flush(t, c, time.Minute))
		assert.Equal(t, 9*time.Second, time.Since(start))
		assert.Equal(t, []string{"a", "slow"}, cb.delivered())
		// Nothing outstanding: Flush returns at once, as often as called.
		for i := 0; i < 3; i++ {
			start = time.Now()
			require.NoError(t, flush(t, c, time.Second))
			assert.Zero(t, time.Since(start))
		}
		require.NoError(t, closeClient(t, c, time.Second))
		assert.ErrorIs(t, flush(t, c, time.Second), ErrClosed)
	})
}

// R29, R41: Flush waits for batches in the waiting room, and returns once
// the last of them has its disposition.
func TestFlushWaitsForWaitingBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 503}, reply{status: 503}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		mustTrack(t, c, "e1")
		start := time.Now()
		require.NoError(t, flush(t, c, time.Minute))
		took := time.Since(start)
		reqs := api.requests()
		require.Len(t, reqs, 3)
		assert.Equal(t, reqs[2].done, time.Now(), "Flush returned when the last answer arrived")
		lo1, _ := window(1)
		lo2, _ := window(2)
		assert.GreaterOrEqual(t, took, lo1+lo2)
		assert.Equal(t, []string{"e1"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// Flush keeps nothing per call: an app that calls Flush for every request
// during a long rate-limit episode, while an older event is pending, must
// not grow without bound (the ledger holds at most one epoch per
// outstanding event).
func TestFlushMemoryBoundedWhileEventPending(t *testing.T) {
	api := newFakeAPI(func(int, seen) reply { return reply{status: 200, hold: time.Hour} })
	c := newTestClient(t, api, nil, WithFlushAt(1))
	mustTrack(t, c, "held")
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := 0; i < 200_000; i++ {
		require.Error(t, c.Flush(expired))
	}
	grew := int64(heap()) - int64(before)
	assert.Less(t, grew, int64(1<<20), "200 000 Flush calls kept %d bytes", grew)
	require.ErrorIs(t, closeClient(t, c, 10*time.Millisecond), ErrShutdownInterrupted)
}

// A nil context means context.Background(), for Flush and Close alike, and
// Close(nil) stops the client completely (goleak checks that no consumer
// is left running).
func TestNilContexts(t *testing.T) {
	c := newTestClient(t, newFakeAPI(nil), nil, WithFlushAt(1))
	mustTrack(t, c, "e1")
	//lint:ignore SA1012 a nil context is what this test is about
	require.NoError(t, c.Flush(nil)) //nolint:staticcheck
	//lint:ignore SA1012 a nil context is what this test is about
	require.NoError(t, c.Close(nil)) //nolint:staticcheck
	//lint:ignore SA1012 a nil context is what this test is about
	assert.ErrorIs(t, c.Close(nil), ErrClosed) //nolint:staticcheck
	assert.ErrorIs(t, c.Track(track("e2")), ErrClosed)
}
