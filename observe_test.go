package analytics

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every enqueue call is counted once: accepted, or rejected by reason.
func TestStatsCountEnqueueOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{hold: time.Hour}))
		c := newTestClient(t, api, nil, WithQueueCapacity(1), WithConsumers(1), WithFlushAt(1))
		require.NoError(t, c.Track(track("a"))) // taken by the consumer, held in flight
		synctest.Wait()
		require.NoError(t, c.Track(track("b"))) // fills the queue
		assert.ErrorIs(t, c.Track(track("c")), ErrQueueFull)
		assert.ErrorIs(t, c.Track(Track{UserID: "u"}), ErrInvalidMessage)
		assert.ErrorIs(t, c.Enqueue(nil), ErrInvalidMessage)
		big := Track{UserID: "u", Event: "E", Properties: Properties{"x": strings.Repeat("x", MaxEventBytes)}}
		assert.ErrorIs(t, c.Track(big), ErrEventTooLarge)
		_ = closeClient(t, c, time.Second)
		assert.ErrorIs(t, c.Track(track("d")), ErrClosed)
		assert.ErrorIs(t, c.Track(Track{}), ErrClosed)

		s := c.Stats()
		assert.Equal(t, int64(2), s.Accepted)
		assert.Equal(t, int64(1), s.RejectedQueueFull)
		assert.Equal(t, int64(2), s.RejectedInvalid)
		assert.Equal(t, int64(1), s.RejectedTooLarge)
		assert.Equal(t, int64(2), s.RejectedClosed)
	})
}

// The attempt hook sees each attempt as the server saw it: events, body
// bytes, status, retry number; a transport error has no status.
func TestAttemptHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 503, hold: 40 * time.Millisecond}, reply{err: errors.New("connection reset")}, reply{status: 200}))
		var (
			mu    sync.Mutex
			infos []AttemptInfo
		)
		c := newTestClient(t, api, nil, WithGzip(true), WithFlushAt(2), WithAttemptHook(func(a AttemptInfo) {
			mu.Lock()
			defer mu.Unlock()
			infos = append(infos, a)
		}))
		mustTrack(t, c, "a")
		mustTrack(t, c, "b")
		require.NoError(t, closeClient(t, c, time.Minute))

		reqs := api.requests()
		require.Len(t, reqs, 3)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, infos, 3)
		for i, a := range infos {
			assert.Equal(t, 2, a.Events, "attempt %d", i)
			assert.Equal(t, i, a.Retry, "attempt %d", i)
			assert.Equal(t, len(reqs[i].raw), a.Bytes, "attempt %d: the gzipped body as sent", i)
		}
		assert.Equal(t, 503, infos[0].Status)
		assert.NoError(t, infos[0].Err)
		assert.Equal(t, 40*time.Millisecond, infos[0].Duration, "fake time: the server's hold")
		assert.Zero(t, infos[1].Status)
		assert.ErrorContains(t, infos[1].Err, "connection reset")
		assert.Equal(t, 200, infos[2].Status)
	})
}

// A panicking hook is logged; delivery goes on.
func TestAttemptHookPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithAttemptHook(func(AttemptInfo) { panic("hook") }))
		mustTrack(t, c, "a")
		require.NoError(t, closeClient(t, c, time.Second))
		assert.Equal(t, []string{"a"}, cb.delivered())
		assert.Equal(t, int64(1), c.Stats().Delivered)
	})
}
