package analytics

import (
	"context"
	"encoding/json"
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
)

// Behaviour tests of the delivery core: each one asserts what reached the
// server (requests, messageIds, headers, timing under fake time), what
// reached the callbacks, and when Close returned. None of them looks at
// the waiting room or the consumers, so they hold whatever shape the core
// takes.

// ignoresCancel is a RoundTripper that does not honour the request's
// context, as some custom transports do: a request it holds is answered
// late, after Close has given up on it.
type ignoresCancel struct{ *fakeAPI }

func (t ignoresCancel) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.fakeAPI.RoundTrip(r.WithContext(context.Background()))
}

// errorsFor returns the OnError calls that included id.
func (cb *callbacks) errorsFor(id string) []errCall {
	var out []errCall
	for _, e := range cb.errors() {
		for _, m := range e.msgs {
			if m.ID() == id {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// requestsFor returns the requests whose first event is id.
func requestsFor(reqs []seen, id string) []seen {
	var out []seen
	for _, r := range reqs {
		if len(r.ids) > 0 && r.ids[0] == id {
			out = append(out, r)
		}
	}
	return out
}

// R2, R45: strings reach the server exactly as the caller wrote them,
// backslashes, quotes and control characters included.
func TestStringsReachTheServerIntact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb)
		values := map[string]any{
			"path":    `C:\Users\me\file.txt`,
			"regex":   `^\d+\.\w*$`,
			"trail":   `ends with \`,
			"quote":   `say "hi" \"escaped\"`,
			"control": "tab\tnl\ncr\r\x00\x1f",
			"html":    "<a href='x'>&</a>",
			"unicode": "é ☃ \u2028 \u2029 🎉",
			"list":    []any{`a\b`, []string{`c\d`}},
		}
		require.NoError(t, c.Track(Track{MessageID: `id\with"quote`, UserID: `DOMAIN\user`, Event: `Saved C:\tmp`,
			Properties: values, Context: ContextFields{`k\ey`: `v\al`}}))
		require.NoError(t, closeClient(t, c, time.Second))

		reqs := api.requests()
		require.Len(t, reqs, 1)
		require.True(t, json.Valid(reqs[0].body), "the body is valid JSON: %s", reqs[0].body)
		var env struct {
			Batch []struct {
				MessageID  string         `json:"messageId"`
				UserID     string         `json:"userId"`
				Event      string         `json:"event"`
				Properties map[string]any `json:"properties"`
				Context    map[string]any `json:"context"`
			} `json:"batch"`
		}
		require.NoError(t, json.Unmarshal(reqs[0].body, &env))
		require.Len(t, env.Batch, 1)
		got := env.Batch[0]
		assert.Equal(t, `id\with"quote`, got.MessageID)
		assert.Equal(t, `DOMAIN\user`, got.UserID)
		assert.Equal(t, `Saved C:\tmp`, got.Event)
		assert.Equal(t, `v\al`, got.Context[`k\ey`])
		want := map[string]any{}
		raw, err := json.Marshal(values)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &want))
		assert.Equal(t, want, got.Properties)
		assert.Equal(t, []string{`id\with"quote`}, cb.delivered())
	})
}

