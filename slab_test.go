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
			size := 1 + r.IntN(slabSize/5) // a few events per slab, so slabs turn over often
			if r.IntN(50) == 0 {
				size = slabSize/4 + r.IntN(1000) // its own allocation
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

// inSlabEvent encodes m the way the client does without a disk buffer
// (straight into sc's slab) and keeps it.
func inSlabEvent(t testing.TB, sc *scratch, m Track) ([]byte, *slab) {
	t.Helper()
	sc.enc.buf, sc.enc.err = sc.buf[:0], nil
	sc.encodeInSlab()
	_, err := m.prepare(sc, false)
	require.NoError(t, err)
	require.NoError(t, checkSize(sc.enc.buf))
	data, sl := sc.keepEncoded()
	sc.enc.buf, sc.inSlab = nil, false
	return data, sl
}

// An event encoded straight into a slab is the JSON the encoder writes
// into its own buffer, whatever its size: one that fits the room kept, one
// that outgrows it (copied into a new slab), one larger than a quarter
// slab (kept in its own array unless it fit). Every event keeps its JSON while later
// events are written, and the holds add up: once every event is released
// and the scratch has moved on, each slab it used has gone back (count 0).
func TestEncodeInSlabKeepsEveryEvent(t *testing.T) {
	sc := &scratch{buf: make([]byte, 0, 1024), next: idsPerBlock, room: slabRoom}
	rng := rand.New(rand.NewPCG(3, 5))
	ts := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	type kept struct {
		data, want []byte
		sl         *slab
	}
	var evs []kept
	used := map[*slab]bool{}
	for i := range 400 {
		size := 1 + rng.IntN(600)
		switch {
		case i%37 == 0:
			size = slabRoom + rng.IntN(3*slabRoom) // may outgrow the room kept
		case i%101 == 0:
			size = slabSize/4 + rng.IntN(2000) // a large event
		}
		m := Track{MessageID: fmt.Sprintf("id-%d", i), UserID: "u", Event: "e", Timestamp: ts,
			Properties: Properties{"pad": strings.Repeat("x", size)}} // one key: map order
		want, err := encodeTrack(t, m)
		require.NoError(t, err)
		data, sl := inSlabEvent(t, sc, m)
		require.Equal(t, string(want), string(data), "event %d", i)
		if sl != nil {
			used[sl] = true
		} else {
			assert.Greater(t, len(want), slabSize/4, "only a large event that did not fit has its own array")
		}
		evs = append(evs, kept{data, want, sl})
	}
	for i, ev := range evs {
		require.Equal(t, string(ev.want), string(ev.data), "event %d after all were written", i)
	}
	all := make([]event, len(evs))
	for i, ev := range evs {
		all[i] = event{data: ev.data, slab: ev.sl}
	}
	poisoned := poisonFreedSlabs
	poisonFreedSlabs = false // the slabs may be reused by the time they are checked
	defer func() { poisonFreedSlabs = poisoned }()
	releaseEvents(all)
	sc.slab.release(slabTickets - sc.handed) // the scratch moves on
	for sl := range used {
		assert.Zero(t, sl.refs.Load(), "every used slab went back")
	}
	assert.Greater(t, len(used), 3, "the events filled several slabs")
}

// Events like the ones before them are written where they stay, with no
// allocation, and so is the next event of a size that once outgrew the
// room.
func TestEncodeInSlabAllocatesNothing(t *testing.T) {
	sc := &scratch{buf: make([]byte, 0, 1024), next: idsPerBlock, room: slabRoom}
	m := Track{MessageID: "id", UserID: "u", Event: "e", Timestamp: time.Now(), Properties: Properties{"plan": "pro", "amount": 42}}
	big := Track{MessageID: "id", UserID: "u", Event: "e", Timestamp: time.Now(), Properties: Properties{"pad": strings.Repeat("y", 3*slabRoom)}}
	var evs []event
	keep := func(m Track) {
		data, sl := inSlabEvent(t, sc, m)
		evs = append(evs, event{data: data, slab: sl})
	}
	evs = make([]event, 0, 10000)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { keep(m) }), "small events")
	keep(big) // outgrows the room kept at most once
	assert.Zero(t, testing.AllocsPerRun(100, func() { keep(big) }), "events of a size seen before")
	releaseEvents(evs)
}

// An event larger than the free room of the slab outgrows it: it is copied
// into a new slab (or kept in its own array when larger than a quarter
// slab), with the JSON the encoder wrote, and the room kept grows so that
// the next event of that size is written in place. The room shrinks back
// over the following slabs.
func TestEncodeInSlabOutgrowsTheRoom(t *testing.T) {
	ts := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	sized := func(n int) Track {
		return Track{MessageID: "id", UserID: "u", Event: "e", Timestamp: ts, Properties: Properties{"pad": strings.Repeat("z", n)}}
	}
	for _, n := range []int{3 * slabRoom, slabSize/4 + 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			sc := &scratch{buf: make([]byte, 0, 1024), next: idsPerBlock, room: slabRoom}
			sc.nextSlab()
			full := sc.slab
			full.buf = full.buf[:cap(full.buf)-slabRoom-10] // just above the room kept free
			sc.handed = 1                                   // an event of it is still held
			want, err := encodeTrack(t, sized(n))
			require.NoError(t, err)
			require.Greater(t, len(want), slabRoom+10)

			data, sl := inSlabEvent(t, sc, sized(n))
			assert.Equal(t, string(want), string(data))
			assert.NotSame(t, full, sl, "not in the slab it outgrew")
			assert.Equal(t, cap(full.buf)-slabRoom-10, len(full.buf), "nothing kept in the slab it outgrew")
			if n > slabSize/4 {
				assert.Nil(t, sl, "a large event keeps the array it outgrew into")
			} else {
				assert.Same(t, sc.slab, sl, "copied into the scratch's next slab")
			}
			assert.Equal(t, min(len(want), slabSize/4), sc.room, "room kept for the next such event")

			if n <= slabSize/4 {
				// a slab with just the room kept free takes the next one in place
				sc.slab.buf = sc.slab.buf[:cap(sc.slab.buf)-sc.room]
				before := sc.slab
				again, sl := inSlabEvent(t, sc, sized(n))
				assert.Equal(t, string(want), string(again))
				assert.Same(t, before, sl, "written in place")
				assert.Equal(t, cap(sl.buf), len(sl.buf), "at the end of the slab")
			}

			sc.nextSlab()
			assert.Greater(t, sc.room, min(len(want), slabSize/4)*3/4, "kept on the next slab")
			for range 30 {
				sc.nextSlab()
			}
			assert.Equal(t, slabRoom, sc.room, "the room shrinks back over later slabs")
		})
	}
}
