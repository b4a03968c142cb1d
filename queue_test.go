package analytics

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// S35, R43: a full queue rejects at once; made deterministic by a busy consumer.
func TestQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 200, hold: 3 * time.Second}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithQueueCapacity(2), WithConsumers(1), WithFlushAt(1))
		mustTrack(t, c, "e1")
		synctest.Wait()
		require.Len(t, api.requests(), 1, "the only consumer is busy with e1")
		mustTrack(t, c, "e2")
		mustTrack(t, c, "e3")
		assert.ErrorIs(t, c.Track(track("e4")), ErrQueueFull)
		require.NoError(t, flush(t, c, time.Minute))
		assert.ElementsMatch(t, []string{"e1", "e2", "e3"}, cb.delivered())
		for _, r := range api.requests() {
			assert.NotContains(t, r.ids, "e4")
		}
		assert.Equal(t, int64(1), c.Stats().RejectedQueueFull)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R46: a batch closes at FlushAt events.
func TestBatchByCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(3), WithFlushInterval(time.Hour), WithConsumers(1))
		for i := 0; i < 7; i++ {
			mustTrack(t, c, fmt.Sprintf("e%d", i))
		}
		synctest.Wait()
		reqs := api.requests()
		require.Len(t, reqs, 2, "two full batches go at once; the 7th event waits")
		assert.Equal(t, []string{"e0", "e1", "e2"}, reqs[0].ids)
		assert.Equal(t, []string{"e3", "e4", "e5"}, reqs[1].ids)
		require.NoError(t, closeClient(t, c, time.Second))
		assert.Len(t, api.requests(), 3)
		assert.Len(t, cb.delivered(), 7)
	})
}

// R46: a batch closes FlushInterval after its first event.
func TestBatchByInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(100), WithFlushInterval(2*time.Second))
		start := time.Now()
		mustTrack(t, c, "e1")
		time.Sleep(time.Second)
		mustTrack(t, c, "e2")
		time.Sleep(3 * time.Second)
		reqs := api.requests()
		require.Len(t, reqs, 1)
		assert.Equal(t, 2*time.Second, reqs[0].at.Sub(start))
		assert.Equal(t, []string{"e1", "e2"}, reqs[0].ids)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S41, R45: bodies never pass 500 000 bytes; events over 32 KiB are rejected.
func TestBatchBySize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1000), WithConsumers(1))
		big := strings.Repeat("x", 2000)
		for i := 0; i < 600; i++ {
			require.NoError(t, c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"pad": big}}))
		}
		err := c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"pad": strings.Repeat("y", 33*1024)}})
		assert.ErrorIs(t, err, ErrEventTooLarge)
		require.NoError(t, closeClient(t, c, time.Minute))
		total := map[string]int{}
		for _, r := range api.requests() {
			assert.LessOrEqual(t, len(r.body), MaxBatchBytes)
			for _, id := range r.ids {
				total[id]++
			}
		}
		assert.Len(t, total, 600)
		for id, n := range total {
			assert.Equal(t, 1, n, id)
		}
		assert.GreaterOrEqual(t, len(api.requests()), 3)
		assert.Len(t, cb.delivered(), 600)
	})
}

