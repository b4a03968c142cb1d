package analytics

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/relaykit/analytics-go/internal/diskbuf"
	"github.com/relaykit/analytics-go/internal/httpbatch"
)

// Behaviour tests for rules whose breakage the rest of the suite did not
// notice: each sets up the one situation in which the rule decides the
// outcome, and asserts what reached the server and the callbacks.

// R18: a plain-text error body whose write key straddles the point where
// the excerpt is clipped leaves no fragment of the key in the error or the
// logs: the text is redacted before it is clipped.
func TestWriteKeyAcrossTheExcerptClip(t *testing.T) {
	const key = "wk-SECRET-across-the-clip"
	for _, before := range []int{httpbatch.MaxExcerpt - 4, httpbatch.MaxExcerpt - len(key)/2, httpbatch.MaxExcerpt - len(key) + 1} {
		synctest.Test(t, func(t *testing.T) {
			body := strings.Repeat("x", before) + key + " was refused"
			core, logs := observer.New(zapcore.DebugLevel)
			api := newFakeAPI(sequence(reply{status: 400, body: body}))
			cb := &callbacks{}
			c, err := New(key, append(cb.options(), WithEndpoint("http://api.test"),
				WithHTTPClient(&http.Client{Transport: api}), WithFlushAt(1), WithLogger(zap.New(core)))...)
			require.NoError(t, err)
			auditLater(t, c, cb)
			mustTrack(t, c, "m1")
			require.NoError(t, closeClient(t, c, time.Minute))
			errs := cb.errors()
			require.Len(t, errs, 1)
			var he *HTTPError
			require.ErrorAs(t, errs[0].err, &he)
			fragment := key[:4] // "wk-S": any clipped head of the key starts with it
			assert.NotContains(t, he.Message, fragment, "key at offset %d", before)
			assert.NotContains(t, errs[0].err.Error(), fragment)
			for _, e := range logs.All() {
				assert.NotContains(t, fmt.Sprint(e.Message, e.ContextMap()), fragment, "log %q", e.Message)
			}
		})
	}
}

// R35, R43: a batch failed because its rate-limit episode ran out gives
// its capacity places back: the next enqueue calls are accepted.
func TestRateLimitExpiryReleasesCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 429, header: map[string]string{"Retry-After": "10"}}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithQueueCapacity(2), WithFlushAt(2), WithConsumers(1),
			WithMaxRateLimitDuration(2*time.Second))
		mustTrack(t, c, "e1")
		mustTrack(t, c, "e2")
		time.Sleep(3 * time.Second) // the episode ran out at 2 s
		synctest.Wait()
		require.Equal(t, 2, cb.failedWith(ErrRateLimitDurationExceeded), "both events failed")
		assert.NoError(t, c.Track(track("e3")), "a place of the failed batch")
		assert.NoError(t, c.Track(track("e4")), "the other place")
		require.NoError(t, closeClient(t, c, time.Minute))
		assert.ElementsMatch(t, []string{"e3", "e4"}, cb.delivered())
	})
}

// R28, D16: a usable Retry-After does not restart the time that
// MaxTotalBackoffDuration counts from the first counted failure.
func TestRetryAfterKeepsTheFirstFailureInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(
			reply{status: 500},
			reply{status: 429, header: map[string]string{"Retry-After": "3"}},
			reply{status: 500},
		))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithMaxRetries(10), WithMaxTotalBackoffDuration(2*time.Second))
		mustTrack(t, c, "e1")
		require.NoError(t, flush(t, c, time.Minute))
		assert.Equal(t, 3, len(api.requests()), "500, 429, 500: the budget counts from the first 500")
		require.Len(t, cb.errors(), 1)
		assert.ErrorIs(t, cb.errors()[0].err, ErrBackoffDurationExceeded)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R3, R27: a 413 split spends no counted retry: with MaxRetries 1, a half