// R34: a 2xx ends the rate-limit episode. A later, unrelated 429 opens a
// new episode with its own MaxRateLimitDuration; a stale episode start
// would fail it at once with ErrRateLimitDurationExceeded.
func TestEpisodeEndsOn2xx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			switch {
			case r.ids[0] == "e1" && n == 0:
				return ra(429, "1")
			case r.ids[0] == "e1":
				return reply{status: 200}
			case r.retryCount() == "":
				// Answered 4.5 s after e1's episode began, 3.5 s after it
				// ended with a 200.
				return reply{status: 429, header: map[string]string{"Retry-After": "1"}, hold: time.Second}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithMaxRateLimitDuration(4*time.Second))
		defer stop(c)
		start := time.Now()
		mustTrack(t, c, "e1")
		require.NoError(t, flush(t, c, time.Minute))
		time.Sleep(2500 * time.Millisecond)
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Equal(t, []string{"e1#@0s", "e1#1@1s", "e2#@3.5s", "e2#1@5.5s"}, trace(reqs, start),
			"e2's 429 at +4.5 s opens a new episode; e2 is sent again after its Retry-After")
		assert.Empty(t, cb.errors())
		assert.Equal(t, []string{"e1", "e2"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R34 (a transport error is no response), R35: a transport error does not
// end a rate-limit episode. e2 is answered 429 Retry-After: 1 again and
// again while e1 meets transport errors; the episode still ends
// MaxRateLimitDuration after e2's first 429, and e2 fails then.
func TestTransportErrorDoesNotEndEpisode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if r.ids[0] == "e2" {
				return ra(429, "1")
			}
			if r.retryCount() != "4" {
				return reply{err: errors.New("connection reset by peer")}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(2), WithMaxRateLimitDuration(3*time.Second))
		defer stop(c)
		start := time.Now()
		mustTrack(t, c, "e1")
		time.Sleep(100 * time.Millisecond)
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Minute))

		reqs := api.requests()
		e2 := requestsFor(reqs, "e2")
		require.NotEmpty(t, e2)
		episode := e2[0].done
		require.Len(t, cb.errorsFor("e2"), 1)
		failed := cb.errorsFor("e2")[0]
		assert.ErrorIs(t, failed.err, ErrRateLimitDurationExceeded)
		assert.Equal(t, 3*time.Second, failed.at.Sub(episode), "e2 fails MaxRateLimitDuration after its first 429")
		assert.Equal(t, []string{"e2#@100ms", "e2#1@1.1s", "e2#2@2.1s"}, trace(e2, start), "e2 is not sent after its episode ran out")
		// e1's transport errors fell inside the episode.
		e1 := requestsFor(reqs, "e1")
		inside := 0
		for _, r := range e1 {
			if r.at.After(episode) && r.at.Before(failed.at) {
				inside++
			}
		}
		assert.GreaterOrEqual(t, inside, 1, "a transport error fell inside the episode (e1 at %v)", offsets(e1, start))
		assert.Equal(t, []string{"e1"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

func offsets(reqs []seen, start time.Time) []time.Duration {
	out := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		out[i] = r.at.Sub(start)
	}
	return out
}

// trace is a compact account of what reached the server, for assertions
// and failure messages: "ids#X-Retry-Count@offset" per request.
func trace(reqs []seen, start time.Time) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = fmt.Sprintf("%s#%s@%v", strings.Join(r.ids, ","), r.retryCount(), r.at.Sub(start))
	}
	return out
}

// stop closes c if a failed assertion left it open, so a failing test
// reports its assertion and not a leaked consumer.
func stop(c *Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = c.Close(ctx)
}

// R26, R35: a batch that waited for a Retry-After deadline and then met a
// counted failure waits for its backoff, not for a deadline: when a later,
// unrelated episode runs out, only the batches of that episode fail. e1 is
// rate limited once, then answered 503 four times (its backoff grows to
// about 4 s); e2's episode starts and runs out (1.5 s) meanwhile.
func TestExpiredEpisodeSparesBatchesInBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			switch {
			case r.ids[0] == "e2":
				return ra(429, "1")
			case r.retryCount() == "":
				return ra(429, "1")
			case r.retryCount() < "5":
				return reply{status: 503}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(2), WithMaxRateLimitDuration(1500*time.Millisecond))
		defer stop(c)
		start := time.Now()
		mustTrack(t, c, "e1")
		for len(requestsFor(api.requests(), "e1")) < 5 { // e1's fourth 503: it now backs off for about 4 s
			time.Sleep(10 * time.Millisecond)
		}
		synctest.Wait()
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Minute))

		reqs := api.requests()
		e1 := requestsFor(reqs, "e1")
		assert.Equal(t, []string{"-", "1", "2", "3", "4", "5"}, retryCounts(e1), "e1 is sent until its 200: %v", trace(reqs, start))
		assert.Equal(t, []string{"e1"}, cb.delivered())
		assert.Empty(t, cb.errorsFor("e1"), "e1 waited for its backoff, not for e2's deadline")
		require.Len(t, cb.errorsFor("e2"), 1)
		assert.ErrorIs(t, cb.errorsFor("e2")[0].err, ErrRateLimitDurationExceeded)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R38, R39: a batch that goes back to wait just before Close's deadline
