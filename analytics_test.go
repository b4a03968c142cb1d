package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// R2: stamping fills only what the caller left empty; golden wire format.
// The stamped timestamp and sentAt are UTC ("Z") whatever the host's zone:
// the test runs under UTC and under zones east and west of it (time.Local
// is swapped for the test and restored), so it fails on a UTC host too if
// the SDK ever stamps local time.
func TestStampingAndWireFormat(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("IST", 5*3600+1800), time.FixedZone("HST", -10*3600)}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		zones = append(zones, ny)
	}
	for _, zone := range zones {
		t.Run(zone.String(), func(t *testing.T) {
			saved := time.Local
			time.Local = zone
			t.Cleanup(func() { time.Local = saved })
			stampingAndWireFormat(t)
		})
	}
}

func stampingAndWireFormat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithConsumers(1))
		ts := time.Date(2024, 5, 6, 7, 8, 9, 123_000_000, time.UTC)
		require.NoError(t, c.Track(Track{MessageID: "mine", UserID: "u1", Event: "Signed Up", Timestamp: ts,
			Properties: Properties{"plan": "pro"}, Integrations: Integrations{"All": false}}))
		require.NoError(t, c.Identify(Identify{AnonymousID: "a1", Traits: Traits{"email": "a@b.c"}, Context: ContextFields{"ip": "1.2.3.4"}}))
		require.NoError(t, c.Group(Group{UserID: "u1", GroupID: "g1", Traits: Traits{"n": 2}}))
		require.NoError(t, c.Page(Page{UserID: "u1", Name: "Home", Category: "Docs"}))
		require.NoError(t, c.Screen(Screen{UserID: "u1", Name: "Main"}))
		require.NoError(t, c.Alias(Alias{UserID: "u2", PreviousID: "u1", Context: ContextFields{"library": "custom"}}))
		require.NoError(t, closeClient(t, c, time.Second))

		reqs := api.requests()
		require.Len(t, reqs, 1)
		var env struct {
			Batch []map[string]any `json:"batch"`
		}
		require.NoError(t, json.Unmarshal(reqs[0].body, &env))
		require.Len(t, env.Batch, 6)
		lib := map[string]any{"name": LibraryName, "version": Version}

		assert.Equal(t, map[string]any{"type": "track", "messageId": "mine", "timestamp": "2024-05-06T07:08:09.123Z",
			"userId": "u1", "event": "Signed Up", "properties": map[string]any{"plan": "pro"},
			"context": map[string]any{"library": lib}, "integrations": map[string]any{"All": false}}, env.Batch[0])

		identify := env.Batch[1]
		assert.Len(t, identify["messageId"], 36, "generated UUID")
		assert.Equal(t, "2000-01-01T00:00:00Z", identify["timestamp"], "stamped with now (synctest epoch), in UTC")
		assert.Equal(t, "2000-01-01T00:00:00Z", reqs[0].sentAt, "sentAt in UTC")
		assert.Equal(t, map[string]any{"ip": "1.2.3.4", "library": lib}, identify["context"])
		assert.Equal(t, "a1", identify["anonymousId"])
		assert.NotContains(t, identify, "userId")
		assert.Equal(t, "g1", env.Batch[2]["groupId"])
		assert.Equal(t, "Home", env.Batch[3]["name"])
		assert.Equal(t, "Docs", env.Batch[3]["category"])
		assert.Equal(t, "screen", env.Batch[4]["type"])
		assert.Equal(t, "u1", env.Batch[5]["previousId"])
		assert.Equal(t, map[string]any{"library": "custom"}, env.Batch[5]["context"], "the caller's library wins")

		// Callbacks see the values that were sent.
		sent := cb.delivered()
		assert.Equal(t, "mine", sent[0])
		assert.Equal(t, identify["messageId"], sent[1])
	})
}