// Blocking mode: EnqueueContext waits for room while the consumer is stalled,
// gives up with ErrQueueFull and ctx's error, and wakes on Close.
func TestEnqueueContextBlocksForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 200, hold: 5 * time.Second}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithQueueCapacity(1), WithConsumers(1), WithFlushAt(1))
		mustTrack(t, c, "e1")
		synctest.Wait() // the only consumer is stalled on e1
		mustTrack(t, c, "e2")
		assert.ErrorIs(t, c.Track(track("nb")), ErrQueueFull, "the default call never waits")

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.EnqueueContext(ctx, track("timeout"))
		cancel()
		assert.ErrorIs(t, err, ErrQueueFull)
		assert.ErrorIs(t, err, context.DeadlineExceeded)

		start := time.Now()
		require.NoError(t, c.EnqueueContext(context.Background(), &Track{MessageID: "e3", UserID: "u", Event: "e"}))
		assert.Equal(t, 4*time.Second, time.Since(start), "room appeared when the consumer took e2")
		require.NoError(t, flush(t, c, time.Minute))
		assert.Equal(t, []string{"e1", "e2", "e3"}, cb.delivered())

		// A waiter is released by Close with ErrClosed.
		api2 := newFakeAPI(sequence(reply{status: 200, hold: time.Hour}))
		c2 := newTestClient(t, api2, nil, WithQueueCapacity(1), WithConsumers(1), WithFlushAt(1))
		mustTrack(t, c2, "x1")
		synctest.Wait()
		mustTrack(t, c2, "x2")
		done := make(chan error)
		go func() { done <- c2.EnqueueContext(context.Background(), track("x3")) }()
		synctest.Wait()
		closed := make(chan error)
		go func() { closed <- closeClient(t, c2, time.Second) }()
		assert.ErrorIs(t, <-done, ErrClosed)
		assert.ErrorIs(t, <-closed, ErrShutdownInterrupted)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R43, R44: during an outage the waiting batches count against
// QueueCapacity: the client fills up, then rejects new events, and what it
// holds stays bounded by QueueCapacity + Consumers × FlushAt events. When
// the server comes back, everything accepted is delivered.
func TestOutageFillsCapacityThenRejects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const capacity, consumers, flushAt = 100, 2, 10
		var mu sync.Mutex
		down := true
		api := newFakeAPI(func(n int, r seen) reply {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return reply{status: 503}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithQueueCapacity(capacity), WithConsumers(consumers),
			WithFlushAt(flushAt), WithMaxRetries(1000), WithFlushInterval(100*time.Millisecond))
		accepted, rejected, maxPending := 0, 0, int64(0)
		for i := 0; i < 2000; i++ { // 200 events/s for 10 s
			err := c.Track(Track{UserID: "u", Event: "e"})
			switch err {
			case nil:
				accepted++
			case ErrQueueFull:
				rejected++
			default:
				t.Fatalf("Track: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
			maxPending = max(maxPending, c.Stats().Pending)
		}
		assert.LessOrEqual(t, maxPending, int64(capacity+consumers*flushAt))
		assert.GreaterOrEqual(t, maxPending, int64(capacity), "the waiting batches filled the client")
		assert.Positive(t, rejected)
		assert.Equal(t, int64(rejected), c.Stats().RejectedQueueFull)
		assert.Empty(t, cb.errors(), "waiting batches are never dropped")
		mu.Lock()
		down = false
		mu.Unlock()
		require.NoError(t, flush(t, c, 2*time.Minute))
		assert.Len(t, cb.delivered(), accepted)
		assert.Empty(t, cb.errors())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R43: EnqueueContext waits while waiting batches fill the client, and goes
// on when one of them is delivered.
func TestEnqueueContextWaitsForWaitingBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 500}, reply{status: 200}))
		c := newTestClient(t, api, nil, WithQueueCapacity(2), WithFlushAt(2), WithConsumers(1))
		mustTrack(t, c, "e1")
		mustTrack(t, c, "e2")
		synctest.Wait() // [e1 e2] failed once and waits: the client is full
		assert.ErrorIs(t, c.Track(track("e3")), ErrQueueFull)
		start := time.Now()
		require.NoError(t, c.EnqueueContext(context.Background(), track("e3")))
		lo, hi := window(1)
		within(t, "EnqueueContext's wait", time.Since(start), lo, hi)
		require.NoError(t, closeClient(t, c, time.Minute))
		assert.Len(t, api.requests(), 3)
	})
}

// R45, R46: the queue's byte count follows the events exactly, however
// many have passed through it: after 240 000 events (a long-running
// process), a lone event still waits for its FlushInterval instead of
// being taken as if the queue held more than a batch can carry.
func TestQueueByteCountDoesNotDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // fake time stands still: the interval is exact
		q := newQueue(newCapacity(1<<20), 1000, batchEventBytes, time.Hour)
		data := []byte(`{"e":1234}`)
		for i := 0; i < 240_000; i++ {
			require.NoError(t, q.push(event{data: data}))
			if b, _ := q.take(time.Now()); b != nil {
				require.Equal(t, 1000, len(b.events), "a full batch by count")
			}
		}
		require.NoError(t, q.push(event{data: data}))
		b, open := q.take(time.Now())
		require.Nil(t, b, "a lone event is not a full batch")
		assert.Equal(t, time.Hour, open)
	})
}

