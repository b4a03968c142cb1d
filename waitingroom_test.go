package analytics

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// The waiting room, seen from outside: what the server receives and when,
// with fake time. A batch waiting for a retry holds no consumer (R29).

// indexOf returns the index of the first request carrying id with the
// given X-Retry-Count ("" for a first attempt), or -1.
func indexOf(reqs []seen, id, retryCount string) int {
	for i, r := range reqs {
		if len(r.ids) > 0 && r.ids[0] == id && r.retryCount() == retryCount {
			return i
		}
	}
	return -1
}

// R29, S6: with one consumer, a second batch is sent while the first waits
// out its backoff, and the first is retried when its backoff ends.
func TestSecondBatchSentDuringBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if r.ids[0] == "e1" && r.retryCount() == "" {
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(1))
		mustTrack(t, c, "e1")
		synctest.Wait() // e1 failed and waits for its first backoff (0.45–0.55 s)
		t0 := time.Now()
		mustTrack(t, c, "e2")
		synctest.Wait()
		reqs := api.requests()
		require.Len(t, reqs, 2, "e2 went out at once although e1 waits")
		assert.Equal(t, []string{"e2"}, reqs[1].ids)
		assert.Equal(t, t0, reqs[1].at, "no wait for e2")
		require.NoError(t, flush(t, c, 10*time.Second))
		reqs = api.requests()
		require.Len(t, reqs, 3)
		assert.Equal(t, []string{"e1"}, reqs[2].ids)
		assert.Equal(t, "1", reqs[2].retryCount())
		lo, hi := window(1)
		within(t, "e1's backoff", reqs[2].at.Sub(reqs[0].done), lo, hi)
		assert.Equal(t, map[string]int{"e1": 1, "e2": 1}, cb.dispositions())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R47: a batch that is due goes before a new batch that is ready at the
// same time. The only consumer is busy (e2's answer is held 1 s) while e1's
// backoff ends and e3 is enqueued; when it is free, it sends e1 first.
func TestDueBatchBeforeNewWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			switch {
			case r.ids[0] == "e1" && r.retryCount() == "":
				return reply{status: 500}
			case r.ids[0] == "e2":
				return reply{status: 200, hold: time.Second}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(1))
		mustTrack(t, c, "e1")
		synctest.Wait()
		mustTrack(t, c, "e2")
		synctest.Wait()
		time.Sleep(700 * time.Millisecond) // e1 is due now; the consumer waits on e2's answer
		mustTrack(t, c, "e3")
		require.NoError(t, flush(t, c, 10*time.Second))
		var order []string
		for _, r := range api.requests() {
			order = append(order, r.ids[0]+"#"+r.retryCount())
		}
		assert.Equal(t, []string{"e1#", "e2#", "e1#1", "e3#"}, order)
		require.NoError(t, closeClient(t, c, time.Second))
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

// R38, R39: Close hands back every batch in the waiting room at its
// deadline, whichever wait it is in, and returns within deadline + 0.5 s.
func TestCloseHandsBackWaitingRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if r.ids[0] == "limited" {
				return reply{status: 429, header: map[string]string{"Retry-After": "60"}}
			}
			return reply{status: 503}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(2))
		mustTrack(t, c, "backoff")
		synctest.Wait()
		mustTrack(t, c, "limited")
		synctest.Wait()
		mustTrack(t, c, "queued") // the gate is closed: it stays queued
		synctest.Wait()
		before := len(api.requests())
		start := time.Now()
		err := closeClient(t, c, 300*time.Millisecond)
		assert.ErrorIs(t, err, ErrShutdownInterrupted)
		assert.Contains(t, err.Error(), "3 event(s) handed back")
		assert.LessOrEqual(t, time.Since(start), 800*time.Millisecond)
		assert.Equal(t, 3, cb.failedWith(ErrShutdownInterrupted))
		assert.Equal(t, map[string]int{"backoff": 1, "limited": 1, "queued": 1}, cb.dispositions())
		time.Sleep(time.Minute)
		assert.Len(t, api.requests(), before, "nothing is sent after Close")
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
		assert.Equal(t, int64(rejected), c.Stats().Dropped)
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

// R32: when the gate closed between taking a batch and sending it, the
// batch goes back to the waiting room without an attempt: nothing reaches
// the server before the deadline, and the batch is sent after it.
func TestGateClosedAfterTakeSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		s, err := resolve("wk", []Option{WithEndpoint("http://api.test"), WithHTTPClient(&http.Client{Transport: api})})
		require.NoError(t, err)
		places := newCapacity(10)
		q := newQueue(places, 1, batchEventBytes, time.Second)
		room := newWaitingRoom(time.Hour, places)
		w := &consumer{
			q: q, room: room, sender: newSender(&s, newHTTPClient(&s)),
			settle: &settler{log: zap.NewNop(), ledger: q},
			policy: retryPolicy{maxRetries: 1, maxBackoffTotal: time.Hour, backoff: DefaultBackoffPolicy(), httpTimeout: time.Second},
			log:    zap.NewNop(), stop: context.Background(),
		}
		// Another consumer's 429 closed the gate for 2 s.
		_, _, ok := room.rateLimited(time.Now(), 2*time.Second, &batch{events: []event{{data: []byte(`{"messageId":"other"}`)}}})
		require.True(t, ok)
		require.NoError(t, q.push(event{data: []byte(`{"messageId":"mine"}`)}))
		b, _ := q.take(time.Now())
		require.NotNil(t, b)
		w.attempt(b)
		assert.Empty(t, api.requests(), "nothing is sent through a closed gate")
		time.Sleep(2 * time.Second)
		got, _, closed, _ := room.next(time.Now())
		assert.False(t, closed)
		require.NotNil(t, got)
		assert.Equal(t, 0, got.attempts, "no attempt was counted")
		assert.False(t, got.retryPending)
	})
}