// Each message type validates itself; rejected events never reach the wire.
func TestValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		c := newTestClient(t, api, nil)
		cases := map[string]error{
			"track event":       c.Track(Track{UserID: "u"}),
			"track identity":    c.Track(Track{Event: "e"}),
			"identify identity": c.Identify(Identify{}),
			"group id":          c.Group(Group{UserID: "u"}),
			"page identity":     c.Page(Page{Name: "x"}),
			"screen identity":   c.Screen(Screen{Name: "x"}),
			"alias previous":    c.Alias(Alias{UserID: "u"}),
			"alias user":        c.Alias(Alias{PreviousID: "p"}),
			"nil pointer":       c.Enqueue((*Track)(nil)),
			"nil message":       c.Enqueue(nil),
			"NaN":               c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"x": math.NaN()}}),
			"chan":              c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"x": make(chan int)}}),
			"bad raw":           c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"x": json.RawMessage("{")}}),
		}
		cyclic := Properties{}
		cyclic["self"] = cyclic
		cases["cycle"] = c.Track(Track{UserID: "u", Event: "e", Properties: cyclic})
		for name, err := range cases {
			assert.ErrorIs(t, err, ErrInvalidMessage, name)
			var me *MessageError
			assert.ErrorAs(t, err, &me, name)
		}
		var me *MessageError
		require.ErrorAs(t, cases["NaN"], &me)
		assert.Equal(t, "track", me.Type)
		assert.Equal(t, "Properties", me.Field)
		require.NoError(t, closeClient(t, c, time.Second))
		assert.Empty(t, api.requests())
	})
}

// Enqueue accepts values and pointers of every type.
func TestEnqueueAnyMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb)
		msgs := []Message{Track{UserID: "u", Event: "e"}, &Identify{UserID: "u"}, Group{UserID: "u", GroupID: "g"},
			&Page{UserID: "u"}, Screen{UserID: "u"}, &Alias{UserID: "u", PreviousID: "p"}}
		for _, m := range msgs {
			require.NoError(t, c.Enqueue(m))
		}
		require.NoError(t, closeClient(t, c, time.Second))
		var types []string
		for _, ms := range cb.successes {
			for _, m := range ms {
				types = append(types, m.Type())
			}
		}
		assert.Equal(t, []string{"track", "identify", "group", "page", "screen", "alias"}, types)
	})
}

// Events are encoded at enqueue: later changes to the caller's map are not sent.
func TestEncodedAtEnqueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		c := newTestClient(t, api, nil)
		props := Properties{"v": 1, "s": "é\n\"<>\x01\xff"}
		require.NoError(t, c.Track(Track{UserID: "u", Event: "e", Properties: props}))
		props["v"] = 2
		require.NoError(t, closeClient(t, c, time.Second))
		var env struct {
			Batch []struct {
				Properties map[string]any `json:"properties"`
			} `json:"batch"`
		}
		require.NoError(t, json.Unmarshal(api.requests()[0].body, &env))
		assert.Equal(t, map[string]any{"v": 1.0, "s": "é\n\"<>\x01\uFFFD"}, env.Batch[0].Properties)
	})
}

// R42, INV1: exactly one disposition per accepted event under concurrent
// enqueue from many goroutines, on a real socket with failures mixed in.
func TestExactlyOneDispositionConcurrentSafe(t *testing.T) {
	var mu sync.Mutex
	count := 0
	srv := newLoopback(t, func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		count++
		k := count
		mu.Unlock()
		switch {
		case k%40 == 3 && r.Header.Get("X-Retry-Count") == "": // few, short backoffs: each holds a consumer (R29)
			w.WriteHeader(500)
		case k%7 == 5:
			w.WriteHeader(422) // fails whole (a 400 would be isolated, R66)
		}
	})
	cb := &callbacks{}
	c, err := New("wk", append(cb.options(), WithEndpoint(srv.URL), WithFlushAt(7), WithConsumers(3),
		WithQueueCapacity(100_000), WithFlushInterval(10*time.Millisecond))...)
	require.NoError(t, err)
	auditLater(t, c, cb)
	var wg sync.WaitGroup
	var accepted sync.Map
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				if c.Track(track(id)) == nil {
					accepted.Store(id, true)
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, closeClient(t, c, 30*time.Second))
	disp := cb.dispositions()
	n := 0
	accepted.Range(func(k, _ any) bool {
		n++
		assert.Equal(t, 1, disp[k.(string)], "event %s", k)
		return true
	})
	assert.Equal(t, 3200, n)
	assert.Len(t, disp, n)
	s := c.Stats()
	assert.Equal(t, int64(n), s.Delivered+s.Failed+s.HandedBack)
	assert.Positive(t, s.Failed, "the 422s failed some batches")
	assert.Zero(t, s.Pending)
}