// (answered 503, or 429 with a long Retry-After, while Close waits) is
// handed back at the deadline, once, and counted in Close's error.
func TestCloseHandsBackBatchesThatJustStartedWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if r.ids[0] == "e1" {
				return reply{status: 503, hold: 900 * time.Millisecond}
			}
			return reply{status: 429, header: map[string]string{"Retry-After": "60"}, hold: 950 * time.Millisecond}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(2))
		defer stop(c)
		mustTrack(t, c, "e1")
		mustTrack(t, c, "e2")
		synctest.Wait() // both in flight
		start := time.Now()
		err := closeClient(t, c, time.Second)
		elapsed := time.Since(start)
		require.ErrorIs(t, err, ErrShutdownInterrupted)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Close's error carries the context's cause")
		assert.Contains(t, err.Error(), "2 event(s) handed back")
		within(t, "Close", elapsed, time.Second, 1500*time.Millisecond)
		time.Sleep(time.Minute)
		assert.Len(t, api.requests(), 2, "nothing is sent after Close")
		assert.Equal(t, map[string]int{"e1": 1, "e2": 1}, cb.dispositions())
		assert.Equal(t, 2, cb.failedWith(ErrShutdownInterrupted))
		// The hand-back carries the last answer each batch had (R38).
		for id, status := range map[string]int{"e1": 503, "e2": 429} {
			errs := cb.errorsFor(id)
			require.Len(t, errs, 1)
			var de *DeliveryError
			require.ErrorAs(t, errs[0].err, &de)
			assert.Equal(t, 1, de.Attempts, id)
			requireHTTPStatus(t, de.Last, status)
		}
	})
}

// R40: a request cut off by Close's deadline is handed back with the
// cancellation as its last error, not an earlier answer.
func TestCloseCancelsRetryInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 503}, reply{status: 200, hold: time.Hour}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(1))
		defer stop(c)
		mustTrack(t, c, "e1")
		time.Sleep(2 * time.Second) // answered 503, sent again, now in flight
		require.Len(t, api.requests(), 2)
		err := closeClient(t, c, time.Second)
		require.ErrorIs(t, err, ErrShutdownInterrupted)
		errs := cb.errorsFor("e1")
		require.Len(t, errs, 1)
		var de *DeliveryError
		require.ErrorAs(t, errs[0].err, &de)
		assert.ErrorIs(t, de.Reason, ErrShutdownInterrupted)
		assert.ErrorIs(t, de.Last, context.Canceled, "the cut-off request, not the earlier 503")
		assert.Equal(t, 2, de.Attempts)
	})
}

// A panicking callback is logged once, with its value; a callback that
// returns normally logs nothing.
func TestCallbackPanicIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.ErrorLevel)
		api := newFakeAPI(nil)
		calls := 0
		c := newTestClient(t, api, nil, WithFlushAt(1), WithConsumers(1), WithLogger(zap.New(core)),
			WithOnSuccess(func(m []Message) {
				calls++
				if m[0].ID() == "boom" {
					panic("boom")
				}
			}))
		defer stop(c)
		mustTrack(t, c, "fine")
		require.NoError(t, flush(t, c, time.Second))
		assert.Zero(t, logs.Len(), "nothing to report")
		mustTrack(t, c, "boom")
		require.NoError(t, flush(t, c, time.Second))
		panics := logs.FilterMessage("analytics callback panicked").All()
		require.Len(t, panics, 1)
		assert.Equal(t, "boom", panics[0].ContextMap()["panic"])
		require.NoError(t, closeClient(t, c, time.Second))
		assert.Equal(t, 2, calls)
	})
}

// R38, R39, R42: a transport that ignores cancellation answers after Close
// has returned. Whatever the answer would lead to (a counted retry, a
// Retry-After wait, a split), the batch can no longer be sent and is handed
// back with ErrShutdownInterrupted: no event is lost without a callback.
// Close itself still returns by its deadline + 0.5 s (closeGrace).
func TestLateResponseAfterCloseIsHandedBack(t *testing.T) {
	for name, late := range map[string]reply{
		"503":             {status: 503},
		"429 Retry-After": {status: 429, header: map[string]string{"Retry-After": "5"}},
		"413 split":       {status: 413},
		"transport error": {err: errors.New("connection reset by peer")},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				late.hold = 10 * time.Second
				api := newFakeAPI(sequence(late))
				cb := &callbacks{}
				c := newTestClient(t, ignoresCancel{api}, cb, WithFlushAt(2), WithConsumers(1))
				defer stop(c)
				mustTrack(t, c, "e1")
				mustTrack(t, c, "e2")
				synctest.Wait() // in flight, answered in 10 s whatever Close does
				start := time.Now()
				err := closeClient(t, c, time.Second)
				elapsed := time.Since(start)
				assert.ErrorIs(t, err, ErrShutdownInterrupted)
				within(t, "Close", elapsed, time.Second, 1500*time.Millisecond)
				assert.Empty(t, cb.dispositions(), "no answer yet")
				time.Sleep(time.Minute) // the late answer arrives at +10 s
				assert.Len(t, api.requests(), 1, "nothing is sent after Close")
				assert.Equal(t, map[string]int{"e1": 1, "e2": 1}, cb.dispositions())
				assert.Equal(t, 2, cb.failedWith(ErrShutdownInterrupted))
				assert.Equal(t, int64(2), c.Stats().HandedBack)
				assert.Zero(t, c.Stats().Pending)
			})
		})
	}
}