// R41: a batch whose events were accepted on both sides of a Flush is
// counted off the ledger event by event, whichever way its events are
// grouped: the Flush's mark is reached once its own events have their
// disposition, not before, and not after the later ones too; the ring's
// wrap-around keeps every event in order.
func TestDischargeAcrossAFlushMark(t *testing.T) {
	q := newQueue(newCapacity(1<<20), 8, batchEventBytes, time.Hour)
	for round := range 3 { // the ring (64 places) wraps around
		var want []string
		for i := range 20 {
			id := fmt.Sprintf("%d-%d", round, i)
			want = append(want, id)
			require.NoError(t, q.push(event{data: []byte(`{"messageId":"` + id + `"}`)}))
		}
		flushed := q.mark() // the third batch holds its last 4 events and 3 later ones
		for i := 20; i < 23; i++ {
			id := fmt.Sprintf("%d-%d", round, i)
			want = append(want, id)
			require.NoError(t, q.push(event{data: []byte(`{"messageId":"` + id + `"}`)}))
		}
		var got []string
		var batches []*batch
		for {
			b, _ := q.take(time.Now())
			if b == nil {
				break
			}
			for _, ev := range b.events {
				got = append(got, string(ev.data[len(`{"messageId":"`):len(ev.data)-2]))
			}
			batches = append(batches, b)
		}
		require.Equal(t, want, got, "every event, in order")
		require.Len(t, batches, 3, "8 + 8 + 7 (the flush takes the rest)")
		q.discharge(batches[0].events)
		q.discharge(batches[1].events)
		select {
		case <-flushed:
			t.Fatal("the mark was reached with 4 of its events outstanding")
		default:
		}
		q.discharge(batches[2].events[:4]) // the last 4 events of the flushed epoch
		select {
		case <-flushed:
		default:
			t.Fatal("the mark was not reached though all its events are done")
		}
		assert.Equal(t, 3, q.outstanding(), "the events after the mark")
		q.discharge(batches[2].events[4:])
		assert.Zero(t, q.outstanding())
	}
}

// Blocked producers wait in a line: they are woken when a batch's worth of
// places is free (wakeAt), or at once when the release is forced (the
// queue runs dry), each given its own place, oldest first.
func TestBlockedProducersWakeForABatchInLineOrder(t *testing.T) {
	c := newCapacity(4)
	c.wakeWhen(3)
	c.hold(4) // full
	woken := func(w *blockedProducer) bool {
		select {
		case <-w.woken:
			return true
		default:
			return false
		}
	}
	a, b, d := c.await(), c.await(), c.await()
	require.False(t, woken(a) || woken(b) || woken(d), "no room, nobody woken")
	c.release(1, false)
	c.release(1, false)
	assert.False(t, woken(a) || woken(b) || woken(d), "two free places are less than a batch")
	c.release(1, false)
	require.True(t, woken(a) && woken(b) && woken(d), "three free places wake the line")
	assert.True(t, a.granted && b.granted && d.granted)
	assert.Equal(t, int64(4), c.held(), "each woken producer holds its place")
	assert.False(t, c.queued())

	e, f, g := c.await(), c.await(), c.await()
	c.taken(2, true) // two of the granted producers' events are taken into a batch
	assert.True(t, woken(e) && woken(f), "a forced release wakes the oldest")
	assert.False(t, woken(g), "one place each: the third waits")
	assert.True(t, e.granted && f.granted && !g.granted)
	c.leave(g)
	assert.False(t, c.queued())
	c.release(1, false)
	assert.False(t, woken(g), "a producer that left is not woken")

	// Close wakes the line without places.
	c.hold(int(c.limit - c.held())) // full again
	h := c.await()
	require.False(t, woken(h))
	c.wakeAll()
	assert.True(t, woken(h))
	assert.False(t, h.granted)
}