// answered 500 still gets its one counted retry and is delivered.
func TestSplitSpendsNoRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		seenE1 := 0
		api := newFakeAPI(func(_ int, r seen) reply {
			switch {
			case len(r.ids) > 1:
				return reply{status: 413}
			case r.ids[0] == "e1":
				seenE1++
				if seenE1 == 1 {
					return reply{status: 500}
				}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(2), WithConsumers(1), WithMaxRetries(1))
		mustTrack(t, c, "e1")
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Minute))
		assert.Empty(t, cb.errors())
		assert.ElementsMatch(t, []string{"e1", "e2"}, cb.delivered())
		assert.Equal(t, 4, len(api.requests()), "[e1 e2] 413, [e1] 500, [e2] 200, [e1] 200")
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R46, R29: a batch waiting for its backoff does not hold back a new open
// batch: the new one leaves FlushInterval after its first event.
func TestFlushIntervalWhileABatchWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e1Seen := 0
		api := newFakeAPI(func(_ int, r seen) reply {
			if r.ids[0] == "e1" {
				e1Seen++
				if e1Seen == 1 {
					return reply{status: 500}
				}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		const interval = 100 * time.Millisecond
		c := newTestClient(t, api, cb, WithFlushAt(10), WithFlushInterval(interval), WithConsumers(1))
		mustTrack(t, c, "e1")
		time.Sleep(interval + 50*time.Millisecond) // e1 was sent at 100 ms and waits for its backoff
		synctest.Wait()
		require.Equal(t, 1, len(api.requests()))
		opened := time.Now()
		mustTrack(t, c, "e2")
		time.Sleep(interval + 10*time.Millisecond) // no Flush: it would close e2's batch at once
		synctest.Wait()
		e2 := requestsFor(api.requests(), "e2")
		require.Equal(t, 1, len(e2), "e2's batch has left FlushInterval after its first event")
		assert.Equal(t, interval, e2[0].at.Sub(opened), "e2's batch leaves FlushInterval after its first event")
		assert.Equal(t, 1, len(requestsFor(api.requests(), "e1")), "e2 went before e1's retry was due")
		require.NoError(t, closeClient(t, c, time.Minute))
		assert.ElementsMatch(t, []string{"e1", "e2"}, cb.delivered())
	})
}

// Stats.Retries counts counted retries sent, not scheduled: a retry that
// Close cuts off during its backoff is not counted.
func TestRetriesCountsOnlyRetriesSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 500}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithMaxRetries(10))
		mustTrack(t, c, "e1")
		synctest.Wait() // answered 500, waiting for its backoff
		require.Equal(t, 1, len(api.requests()))
		require.ErrorIs(t, closeClient(t, c, 100*time.Millisecond), ErrShutdownInterrupted)
		st := c.Stats()
		assert.Equal(t, int64(1), st.Requests)
		assert.Equal(t, int64(0), st.Retries, "the scheduled retry was never sent")
		assert.Equal(t, int64(1), st.HandedBack)
	})
}