// sizedTrack returns a Track whose encoded JSON is exactly n bytes (the
// size limits of R45 are in encoded bytes).
func sizedTrack(t testing.TB, id string, n int) Track {
	t.Helper()
	m := Track{MessageID: id, UserID: "u", Event: "e", Timestamp: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}
	size := func(m Track) int {
		sc := getScratch()
		sc.use(nil, false)
		defer putScratch(sc)
		_, err := m.prepare(sc, false)
		require.NoError(t, err)
		return len(sc.Enc.Bytes())
	}
	m.Properties = Properties{"pad": ""}
	pad := n - size(m)
	require.GreaterOrEqual(t, pad, 0)
	m.Properties = Properties{"pad": strings.Repeat("x", pad)}
	require.Equal(t, n, size(m))
	return m
}

// R45: an event of exactly MaxEventBytes is accepted and delivered; one
// byte more is rejected.
func TestEventSizeLimitIsInclusive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb)
		defer stop(c)
		require.NoError(t, c.Track(sizedTrack(t, "limit", MaxEventBytes)))
		assert.ErrorIs(t, c.Track(sizedTrack(t, "over", MaxEventBytes+1)), ErrEventTooLarge)
		require.NoError(t, closeClient(t, c, time.Second))
		reqs := api.requests()
		require.Len(t, reqs, 1)
		assert.Equal(t, []string{"limit"}, reqs[0].ids)
		assert.Equal(t, []string{"limit"}, cb.delivered())
	})
}

// R45: no request body exceeds MaxBatchBytes, envelope included, even when
// the events alone come within a few bytes of it: 20 events of 24 999
// bytes are 499 999 bytes with their commas.
func TestBodyNeverExceedsMaxBatchBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(100))
		defer stop(c)
		var want []string
		for i := 0; i < 20; i++ {
			id := fmt.Sprintf("e%02d", i)
			want = append(want, id)
			require.NoError(t, c.Track(sizedTrack(t, id, 24_999)))
		}
		require.NoError(t, closeClient(t, c, time.Second))
		var got []string
		for _, r := range api.requests() {
			assert.LessOrEqual(t, len(r.body), MaxBatchBytes, "body of %d events", len(r.ids))
			got = append(got, r.ids...)
		}
		assert.ElementsMatch(t, want, got, "every event once")
		assert.Len(t, cb.delivered(), 20)
	})
}

// R23: a Retry-After date equal to the current second is not usable: the
// batch takes counted backoff (W_1), not the rate-limited path with a zero
// wait.
func TestRetryAfterDateEqualToNowTakesBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if n == 0 {
				if !r.at.Equal(r.at.Truncate(time.Second)) {
					panic("the first request must arrive on a whole second")
				}
				return ra(429, r.at.UTC().Format(http.TimeFormat))
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		defer stop(c)
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 2)
		lo, hi := window(1)
		within(t, "gap_1", gap(reqs, 0), lo, hi)
		assert.Equal(t, "1", reqs[1].retryCount())
		assert.Zero(t, c.Stats().RateLimited, "not a usable Retry-After")
		assert.Equal(t, int64(1), c.Stats().Retries, "a counted retry")
		assert.Equal(t, []string{"m1"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R29, R46, R47: while a batch is being assembled (its FlushInterval runs
// long), a batch in the waiting room is still sent again as soon as its
// backoff ends, not when the open batch closes.
func TestDueBatchNotHeldByOpenBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if n == 0 {
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(2), WithFlushInterval(5*time.Second), WithConsumers(1))
		defer stop(c)
		start := time.Now()
		mustTrack(t, c, "a1")
		mustTrack(t, c, "a2") // a full batch: sent at once, answered 500
		synctest.Wait()
		mustTrack(t, c, "b1") // opens a batch that closes at +5 s
		time.Sleep(6 * time.Second)
		reqs := api.requests()
		require.Equal(t, []string{"a1,a2#@0s", "a1,a2#1@" + reqs[1].at.Sub(start).String(), "b1#@5s"}, trace(reqs, start))
		lo, hi := window(1)
		within(t, "a1's backoff", gap(reqs, 0), lo, hi)
		require.NoError(t, closeClient(t, c, time.Second))
		assert.ElementsMatch(t, []string{"a1", "a2", "b1"}, cb.delivered())
	})
}

