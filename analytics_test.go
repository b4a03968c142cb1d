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

// R2: stamping fills only what the caller left empty; golden wire format.
func TestStampingAndWireFormat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithConsumers(1))
		ts := time.Date(2024, 5, 6, 7, 8, 9, 123_000_000, time.UTC)
		require.NoError(t, c.Track(Track{MessageID: "mine", UserID: "u1", Event: "Signed Up", Timestamp: ts,
			Properties: Properties{"plan": "pro"}, Integrations: Integrations{"All": false}}))
		require.NoError(t, c.Identify(Identify{AnonymousID: "a1", Traits: Traits{"email": "a@b.c"}, Context: Context{"ip": "1.2.3.4"}}))
		require.NoError(t, c.Group(Group{UserID: "u1", GroupID: "g1", Traits: Traits{"n": 2}}))
		require.NoError(t, c.Page(Page{UserID: "u1", Name: "Home", Category: "Docs"}))
		require.NoError(t, c.Screen(Screen{UserID: "u1", Name: "Main"}))
		require.NoError(t, c.Alias(Alias{UserID: "u2", PreviousID: "u1", Context: Context{"library": "custom"}}))
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
		assert.Equal(t, "2000-01-01T00:00:00Z", identify["timestamp"], "stamped with now (synctest epoch)")
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
		assert.Equal(t, "properties", me.Field)
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
			w.WriteHeader(400)
		}
	})
	cb := &callbacks{}
	c, err := New("wk", append(cb.options(), WithEndpoint(srv.URL), WithFlushAt(7), WithConsumers(3),
		WithQueueCapacity(100_000), WithFlushInterval(10*time.Millisecond))...)
	require.NoError(t, err)
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
	assert.Positive(t, s.Failed, "the 400s failed some batches")
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
		drops := logs.FilterMessage("events rejected because the queue was full").All()
		require.Len(t, drops, 1, text.String())
		assert.Equal(t, int64(5), drops[0].ContextMap()["events"])
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

// Message ids are version-4 UUIDs and do not repeat, across id blocks too.
func TestNewMessageID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for i := 0; i < 10*idsPerBlock; i++ {
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
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		_ = c.Track(Track{UserID: "u1", Event: "Played", Properties: Properties{"plan": "pro", "n": 7, "ok": true},
			Context: Context{"ip": "1.2.3.4"}})
		_ = c.Identify(Identify{UserID: "u1", Traits: Traits{"name": "Ada"}})
		_ = c.EnqueueContext(ctx, Page{UserID: "u1", Name: "Home", Properties: Properties{"path": "/"}})
		_ = c.Enqueue(&Screen{UserID: "u1", Name: "Main", Properties: Properties{"tab": 1}})
		c.q.discardQueued()
	})
	assert.Zero(t, allocs, "allocations per round of four enqueue calls")
	assert.Zero(t, c.Stats().Dropped)
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
			Context: Context{"ip": "1.2.3.4"}}))
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
		assert.Equal(t, Context{"ip": "1.2.3.4"}, tr.Context)
		assert.Nil(t, tr.Integrations)
		pg, ok := got[1].(Page)
		require.True(t, ok, "%T", got[1])
		assert.Equal(t, Page{MessageID: reqs[0].ids[1], AnonymousID: "a1", Name: "Home", Category: "Docs",
			Timestamp: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}, pg)
	})
}