// Several producers blocked in EnqueueContext share the room fairly: each
// is given places in turn, none runs ahead of another by more than a
// batch, and everything arrives: when QueueCapacity (2) holds them, and
// when the high-water mark of queued events (R71: FlushAt, 3) does and
// QueueCapacity (1000) has room.
func TestBlockedProducersAreServedFairly(t *testing.T) {
	for _, capacity := range []int{2, 1000} {
		t.Run(fmt.Sprintf("capacity=%d", capacity), func(t *testing.T) { blockedProducersAreServedFairly(t, capacity) })
	}
}

func blockedProducersAreServedFairly(t *testing.T, capacity int) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(int, seen) reply { return reply{status: 200, hold: time.Second} })
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithQueueCapacity(capacity), WithFlushAt(3), WithConsumers(1))
		const producers, each = 3, 15
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < each; k++ {
					err := c.EnqueueContext(context.Background(), Track{MessageID: fmt.Sprintf("p%d-%d", p, k), UserID: "u", Event: "E"})
					if err != nil {
						t.Errorf("producer %d: %v", p, err)
						return
					}
					mu.Lock()
					order = append(order, p)
					mu.Unlock()
				}
			}()
			synctest.Wait() // the producers join the line in this order
		}
		wg.Wait()
		require.NoError(t, flush(t, c, time.Minute))
		assert.Len(t, cb.delivered(), producers*each)
		// The first producer filled the client (what it may queue, 3 in
		// flight, and what the first take freed) before the others came.
		// From then on, the room goes round: between two events of one
		// producer, every other producer that is still going gets one.
		counts := make([]int, producers)
		for i, p := range order {
			counts[p]++
			if i < 10 || slices.Contains(counts, each) {
				continue
			}
			lo, hi := slices.Min(counts), slices.Max(counts)
			require.LessOrEqual(t, hi-lo-(10-1), 1, "after %d events: %v (order %v)", i+1, counts, order)
		}
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R71: EnqueueContext waits at the high-water mark of queued events
// (Consumers / 2 × FlushAt, at least FlushAt: here 4) although QueueCapacity has plenty of
// room, and goes on once a batch is taken. Non-blocking Track is held only
// by QueueCapacity (R43).
func TestEnqueueContextWaitsAtTheHighWaterMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(int, seen) reply { return reply{status: 200, hold: time.Second} })
		c := newTestClient(t, api, nil, WithQueueCapacity(100), WithFlushAt(4), WithConsumers(1))
		ctx := context.Background()
		for i := 1; i <= 4; i++ {
			require.NoError(t, c.EnqueueContext(ctx, track(fmt.Sprintf("e%d", i))))
		}
		synctest.Wait() // [e1 … e4] is on the wire for a second
		require.Len(t, api.requests(), 1)
		for i := 5; i <= 8; i++ { // four queued: the mark
			require.NoError(t, c.EnqueueContext(ctx, track(fmt.Sprintf("e%d", i))))
		}
		start := time.Now()
		returned := make(chan time.Duration, 1)
		go func() {
			assert.NoError(t, c.EnqueueContext(ctx, track("e9")))
			returned <- time.Since(start)
		}()
		synctest.Wait()
		select {
		case d := <-returned:
			t.Fatalf("EnqueueContext returned after %v with the queue at its high-water mark", d)
		default:
		}
		assert.Equal(t, int64(8), c.Stats().Pending, "held at the mark: the ninth event is not accepted yet")
		require.NoError(t, c.Track(track("t1")), "Track is bound by QueueCapacity only")
		assert.Equal(t, time.Second, <-returned, "woken when the next batch was taken")
		require.NoError(t, flush(t, c, time.Minute))
		var batches [][]string
		for _, r := range api.requests() {
			batches = append(batches, r.ids)
		}
		assert.Equal(t, [][]string{{"e1", "e2", "e3", "e4"}, {"e5", "e6", "e7", "e8"}, {"t1", "e9"}}, batches)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R71 in bytes: with large events EnqueueContext waits once the queued