// R51: the split of a batch answered 413 is logged at debug level with the
// number of events split (never their content).
func TestSplitIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		api := newFakeAPI(sequence(reply{status: 413}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(3), WithConsumers(1), WithLogger(zap.New(core)))
		defer stop(c)
		for _, id := range []string{"e1", "e2", "e3"} {
			mustTrack(t, c, id)
		}
		require.NoError(t, flush(t, c, time.Minute))
		split := logs.FilterMessageSnippet("413").All()
		require.Len(t, split, 1)
		assert.Equal(t, zapcore.DebugLevel, split[0].Level)
		assert.Equal(t, int64(3), split[0].ContextMap()["events"])
		assert.Equal(t, []string{"e1", "e2", "e3"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R46: the consumer is woken for each reason a batch may close, without
// any other activity: the first event of a batch (its FlushInterval must
// be timed) and the FlushAt-th event. Each event is given time to be
// handled before the next, so no earlier wake-up can stand in.
func TestBatchClosesWithoutOtherActivity(t *testing.T) {
	t.Run("FlushInterval of a lone event", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(nil)
			c := newTestClient(t, api, nil, WithFlushAt(100), WithFlushInterval(2*time.Second), WithConsumers(1))
			defer stop(c)
			synctest.Wait() // the consumer is idle, waiting for work
			start := time.Now()
			mustTrack(t, c, "e1")
			time.Sleep(time.Minute)
			assert.Equal(t, []string{"e1#@2s"}, trace(api.requests(), start))
			require.NoError(t, closeClient(t, c, time.Second))
		})
	})
	t.Run("FlushAt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(nil)
			c := newTestClient(t, api, nil, WithFlushAt(3), WithFlushInterval(time.Hour), WithConsumers(1))
			defer stop(c)
			synctest.Wait() // the consumer is idle, waiting for work
			start := time.Now()
			for _, id := range []string{"e1", "e2", "e3"} {
				time.Sleep(time.Second)
				mustTrack(t, c, id)
				synctest.Wait()
			}
			assert.Equal(t, []string{"e1,e2,e3#@3s"}, trace(api.requests(), start))
			require.NoError(t, closeClient(t, c, time.Second))
		})
	})
}