// A panicking callback does not kill the consumer.
func TestCallbackPanicIsContained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		var calls int
		var mu sync.Mutex
		c := newTestClient(t, api, nil, WithFlushAt(1), WithConsumers(1), WithOnSuccess(func([]Message) {
			mu.Lock()
			calls++
			mu.Unlock()
			panic("boom")
		}))
		mustTrack(t, c, "e1")
		require.NoError(t, flush(t, c, time.Second))
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Second))
		require.NoError(t, closeClient(t, c, time.Second))
		assert.Equal(t, 2, calls)
		assert.Len(t, api.requests(), 2)
	})
}

// R51: warnings carry the raw Retry-After; drops are aggregated; the write
// key and payloads never appear in logs.
func TestLogging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		api := newFakeAPI(sequence(ra(429, "soon"), ra(429, "1"), reply{status: 200, hold: time.Second}, reply{status: 400}))
		c, err := New("secret-write-key", WithEndpoint("http://api.test"), WithHTTPClient(&http.Client{Transport: api}),
			WithLogger(zap.New(core)), WithFlushAt(1), WithConsumers(1), WithQueueCapacity(1))
		require.NoError(t, err)
		auditLater(t, c, nil)
		require.NoError(t, c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"secret-payload": 1}}))
		synctest.Wait()
		time.Sleep(2 * time.Second) // the third attempt is in flight
		mustTrack(t, c, "q1")
		for i := 0; i < 5; i++ {
			assert.ErrorIs(t, c.Track(track("drop")), ErrQueueFull)
		}
		require.NoError(t, flush(t, c, time.Minute))
		require.NoError(t, closeClient(t, c, time.Second))

		all := logs.All()
		var text strings.Builder
		for _, e := range all {
			fmt.Fprintf(&text, "%s %s %v\n", e.Level, e.Message, e.ContextMap())
		}
		assert.Equal(t, 1, logs.FilterMessage("unparseable Retry-After; retrying with backoff").FilterField(zap.String("retryAfter", "soon")).Len(), text.String())
		drops := logs.FilterMessage("enqueue calls rejected; their events will not be sent").All()
		require.Len(t, drops, 1, text.String())
		assert.Equal(t, map[string]any{"events": int64(5), "queueFull": int64(5), "queueCapacity": int64(1)}, drops[0].ContextMap())
		assert.Equal(t, 1, logs.FilterMessage("events not delivered").Len())
		assert.NotContains(t, text.String(), "secret-write-key")
		assert.NotContains(t, text.String(), "secret-payload")
	})
}

// Callers' errors.Is checks work for every synchronous error.
func TestErrorIdentities(t *testing.T) {
	de := &DeliveryError{Reason: ErrRetriesExhausted, Last: &HTTPError{StatusCode: 503, Kind: KindRetryable, Message: "busy"}, Attempts: 3}
	assert.ErrorIs(t, de, ErrRetriesExhausted)
	var he *HTTPError
	require.ErrorAs(t, de, &he)
	assert.Equal(t, 503, he.StatusCode)
	assert.Equal(t, "analytics: retries exhausted after 3 attempt(s): retryable response 503 Service Unavailable: busy", de.Error())
	te := &TransportError{Err: errors.New("refused"), Retryable: true}
	assert.Equal(t, "transport error: refused", te.Error())
}

// Message ids are version-4 UUIDs and do not repeat, across id blocks too.
func TestNewMessageID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for i := 0; i < 10*64; i++ { // ten blocks of ids
		id := NewMessageID()
		require.Regexp(t, re, id)
		require.False(t, seen[id], "repeated id %s", id)
		seen[id] = true
	}
}

