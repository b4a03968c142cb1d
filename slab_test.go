package analytics

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/analytics-go/internal/wire"
)

// Event JSON lives in slabs that are reused once every event cut from them
// has its disposition. If a slab came back too early, a later event would
// overwrite the JSON of one still waiting (in the queue, in a retry, in a
// re-queued batch), and the server would receive the wrong content under
// the right messageId. This runs every path an event can take, with many
// producers, and compares every event the server received with what its
// producer enqueued.
func TestEventJSONIntactThroughReuse(t *testing.T) {
	for _, withCallbacks := range []bool{false, true} {
		t.Run(fmt.Sprintf("callbacks=%v", withCallbacks), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runIntegrity(t, withCallbacks) })
		})
	}
}

func runIntegrity(t *testing.T, withCallbacks bool) {
	var rmu sync.Mutex
	rng := rand.New(rand.NewPCG(7, 11))
	var stalled atomic.Bool // the server stops answering in time: Close hands back
	api := newFakeAPI(func(n int, _ seen) reply {
		if stalled.Load() {
			return reply{status: 200, hold: time.Minute}
		}
		rmu.Lock()
		x := rng.IntN(100)
		rmu.Unlock()
		switch {
		case x < 12:
			return reply{status: 500}
		case x < 20:
			return ra(429, "1")
		case x < 23:
			return reply{status: 422} // fails whole (a 400 would be isolated, R66)
		case x < 30:
			return reply{status: 200, hold: 2 * time.Second}
		}
		return reply{status: 200}
	})
	var cb *callbacks
	if withCallbacks {
		cb = &callbacks{}
	}
	c := newTestClient(t, api, cb, WithConsumers(3), WithFlushAt(9), WithQueueCapacity(40),
		WithMaxRetries(2))

	const producers, perProducer = 4, 300
	var mu sync.Mutex
	want := map[string]string{} // messageId → the "pad" property it was sent with
	accepted := map[string]bool{}
	var wg sync.WaitGroup
	produce := func(p, from, to int) {
		r := rand.New(rand.NewPCG(uint64(p), uint64(from)))
		for i := from; i < to; i++ {
			id := fmt.Sprintf("p%d-%d", p, i)
			size := 1 + r.IntN(wire.SlabSize/5) // a few events per slab, so slabs turn over often
			if r.IntN(50) == 0 {
				size = wire.SlabSize/4 + r.IntN(1000) // its own allocation
			}
			pad := strings.Repeat(string(rune('a'+(p*perProducer+i)%26)), size)
			m := Track{MessageID: id, UserID: "u", Event: "e", Properties: Properties{"pad": pad, "i": i}}
			var err error
			if p%2 == 0 {
				err = c.Track(m) // may be refused: queue full
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err = c.EnqueueContext(ctx, m)
				cancel()
			}
			mu.Lock()
			want[id] = pad
			if err == nil {
				accepted[id] = true
			} else if !errors.Is(err, ErrQueueFull) {
				t.Errorf("enqueue %s: %v", id, err)
			}
			mu.Unlock()
			if i%5 == 0 {
				time.Sleep(250 * time.Millisecond)
			}
		}
	}
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			produce(p, 0, perProducer)
		}()
	}
	wg.Wait()
	stalled.Store(true)
	produce(1, perProducer, perProducer+20)
	// The last batches are still in flight at the deadline: handed back.
	_ = closeClient(t, c, 1500*time.Millisecond)

	received := 0
	for _, r := range api.requests() {
		batch, _ := r.decoded["batch"].([]any)
		require.NotEmpty(t, batch, "request body is not a batch: %.200q", r.body)
		require.Len(t, batch, len(r.ids))
		for k, e := range batch {
			ev := e.(map[string]any)
			props := ev["properties"].(map[string]any)
			id := r.ids[k]
			require.True(t, accepted[id], "server got %s, which was not accepted", id)
			require.Equal(t, want[id], props["pad"], "content of %s", id)
			received++
		}
	}
	s := c.Stats()
	assert.Equal(t, int64(len(accepted)), s.Delivered+s.Failed+s.HandedBack, "one disposition per accepted event")
	assert.Greater(t, received, len(accepted), "retries and re-queues re-sent events")
	t.Logf("stats %+v received %d", s, received)
	assert.Positive(t, s.Delivered)
	assert.Positive(t, s.Failed)
	assert.Positive(t, s.RateLimited)
	assert.Positive(t, s.RejectedQueueFull)
	assert.Positive(t, s.HandedBack)
	if cb != nil {
		n := cb.dispositions()
		assert.Len(t, n, len(accepted))
		for id := range accepted {
			assert.Equal(t, 1, n[id], "dispositions of %s", id)
		}
	}
}