// R45: a batch closes when the queued events no longer fit its byte
// budget (475 000 bytes of events and commas), not before: events that
// fill it exactly wait for more, and the next event sends them at once.
func TestBatchClosesAtByteBudget(t *testing.T) {
	t.Run("exact fit, then one more", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(nil)
			c := newTestClient(t, api, nil, WithFlushAt(1000), WithFlushInterval(time.Hour), WithConsumers(1))
			defer stop(c)
			var ids []string
			for i := 0; i < 19; i++ { // 18 × 24 999 + 25 000 + 18 commas = 475 000
				ids = append(ids, fmt.Sprintf("e%02d", i))
				size := 24_999
				if i == 18 {
					size = 25_000
				}
				require.NoError(t, c.Track(sizedTrack(t, ids[i], size)))
				synctest.Wait()
			}
			assert.Empty(t, api.requests(), "475 000 bytes fit one batch: it stays open")
			require.NoError(t, c.Track(sizedTrack(t, "next", 200)))
			synctest.Wait()
			reqs := api.requests()
			require.Len(t, reqs, 1, "the next event does not fit: the batch closes")
			assert.Equal(t, ids, reqs[0].ids)
			assert.LessOrEqual(t, len(reqs[0].body), MaxBatchBytes)
			require.NoError(t, closeClient(t, c, time.Second))
		})
	})
	t.Run("commas count", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(nil)
			c := newTestClient(t, api, nil, WithFlushAt(1000), WithFlushInterval(time.Hour), WithConsumers(1))
			defer stop(c)
			for i := 0; i < 20; i++ { // 474 990 bytes of events, 475 009 with 19 commas
				require.NoError(t, c.Track(sizedTrack(t, fmt.Sprintf("e%02d", i), 23_749+i%2)))
			}
			synctest.Wait()
			reqs := api.requests()
			require.Len(t, reqs, 1)
			assert.Len(t, reqs[0].ids, 19, "the 20th event would pass the budget by its comma")
			require.NoError(t, closeClient(t, c, time.Second))
		})
	})
	t.Run("one byte over", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(nil)
			c := newTestClient(t, api, nil, WithFlushAt(1000), WithFlushInterval(time.Hour), WithConsumers(1))
			defer stop(c)
			for i := 0; i < 18; i++ { // 18 × 25 000 + 17 commas = 450 017
				require.NoError(t, c.Track(sizedTrack(t, fmt.Sprintf("e%02d", i), 25_000)))
			}
			synctest.Wait()
			assert.Empty(t, api.requests())
			require.NoError(t, c.Track(sizedTrack(t, "e18", 25_000))) // 475 018: over
			synctest.Wait()
			reqs := api.requests()
			require.Len(t, reqs, 1)
			assert.Len(t, reqs[0].ids, 18, "the 18 that fit go at once; e18 opens the next batch")
			require.NoError(t, closeClient(t, c, time.Second))
		})
	})
}

// R3, R47: the halves of a batch answered 413 are due at the same
// instant; the first half (the older events) is sent first.
func TestSplitHalvesKeepEventOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 413}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(4), WithConsumers(1))
		defer stop(c)
		start := time.Now()
		for _, id := range []string{"e1", "e2", "e3", "e4"} {
			mustTrack(t, c, id)
		}
		require.NoError(t, flush(t, c, time.Minute))
		// The pieces are R67's: the search's first try, then its climb.
		assert.Equal(t, []string{"e1,e2,e3,e4#@0s", "e1#1@0s", "e2,e3#1@0s", "e4#1@0s"}, trace(api.requests(), start))
		assert.Equal(t, []string{"e1", "e2", "e3", "e4"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R46: events left in the queue when a full batch is taken open the next
// batch then, and it closes FlushInterval later (not FlushInterval after
// the first batch opened).
func TestRestOfQueueOpensNextBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		c := newTestClient(t, api, nil, WithFlushAt(2), WithFlushInterval(10*time.Second), WithConsumers(1))
		defer stop(c)
		start := time.Now()
		mustTrack(t, c, "e1") // opens a batch at 0 s
		time.Sleep(5 * time.Second)
		mustTrack(t, c, "e2") // full: taken at 5 s
		mustTrack(t, c, "e3") // left in the queue: its batch opens at 5 s
		time.Sleep(time.Minute)
		assert.Equal(t, []string{"e1,e2#@5s", "e3#@15s"}, trace(api.requests(), start))
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// A Retry-After header present without a value (possible from a custom
// RoundTripper) is an unparseable value: counted backoff, no panic.
func TestEmptyRetryAfterHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 503}, reply{status: 200}))
		rt := emptyRetryAfter{api}
		cb := &callbacks{}
		c := newTestClient(t, rt, cb, WithFlushAt(1))
		defer stop(c)
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 2)
		lo, hi := window(1)
		within(t, "gap_1", gap(reqs, 0), lo, hi)
		assert.Zero(t, c.Stats().RateLimited)
		assert.Equal(t, []string{"m1"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// emptyRetryAfter adds a Retry-After header with no value to every non-2xx
// answer.
type emptyRetryAfter struct{ *fakeAPI }

func (t emptyRetryAfter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.fakeAPI.RoundTrip(r)
	if err == nil && resp.StatusCode >= 300 {
		resp.Header["Retry-After"] = []string{}
	}
	return resp, err
}

// Enqueue takes every message type as a value or a non-nil pointer, and
// rejects a nil pointer of any type with a *MessageError (never a panic).
func TestEnqueueValuesPointersAndNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb)
		defer stop(c)
		msgs := []Message{
			Track{UserID: "u", Event: "e"}, &Track{UserID: "u", Event: "e"},
			Identify{UserID: "u"}, &Identify{UserID: "u"},
			Group{UserID: "u", GroupID: "g"}, &Group{UserID: "u", GroupID: "g"},
			Page{UserID: "u"}, &Page{UserID: "u"},
			Screen{UserID: "u"}, &Screen{UserID: "u"},
			Alias{UserID: "u", PreviousID: "p"}, &Alias{UserID: "u", PreviousID: "p"},
		}
		for _, m := range msgs {
			require.NoError(t, c.Enqueue(m), "%T", m)
		}
		for _, m := range []Message{(*Track)(nil), (*Identify)(nil), (*Group)(nil), (*Page)(nil), (*Screen)(nil), (*Alias)(nil), nil} {
			err := c.Enqueue(m)
			var me *MessageError
			assert.ErrorAs(t, err, &me, "%T", m)
			assert.ErrorIs(t, err, ErrInvalidMessage, "%T", m)
		}
		require.NoError(t, closeClient(t, c, time.Second))
		var types []string
		for _, r := range api.requests() {
			for _, e := range r.decoded["batch"].([]any) {
				types = append(types, e.(map[string]any)["type"].(string))
			}
		}
		assert.Equal(t, []string{"track", "track", "identify", "identify", "group", "group", "page", "page", "screen", "screen", "alias", "alias"}, types)
	})
}