// Without callbacks the generated id goes straight into the JSON: it is
// still a version-4 UUID, unique, and the same on every attempt (R2, R3).
func TestGeneratedIDsWithoutCallbacks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 500}, reply{status: 200}))
		c := newTestClient(t, api, nil, WithFlushAt(100), WithConsumers(1))
		for i := 0; i < 300; i++ {
			require.NoError(t, c.Track(Track{UserID: "u", Event: "e"}))
		}
		require.NoError(t, closeClient(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 4)
		var retries []seen
		for _, r := range reqs {
			if r.retryCount() == "1" {
				retries = append(retries, r)
			}
		}
		require.Len(t, retries, 1)
		assert.Equal(t, reqs[0].ids, retries[0].ids, "the retry carries the same ids")
		re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
		seen := map[string]bool{}
		for _, r := range reqs {
			if r.retryCount() != "" {
				continue
			}
			for _, id := range r.ids {
				require.Regexp(t, re, id)
				require.False(t, seen[id], "repeated id %s", id)
				seen[id] = true
			}
		}
		assert.Len(t, seen, 300)
	})
}

// The client never keeps the caller's maps, so a message written in the
// call, map literals included, stays on the caller's stack: with constant
// values, an enqueue allocates nothing at all (slabs are reused once the
// events are delivered). With callbacks, the kept copy is allocated instead.
func TestEnqueueDoesNotKeepCallersMaps(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	c, err := New("wk", WithEndpoint("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: blockedTransport{}}),
		WithConsumers(1), WithQueueCapacity(5000))
	require.NoError(t, err)
	// No accounting audit: discardQueued drops the queued events on purpose.
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		_ = c.Track(Track{UserID: "u1", Event: "Played", Properties: Properties{"plan": "pro", "n": 7, "ok": true},
			Context: ContextFields{"ip": "1.2.3.4"}})
		_ = c.Identify(Identify{UserID: "u1", Traits: Traits{"name": "Ada"}})
		_ = c.EnqueueContext(ctx, Page{UserID: "u1", Name: "Home", Properties: Properties{"path": "/"}})
		_ = c.Enqueue(&Screen{UserID: "u1", Name: "Main", Properties: Properties{"tab": 1}})
		c.q.discardQueued()
	})
	assert.Zero(t, allocs, "allocations per round of four enqueue calls")
	assert.Zero(t, c.Stats().RejectedQueueFull)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_ = c.Close(cctx)
}

// Callbacks get a copy of what was sent: same values, the stamped id and
// time, top-level maps copied (so later changes to the caller's map do not
// show), and the time as the same instant in UTC.
func TestCallbacksGetCopiesOfWhatWasSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb)
		props := Properties{"plan": "pro", "nested": map[string]any{"a": 1}}
		at := time.Date(2024, 5, 6, 9, 8, 9, 123000000, time.FixedZone("CEST", 2*3600))
		require.NoError(t, c.Track(Track{UserID: "u1", Event: "Signed Up", Timestamp: at, Properties: props,
			Context: ContextFields{"ip": "1.2.3.4"}}))
		require.NoError(t, c.EnqueueContext(context.Background(), &Page{AnonymousID: "a1", Name: "Home", Category: "Docs"}))
		props["plan"] = "changed after Track"
		require.NoError(t, closeClient(t, c, time.Second))

		require.Len(t, cb.successes, 1)
		got := cb.successes[0]
		require.Len(t, got, 2)
		tr, ok := got[0].(Track)
		require.True(t, ok, "%T", got[0])
		reqs := api.requests()
		require.Len(t, reqs, 1)
		assert.Equal(t, reqs[0].ids[0], tr.MessageID, "the id that was sent")
		assert.Equal(t, "u1", tr.UserID)
		assert.Equal(t, "Signed Up", tr.Event)
		assert.True(t, at.Equal(tr.Timestamp), "%v vs %v", at, tr.Timestamp)
		assert.Equal(t, Properties{"plan": "pro", "nested": map[string]any{"a": 1}}, tr.Properties)
		assert.Equal(t, ContextFields{"ip": "1.2.3.4"}, tr.Context)
		assert.Nil(t, tr.Integrations)
		pg, ok := got[1].(Page)
		require.True(t, ok, "%T", got[1])
		assert.Equal(t, Page{MessageID: reqs[0].ids[1], AnonymousID: "a1", Name: "Home", Category: "Docs",
			Timestamp: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}, pg)
	})
}