// R34 (c): a retryable failure without a usable Retry-After ends the
// episode, so a later rate limit starts a fresh one with the whole
// MaxRateLimitDuration.
func TestRetryableFailureEndsTheEpisode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := map[string]int{}
		api := newFakeAPI(func(_ int, r seen) reply {
			id := r.ids[0]
			n[id]++
			switch {
			case id == "e1" && n[id] == 1:
				return reply{status: 429, header: map[string]string{"Retry-After": "1"}}
			case id == "e1":
				return reply{status: 500} // retryable, no Retry-After: the episode ends
			case n[id] == 1:
				return reply{status: 429, header: map[string]string{"Retry-After": "2"}}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(1), WithMaxRetries(0),
			WithMaxRateLimitDuration(4*time.Second))
		start := time.Now()
		mustTrack(t, c, "e1")
		require.NoError(t, flush(t, c, time.Minute))
		require.Equal(t, 1, cb.failedWith(ErrRetriesExhausted), "e1: 429, then 500 with MaxRetries 0")
		time.Sleep(3*time.Second - time.Since(start))
		mustTrack(t, c, "e2") // at 3 s: its 429 opens a fresh episode (until 7 s)
		require.NoError(t, flush(t, c, time.Minute))
		assert.Equal(t, []string{"e2"}, cb.delivered(), "e2 retried after 2 s and delivered")
		assert.Zero(t, cb.failedWith(ErrRateLimitDurationExceeded))
		assert.Equal(t, 2, len(requestsFor(api.requests(), "e2")))
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R50: a 429 (or a 5xx) from the tracking API says nothing about the
// token: the cached token is kept and no new token request is made.
func TestOAuthRateLimitKeepsTheToken(t *testing.T) {
	testKeys(t)
	for _, first := range []reply{
		{status: 429, header: map[string]string{"Retry-After": "1"}},
		{status: 429},
		{status: 503},
	} {
		synctest.Test(t, func(t *testing.T) {
			fa := newFakeAuth()
			api := newFakeAPI(sequence(first, reply{status: 200}))
			cb := &callbacks{}
			c := newOAuthClient(t, fa, api, cb, WithFlushAt(1))
			mustTrack(t, c, "m1")
			require.NoError(t, flush(t, c, time.Minute))
			assert.Equal(t, []string{"m1"}, cb.delivered())
			assert.Equal(t, 1, len(fa.requests()), "one token for both attempts (first answer %d)", first.status)
			assert.Equal(t, []string{"Bearer tok-secret-1", "Bearer tok-secret-1"}, authHeaders(api.requests()))
			require.NoError(t, closeClient(t, c, time.Second))
		})
	}
}

// R70, section 7: in durable mode QueueCapacity bounds memory, not what
// is accepted. With 3 replayed events, room for 2 in memory and the first
// request held, every new event is accepted (on disk only), and all of
// them reach the server in acceptance order: replayed first.
func TestDurableDiskIsTheBuffer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		c1 := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil, WithDiskBuffer(dir), WithFlushAt(10))
		for _, id := range []string{"r1", "r2", "r3"} {
			mustTrack(t, c1, id)
		}
		require.ErrorIs(t, closeClient(t, c1, 10*time.Millisecond), ErrShutdownInterrupted)

		api := newFakeAPI(sequence(reply{hold: 5 * time.Second, status: 200}, reply{status: 200}))
		cb := &callbacks{}
		c2 := newTestClient(t, api, cb, append(cb.options(), WithDiskBuffer(dir), WithQueueCapacity(2), WithFlushAt(1), WithConsumers(1))...)
		synctest.Wait() // r1 in flight, r2 and r3 in memory or on disk
		require.Equal(t, 1, len(api.requests()))
		require.Equal(t, int64(3), c2.Stats().Replayed)
		var want []string
		for i := range 50 {
			id := fmt.Sprintf("x%02d", i)
			require.NoError(t, c2.Track(track(id)), "Track(%s) with memory full and room on disk", id)
			want = append(want, id)
		}
		st := c2.Stats()
		assert.Equal(t, int64(50), st.Spilled, "every new event went to disk only: older ones were still there")
		assert.LessOrEqual(t, st.OnDisk, int64(53-1), "r1 is in flight")
		assert.GreaterOrEqual(t, st.OnDisk, int64(50), "at most QueueCapacity in memory")
		assert.Zero(t, st.RejectedQueueFull)
		require.NoError(t, flush(t, c2, 5*time.Minute))
		assert.Equal(t, append([]string{"r1", "r2", "r3"}, want...), sentIDs(api), "FIFO: replayed before new, spilled in order")
		assert.Zero(t, c2.Stats().OnDisk)
		require.NoError(t, closeClient(t, c2, time.Second))
		assert.Len(t, cb.delivered(), 53, "callbacks get the spilled events too (decoded from disk)")
	})
}