// R43, R51: rejected events are reported in one warning per
// dropReportInterval (10 s), not one per attempt, and the rest at Close.
func TestDropWarningsAreAggregated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.WarnLevel)
		api := newFakeAPI(func(int, seen) reply { return reply{status: 200, hold: time.Second} })
		c := newTestClient(t, api, nil, WithFlushAt(1), WithConsumers(1), WithQueueCapacity(1), WithLogger(zap.New(core)))
		defer stop(c)
		for round := 0; round < 4; round++ { // four attempts within 4 s, drops before each ends
			mustTrack(t, c, fmt.Sprintf("e%d", round))
			synctest.Wait() // in flight
			mustTrack(t, c, fmt.Sprintf("q%d", round))
			assert.ErrorIs(t, c.Track(track("drop")), ErrQueueFull)
			require.NoError(t, flush(t, c, time.Minute))
		}
		var counts []int64
		for _, e := range logs.FilterMessage("enqueue calls rejected; their events will not be sent").All() {
			counts = append(counts, e.ContextMap()["events"].(int64))
		}
		assert.Equal(t, []int64{1}, counts, "the first drop is reported at once, the next ones wait for the interval")
		require.NoError(t, closeClient(t, c, time.Second))
		counts = counts[:0]
		for _, e := range logs.FilterMessage("enqueue calls rejected; their events will not be sent").All() {
			counts = append(counts, e.ContextMap()["events"].(int64))
		}
		assert.Equal(t, []int64{1, 3}, counts, "Close reports the rest")
	})
}

// R11: a redirect loop ends after 10 requests (Go's limit); the last 307
// then fails the batch as a redirect, and nothing is retried.
func TestRedirectLoopEnds(t *testing.T) {
	srv := newLoopback(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Location", "/v1/batch")
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
	cb := &callbacks{}
	c, err := New("abc", append(cb.options(), WithEndpoint(srv.URL))...)
	require.NoError(t, err)
	auditLater(t, c, cb)
	mustTrack(t, c, "m1")
	require.NoError(t, closeClient(t, c, 5*time.Second))
	reqs, _ := srv.requests()
	assert.Len(t, reqs, 10, "the request and 9 redirects followed")
	require.Len(t, cb.errors(), 1)
	he := requireHTTPStatus(t, cb.errors()[0].err, http.StatusTemporaryRedirect)
	assert.Equal(t, KindRedirect, he.Kind)
}

// R40, R42: a 2xx that arrives after Close's deadline (from a transport
// that ignores cancellation) is a delivery: the server has the events, so
// they get OnSuccess, not a hand-back that would invite a re-send.
func TestLateSuccessAfterCloseIsDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 200, hold: 10 * time.Second}))
		cb := &callbacks{}
		c := newTestClient(t, ignoresCancel{api}, cb, WithFlushAt(1), WithConsumers(1))
		defer stop(c)
		mustTrack(t, c, "e1")
		synctest.Wait()
		err := closeClient(t, c, time.Second)
		assert.ErrorIs(t, err, ErrShutdownInterrupted, "Close could not wait for the answer")
		time.Sleep(time.Minute)
		assert.Equal(t, []string{"e1"}, cb.delivered())
		assert.Empty(t, cb.errors())
		assert.Equal(t, int64(1), c.Stats().Delivered)
	})
}