// S31, S32, R37, R38, R39: Close during either kind of wait hands back.
func TestCloseDuringWaitsHandsBack(t *testing.T) {
	cases := map[string]struct {
		first   reply
		timeout time.Duration
	}{
		"counted backoff": {reply{status: 503}, 300 * time.Millisecond},
		"Retry-After 300": {ra(429, "300"), time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(sequence(tc.first))
				cb := &callbacks{}
				c := newTestClient(t, api, cb, WithMaxRetries(10), WithFlushAt(2))
				mustTrack(t, c, "m1")
				mustTrack(t, c, "m2")
				synctest.Wait() // the batch waits after its first response
				require.Len(t, api.requests(), 1)
				start := time.Now()
				err := closeClient(t, c, tc.timeout)
				elapsed := time.Since(start)
				assert.ErrorIs(t, err, ErrShutdownInterrupted)
				assert.Contains(t, err.Error(), "2 event(s) handed back")
				assert.LessOrEqual(t, elapsed, tc.timeout+500*time.Millisecond)
				time.Sleep(time.Minute)
				assert.Len(t, api.requests(), 1, "no request after Close")
				assert.Equal(t, 2, cb.failedWith(ErrShutdownInterrupted))
				assert.Len(t, cb.errors(), 1, "handed back once, never also failed")
				assert.Equal(t, map[string]int{"m1": 1, "m2": 1}, cb.dispositions())
				assert.Equal(t, int64(0), c.Stats().Failed)
				// S34: Flush on the closed client returns at once.
				assert.ErrorIs(t, flush(t, c, 2*time.Second), ErrClosed)
			})
		})
	}
}

// S47, R40: Close cancels an in-flight request and hands the batch back.
func TestCloseCancelsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 200, hold: 10 * time.Second}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithHTTPTimeout(30*time.Second), WithFlushAt(1))
		mustTrack(t, c, "m1")
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		err := closeClient(t, c, time.Second)
		assert.LessOrEqual(t, time.Since(start), 1500*time.Millisecond)
		assert.ErrorIs(t, err, ErrShutdownInterrupted)
		time.Sleep(time.Minute)
		assert.Len(t, api.requests(), 1)
		assert.Equal(t, 1, cb.failedWith(ErrShutdownInterrupted))
		assert.Empty(t, cb.delivered())
	})
}

// S46, R39: Track after Close, and a second Close.
func TestEnqueueAfterCloseAndDoubleClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		c := newTestClient(t, api, nil)
		start := time.Now()
		require.NoError(t, closeClient(t, c, time.Second))
		assert.Less(t, time.Since(start), 100*time.Millisecond)
		assert.ErrorIs(t, c.Track(track("late")), ErrClosed)
		assert.ErrorIs(t, closeClient(t, c, time.Second), ErrClosed)
		time.Sleep(time.Minute)
		assert.Empty(t, api.requests())
	})
}

// S48, R39, R46: Close drains the open batch at once.
func TestCloseDrainsQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(100), WithFlushInterval(time.Minute))
		for i := 0; i < 5; i++ {
			mustTrack(t, c, fmt.Sprintf("e%d", i))
		}
		start := time.Now()
		require.NoError(t, closeClient(t, c, 5*time.Second))
		assert.Less(t, time.Since(start), time.Second)
		reqs := api.requests()
		require.Len(t, reqs, 1)
		assert.Len(t, reqs[0].ids, 5)
		assert.Len(t, cb.delivered(), 5)
	})
}