// events weigh more than a full batch for every consumer (here one: 475 000
// bytes), though far fewer than FlushAt events are queued and
// QueueCapacity has room; it goes on when the next batch is taken.
func TestEnqueueContextWaitsAtTheHighWaterMarkInBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(int, seen) reply { return reply{status: 200, hold: time.Second} })
		c := newTestClient(t, api, nil, WithFlushAt(1000), WithFlushInterval(time.Hour), WithConsumers(1))
		ctx := context.Background()
		id := func(i int) string { return fmt.Sprintf("e%02d", i) }
		var ids []string
		for i := 0; i <= 38; i++ { // 19 events of 24 999 bytes and their commas fill a batch
			require.NoError(t, c.EnqueueContext(ctx, sizedTrack(t, id(i), 24_999)))
			ids = append(ids, id(i))
			synctest.Wait()
		}
		// e00–e18 are on the wire; e19–e38 weigh 500 000 bytes: the mark.
		start := time.Now()
		returned := make(chan time.Duration, 1)
		go func() {
			assert.NoError(t, c.EnqueueContext(ctx, sizedTrack(t, id(39), 24_999)))
			returned <- time.Since(start)
		}()
		synctest.Wait()
		select {
		case d := <-returned:
			t.Fatalf("EnqueueContext returned after %v with the queued bytes at the high-water mark", d)
		default:
		}
		assert.Equal(t, int64(39), c.Stats().Pending, "held at the mark in bytes: 20 queued, far from 1 000 events")
		assert.Equal(t, time.Second, <-returned, "woken when the next batch was taken")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 3)
		assert.Equal(t, ids[:19], reqs[0].ids)
		assert.Equal(t, ids[19:38], reqs[1].ids)
		assert.Equal(t, []string{id(38), id(39)}, reqs[2].ids)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// The two counts of capacity.counts survive packing and packed adds, a
// borrow from a negative held count included.
func TestCapacityCountsPack(t *testing.T) {
	for _, p := range [][2]int64{{0, 0}, {1, 0}, {0, 1}, {-1, 0}, {-1, 5}, {5, -1}, {MaxQueueCapacity * 2, MaxQueueCapacity}, {-MaxQueueCapacity, 3}} {
		h, u := split(pack(p[0], p[1]))
		assert.Equal(t, p, [2]int64{h, u})
		for _, d := range [][2]int64{{1, 1}, {-1, -1}, {-250, 0}, {0, -250}, {7, -3}} {
			h, u := split(pack(p[0], p[1]) + pack(d[0], d[1]))
			assert.Equal(t, [2]int64{p[0] + d[0], p[1] + d[1]}, [2]int64{h, u}, "%v + %v", p, d)
		}
	}
}

// R45: batches taken from a ring that wraps, cut by count and by bytes with
// a per-event extra (R59), keep every event in order, each batch's bytes
// are its events' exactly, the queue's byte count returns to zero, and no
// slot of the ring keeps a taken event once the queue is empty (before,
// only the stale slots right before the head may: see queue.stale).
func TestTakeAcrossTheRingsWrap(t *testing.T) {
	q, _ := newQueueWith(queueOptions{capacity: 1 << 20, flushAt: 7, interval: time.Hour, maxBytes: 300, perEvent: 5})
	next, want := 0, 0
	for round := range 40 {
		for range 5 + round%11 {
			pad := strings.Repeat("x", next*7%53)
			require.NoError(t, q.push(event{data: []byte(fmt.Sprintf(`{"n":%d,"p":%q}`, next, pad))}))
			next++
		}
		for {
			b, _ := q.take(time.Now())
			if b == nil {
				break
			}
			require.LessOrEqual(t, len(b.events), 7)
			assert.Equal(t, eventBytes(b.events), b.bytes)
			assert.True(t, len(b.events) == 1 || b.bytes+len(b.events)*5 <= 300, "within the byte budget")
			for _, ev := range b.events {
				var got struct{ N int }
				require.NoError(t, json.Unmarshal(ev.data, &got))
				require.Equal(t, want, got.N, "in order")
				want++
			}
		}
		queued := 0
		for i := range q.n {
			queued += weight(q.ring[q.ringIndex(i)].data, 5)
		}
		assert.Equal(t, queued, q.bytes, "round %d: the queued events' weight", round)
		require.LessOrEqual(t, q.stale, len(q.ring)-q.n)
		if q.n == 0 {
			require.Zero(t, q.stale)
		}
		for i := 0; i < len(q.ring)-q.n-q.stale; i++ {
			require.Nil(t, q.ring[q.ringIndex(q.n+i)].data, "a free slot that is not stale keeps nothing")
		}
	}
	require.True(t, q.close())
	for b, _ := q.take(time.Now()); b != nil; b, _ = q.take(time.Now()) {
		want += len(b.events)
	}
	require.Equal(t, next, want, "every event taken")
	require.Zero(t, q.n)
	for i := range q.ring {
		require.Nil(t, q.ring[i].data, "the empty queue keeps no taken event in slot %d", i)
	}
}