// R51: the drop warning is repeated once dropReportInterval has passed
// since the last one (at 10 s exactly, not only after it).
func TestDropWarningRepeatsAfterInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.WarnLevel)
		api := newFakeAPI(func(int, seen) reply { return reply{status: 200, hold: time.Second} })
		c := newTestClient(t, api, nil, WithFlushAt(1), WithConsumers(1), WithQueueCapacity(1), WithLogger(zap.New(core)))
		defer stop(c)
		drop := func(round int) { // an event in flight for 1 s, one queued, one dropped
			mustTrack(t, c, fmt.Sprintf("e%d", round))
			synctest.Wait()
			mustTrack(t, c, fmt.Sprintf("q%d", round))
			assert.ErrorIs(t, c.Track(track("drop")), ErrQueueFull)
		}
		start := time.Now()
		drop(0) // reported when e0's attempt ends, at 1 s
		require.NoError(t, flush(t, c, time.Minute))
		time.Sleep(time.Until(start.Add(10 * time.Second)))
		drop(1) // e1's attempt ends at 11 s: 10 s after the first warning
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		var at []time.Duration
		for _, e := range logs.FilterMessage("enqueue calls rejected; their events will not be sent").All() {
			at = append(at, e.Time.Sub(start))
		}
		assert.Equal(t, []time.Duration{time.Second, 11 * time.Second}, at)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R41: each Flush waits for exactly the events accepted before it, while
// older and newer events finish at other times.
func TestFlushesWaitForTheirOwnEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if r.ids[0] == "e1" {
				return reply{status: 200, hold: 2 * time.Second}
			}
			return reply{status: 200, hold: 4 * time.Second}
		})
		c := newTestClient(t, api, nil, WithFlushAt(1), WithConsumers(2))
		defer stop(c)
		start := time.Now()
		returned := make([]time.Duration, 2)
		done := make(chan struct{}, 2)
		flushAsync := func(i int) {
			go func() {
				_ = c.Flush(context.Background())
				returned[i] = time.Since(start)
				done <- struct{}{}
			}()
		}
		mustTrack(t, c, "e1")
		synctest.Wait()
		flushAsync(0) // waits for e1
		synctest.Wait()
		mustTrack(t, c, "e2")
		synctest.Wait()
		flushAsync(1) // waits for e1 and e2
		<-done
		<-done
		assert.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second}, returned)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R39, R46: Flush closes the open batch at once; it does not wait for
// FlushInterval.
func TestFlushSendsOpenBatchAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		c := newTestClient(t, api, nil, WithFlushAt(100), WithFlushInterval(time.Hour), WithConsumers(1))
		defer stop(c)
		synctest.Wait()
		start := time.Now()
		mustTrack(t, c, "e1")
		synctest.Wait() // the consumer times the open batch
		require.NoError(t, flush(t, c, time.Minute))
		assert.Equal(t, []string{"e1#@0s"}, trace(api.requests(), start))
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R39: when Close's deadline passes but every event still gets its outcome
// within the grace period (here a 2xx that arrives 200 ms after the
// deadline, from a transport that ignores cancellation), nothing was handed
// back, so Close returns nil: an error saying "0 handed back" would only
// be a false alarm for the caller.
func TestCloseNilWhenOutcomesArriveWithinGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 200, hold: 1200 * time.Millisecond}))
		cb := &callbacks{}
		c := newTestClient(t, ignoresCancel{api}, cb, WithFlushAt(2), WithConsumers(1))
		defer stop(c)
		mustTrack(t, c, "e1")
		mustTrack(t, c, "e2")
		synctest.Wait() // in flight, answered 200 at +1.2 s
		start := time.Now()
		err := closeClient(t, c, time.Second)
		elapsed := time.Since(start)
		assert.NoError(t, err, "every event got its outcome before Close returned")
		within(t, "Close", elapsed, 1200*time.Millisecond, 1500*time.Millisecond)
		assert.Equal(t, map[string]int{"e1": 1, "e2": 1}, cb.dispositions())
		assert.Zero(t, cb.failedWith(ErrShutdownInterrupted))
		assert.Equal(t, int64(2), c.Stats().Delivered)
	})
}