// R41: a newer event that finishes first does not release a Flush that
// must also wait for an older, slower one (e1 held 4 s, e2 held 2 s; the
// Flush cut short in between starts a new epoch for e2).
func TestFlushWaitsForAnOlderSlowerEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(_ int, r seen) reply {
			if r.ids[0] == "e1" {
				return reply{hold: 4 * time.Second}
			}
			return reply{hold: 2 * time.Second}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(2))
		start := time.Now()
		mustTrack(t, c, "e1")
		require.Error(t, flush(t, c, time.Millisecond), "e1 is held 4 s")
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Minute))
		assert.Equal(t, 4*time.Second, time.Since(start), "Flush returned when e1, the older event, was delivered")
		assert.ElementsMatch(t, []string{"e1", "e2"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R41, R42: the ledger is discharged after the callback: a Flush that
// returns has seen OnSuccess finish, however long it runs.
func TestFlushWaitsForTheCallbacks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		var finished time.Time
		c := newTestClient(t, api, nil, WithFlushAt(1), WithOnSuccess(func([]Message) {
			time.Sleep(time.Second)
			finished = time.Now()
		}))
		start := time.Now()
		mustTrack(t, c, "e1")
		require.NoError(t, flush(t, c, time.Minute))
		assert.Equal(t, time.Second, finished.Sub(start), "OnSuccess had finished when Flush returned")
		assert.Equal(t, time.Second, time.Since(start))
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R45, R59: with WithEventSentAt, the smallest events fill a batch by
// bytes, and the per-event sentAt (with its fraction of a second) is
// counted: no body exceeds MaxBatchBytes.
func TestEventSentAtSmallestEventsStayUnderTheBodyLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithEventSentAt(true), WithFlushAt(MaxFlushAt), WithQueueCapacity(20_000),
			WithFlushInterval(time.Hour), WithConsumers(1))
		time.Sleep(1234567891 * time.Nanosecond) // every timestamp has nine fractional digits
		// More events than one batch holds (about 2 900 with the sentAt bytes).
		const n = 3500
		for i := range n {
			// A library entry of the caller's replaces the client's: about 121 bytes of JSON.
			require.NoError(t, c.Track(Track{MessageID: fmt.Sprintf("%05d", i), UserID: "u", Event: "e", Context: ContextFields{"library": 1}}))
		}
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Greater(t, len(reqs), 1, "more than one batch by bytes")
		smallest := len(reqs[0].body) / len(reqs[0].ids)
		assert.Less(t, smallest, 200, "events this small make the per-event sentAt matter (with it: %d bytes)", smallest)
		total := 0
		for i, r := range reqs {
			assert.LessOrEqual(t, len(r.raw), MaxBatchBytes, "request %d: %d events", i, len(r.ids))
			total += len(r.ids)
		}
		assert.Equal(t, n, total)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// Section 7: once the disk buffer is at its limit, acknowledgements are
// still written, so a delivered event is not sent again by the next
// client on the directory (here, one event stays in flight and keeps the
// oldest segment from being reclaimed).
func TestDiskFullStillRecordsAcknowledgements(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		api := newFakeAPI(func(_ int, r seen) reply {
			if r.ids[0] == "stuck" {
				return reply{hold: 2 * time.Hour}
			}
			return reply{hold: time.Second}
		})
		c1 := newTestClient(t, api, nil, WithDiskBuffer(dir, WithSegmentSize(64<<10), WithDiskLimit(128<<10)),
			WithFlushAt(50), WithConsumers(2), WithHTTPTimeout(time.Hour))
		mustTrack(t, c1, "stuck")
		require.Error(t, flush(t, c1, time.Millisecond)) // "stuck" is in flight, alone
		accepted := 1
		for i := 0; ; i++ {
			err := c1.Track(track(fmt.Sprintf("f%04d", i)))
			if errors.Is(err, ErrQueueFull) {
				break
			}
			require.NoError(t, err)
			accepted++
			require.Less(t, i, 10_000, "the disk limit was never reached")
		}
		time.Sleep(10 * time.Minute) // everything but "stuck" is delivered
		require.Equal(t, int64(accepted-1), c1.Stats().Delivered, "%+v", c1.Stats())
		require.Equal(t, int64(1), c1.Stats().Pending)
		require.ErrorIs(t, closeClient(t, c1, 10*time.Millisecond), ErrShutdownInterrupted)

		api2 := newFakeAPI(nil)
		c2 := newTestClient(t, api2, nil, WithDiskBuffer(dir))
		assert.Equal(t, int64(1), c2.Stats().Replayed, "only the handed-back event is replayed")
		require.NoError(t, closeClient(t, c2, time.Minute))
		assert.Equal(t, []string{"stuck"}, sentIDs(api2))
	})
}