// R45: a batch takes the oldest events, as many as its body has room for
// and at most FlushAt, whatever their sizes, the budget in force and the
// path they were queued by (an enqueue call or a read from the disk
// buffer): each take is checked against the events weighed one by one.
func TestTakeFillsTheBatchAsFarAsItsBudget(t *testing.T) {
	const perEvent = 40
	q, _ := newQueueWith(queueOptions{capacity: 1 << 20, flushAt: 9, interval: time.Hour, maxBytes: 600, perEvent: perEvent})
	// oneByOne is how many of the queued events, oldest first, fit: at
	// most flushAt, the first whatever its size, each next one only while
	// the events, their commas and perEvent bytes each are within maxBytes.
	oneByOne := func() (n, bytes int) {
		for n < q.n && n < q.flushAt {
			size := len(q.ring[q.ringIndex(n)].data)
			if n > 0 && bytes+1+size+(n+1)*perEvent > q.maxBytes {
				break
			}
			if n > 0 {
				bytes++ // the comma
			}
			bytes += size
			n++
		}
		return n, bytes
	}
	next, want, full, short := 0, 0, 0, 0
	newEvent := func() event {
		pad := strings.Repeat("x", next*37%211) // from 0 to 210 bytes: batches close by count and by bytes
		next++
		return event{data: []byte(fmt.Sprintf(`{"n":%d,"p":%q}`, next-1, pad))}
	}
	for round := range 60 {
		switch round % 3 {
		case 0:
			q.setBudget(600, 9)
		case 1:
			q.setBudget(250, 9) // one event of the largest alone
		case 2:
			q.setBudget(2000, 4)
		}
		takeAll := func() {
			for {
				q.mu.Lock()
				n, bytes := oneByOne()
				q.mu.Unlock()
				b, _ := q.take(time.Now())
				if b == nil {
					return
				}
				require.Equal(t, n, len(b.events), "round %d: the events that fit", round)
				require.Equal(t, bytes, b.bytes, "round %d: what they take in a body", round)
				require.Equal(t, eventBytes(b.events), b.bytes)
				if n == q.flushAt {
					full++
				} else {
					short++
				}
				for _, ev := range b.events {
					var got struct{ N int }
					require.NoError(t, json.Unmarshal(ev.data, &got))
					require.Equal(t, want, got.N, "in order")
					want++
				}
			}
		}
		for i := range 3 + round%13 {
			require.NoError(t, q.push(newEvent()))
			if round%2 == 0 || i%5 == 4 {
				takeAll() // a consumer at hand: batches close at the event that fills them
			}
		}
		if round%4 == 0 {
			evs := make([]event, 1+round%6)
			for i := range evs {
				evs[i] = newEvent()
			}
			q.load(evs) // durable mode's read-back
		}
		takeAll()
	}
	assert.Positive(t, full, "batches closed at FlushAt")
	assert.Positive(t, short, "batches closed by bytes or by what was queued")
}