// R39: Close returns by its deadline + 0.5 s even when OnError is slow; the
// hand-back callbacks that could not run in time still run afterwards, on
// another goroutine, and every event gets its one disposition.
func TestCloseBoundedWithSlowOnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(int, seen) reply { return reply{status: 200, hold: time.Hour} })
		var mu sync.Mutex
		handed := map[string]int{}
		c := newTestClient(t, api, nil, WithFlushAt(1), WithConsumers(1),
			WithOnError(func(err error, msgs []Message) {
				time.Sleep(2 * time.Second)
				mu.Lock()
				for _, m := range msgs {
					handed[m.ID()]++
				}
				mu.Unlock()
			}))
		mustTrack(t, c, "in-flight")
		synctest.Wait()
		mustTrack(t, c, "queued")
		start := time.Now()
		err := closeClient(t, c, time.Second)
		assert.LessOrEqual(t, time.Since(start), 1500*time.Millisecond, "Close overran its deadline")
		assert.ErrorIs(t, err, ErrShutdownInterrupted)
		assert.Contains(t, err.Error(), "2 event(s) handed back")
		time.Sleep(5 * time.Second) // the late callbacks finish
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, map[string]int{"in-flight": 1, "queued": 1}, handed)
	})
}

// R2: a stamped timestamp is the wall clock at the enqueue call. The
// client reads the monotonic clock per event and the wall clock only once
// per rebaseEvery (scratch.now), so this follows real time for longer than
// several rebases, with no sleep: every delivered timestamp lies between
// the wall clock read just before its Track call and just after it.
func TestStampedTimestampsFollowTheWallClock(t *testing.T) {
	api := newFakeAPI(nil)
	c := newTestClient(t, api, nil, WithQueueCapacity(MaxQueueCapacity))
	type bracket struct{ before, after time.Time }
	var calls []bracket
	start := time.Now()
	for i := 0; time.Since(start) < 4*rebaseEvery; i++ {
		before := time.Now()
		require.NoError(t, c.Track(Track{MessageID: fmt.Sprint(i), UserID: "u", Event: "e"}))
		calls = append(calls, bracket{before, time.Now()})
	}
	require.NoError(t, closeClient(t, c, 10*time.Second))
	const slack = time.Millisecond // a step of the wall clock during the test
	seen := 0
	for _, r := range api.requests() {
		var env struct {
			Batch []struct {
				MessageID string    `json:"messageId"`
				Timestamp time.Time `json:"timestamp"`
			} `json:"batch"`
		}
		require.NoError(t, json.Unmarshal(r.body, &env))
		for _, e := range env.Batch {
			var i int
			_, err := fmt.Sscan(e.MessageID, &i)
			require.NoError(t, err)
			b := calls[i]
			if e.Timestamp.Before(b.before.Add(-slack)) || e.Timestamp.After(b.after.Add(slack)) {
				t.Fatalf("event %d stamped %s, called between %s and %s", i,
					e.Timestamp.Format(time.RFC3339Nano), b.before.UTC().Format(time.RFC3339Nano), b.after.UTC().Format(time.RFC3339Nano))
			}
			seen++
		}
	}
	assert.Equal(t, len(calls), seen, "every event delivered once")
}

// R2, with the clock under the test's control: events stamped just after
// a rebase, just before the next and well after it carry the wall clock of
// their call to the nanosecond.
func TestStampedTimestampsAcrossRebases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		c := newTestClient(t, api, nil, WithConsumers(1))
		var want []string
		for i, wait := range []time.Duration{0, time.Nanosecond, rebaseEvery / 3, rebaseEvery/2 + 7, rebaseEvery, 3 * rebaseEvery, time.Hour, 1} {
			time.Sleep(wait)
			want = append(want, time.Now().UTC().Format(time.RFC3339Nano))
			require.NoError(t, c.Track(Track{MessageID: fmt.Sprint(i), UserID: "u", Event: "e"}))
		}
		require.NoError(t, closeClient(t, c, time.Second))
		var got []string
		for _, r := range api.requests() {
			for _, e := range r.decoded["batch"].([]any) {
				got = append(got, e.(map[string]any)["timestamp"].(string))
			}
		}
		assert.Equal(t, want, got)
	})
}