// Section 7: a record whose checksum is valid but whose JSON is cut short
// is skipped and counted in DiskCorrupt (and not in Replayed) when it is
// read back, also without callbacks; it is never sent.
func TestTruncatedJSONRecordIsSkipped(t *testing.T) {
	for _, withCallbacks := range []bool{false, true} {
		t.Run(fmt.Sprintf("callbacks=%v", withCallbacks), func(t *testing.T) {
			dir := t.TempDir()
			log, _, err := diskbuf.Open(dir, diskbuf.Options{})
			require.NoError(t, err)
			good := `{"type":"track","messageId":"ok1","userId":"u","event":"e","timestamp":"2026-01-02T03:04:05Z"}`
			for _, rec := range []string{good, `{"type":"track","messageId":"cut","userId":"u","ev`} {
				_, _, err := log.Append([]byte(rec))
				require.NoError(t, err)
			}
			require.NoError(t, log.Close())

			api := newFakeAPI(nil)
			var cb *callbacks
			if withCallbacks {
				cb = &callbacks{}
			}
			c := newTestClient(t, api, cb, WithDiskBuffer(dir))
			require.NoError(t, closeClient(t, c, 5*time.Second))
			// Found when it is read back (R70), so counted by the time
			// everything has an outcome, not at New.
			st := c.Stats()
			assert.Equal(t, int64(1), st.Replayed)
			assert.Equal(t, int64(1), st.DiskCorrupt, "the truncated record is counted")
			assert.Equal(t, []string{"ok1"}, sentIDs(api), "only the whole event is sent")
			for _, r := range api.requests() {
				assert.NotContains(t, string(r.body), `"ev`+"]", "no half record in a body")
			}
		})
	}
}

// R29, R47: the waiting room gives batches back by due instant, ties in
// arrival order, whatever order they arrived in. The batches are real:
// queued, taken, and settled at the end, so the ledger and the capacity
// places add up.
func TestWaitingRoomDueOrderWithQueuedBatches(t *testing.T) {
	places := newCapacity(10)
	q := newQueue(places, 1, batchEventBytes, time.Second)
	room := newWaitingRoom(time.Hour, places, defaultBackoffPolicy())
	settle := &settler{log: zap.NewNop(), q: q}
	t0 := time.Now()
	take := func(id string) *batch {
		t.Helper()
		require.NoError(t, q.push(event{data: []byte(`{"messageId":"` + id + `"}`)}))
		b, _ := q.take(t0)
		require.NotNil(t, b)
		return b
	}
	// Arrival order b1, b2, b3, b4; due order b2 = b4 (tie: b2 arrived first), b3, b1.
	dues := []struct {
		id  string
		due time.Duration
	}{{"b1", 3 * time.Second}, {"b2", time.Second}, {"b3", 2 * time.Second}, {"b4", time.Second}}
	for _, d := range dues {
		require.True(t, room.wait(take(d.id), t0.Add(d.due)))
	}
	assert.Equal(t, int64(4), places.held(), "waiting batches hold their places (R43)")
	tn := takeTurn(room, t0, nil)
	assert.Nil(t, tn.b, "nothing is due yet")
	assert.False(t, tn.gate.shut())
	assert.Equal(t, time.Second, tn.wait, "until the earliest due instant, not the first arrival's")
	var order []string
	for {
		b := takeTurn(room, t0.Add(5*time.Second), nil).b
		if b == nil {
			break
		}
		order = append(order, string(b.events[0].data[len(`{"messageId":"`):len(`{"messageId":"`)+2]))
		settle.delivered(b)
	}
	assert.Equal(t, []string{"b2", "b4", "b3", "b1"}, order)
	assert.Zero(t, places.held())
	assert.Nil(t, q.mark(), "every event has its outcome")
}

// R46, R43: when the client holds QueueCapacity events no further event
// can join the open batch, so it closes at once instead of waiting for
// FlushInterval; the producer gets its places back as soon as it leaves.
func TestFullClientClosesTheBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithQueueCapacity(3), WithFlushAt(100), WithFlushInterval(time.Hour), WithConsumers(1))
		start := time.Now()
		for _, id := range []string{"e1", "e2"} {
			mustTrack(t, c, id)
		}
		synctest.Wait()
		assert.Empty(t, api.requests(), "two of three places: the batch stays open")
		mustTrack(t, c, "e3")
		synctest.Wait()
		reqs := api.requests()
		require.Equal(t, 1, len(reqs), "the third event fills the client: the batch leaves")
		assert.Equal(t, []string{"e1", "e2", "e3"}, reqs[0].ids)
		assert.Equal(t, time.Duration(0), reqs[0].at.Sub(start), "at once, not after FlushInterval")
		for _, id := range []string{"e4", "e5", "e6"} {
			mustTrack(t, c, id) // the places came back when the batch was taken
		}
		synctest.Wait()
		require.Equal(t, 2, len(api.requests()))
		require.NoError(t, closeClient(t, c, time.Second))
		assert.Equal(t, []string{"e1", "e2", "e3", "e4", "e5", "e6"}, cb.delivered())
	})
}
