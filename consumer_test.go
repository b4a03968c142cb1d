package analytics

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Delivery semantics under fake time (testing/synctest): every wait below
// is measured on the requests that reached the fake API, and every outcome
// on what reached the callbacks.

func ra(status int, value string) reply {
	return reply{status: status, header: map[string]string{"Retry-After": value}}
}

func retryCounts(reqs []seen) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		if _, ok := r.header["X-Retry-Count"]; ok {
			out[i] = r.retryCount()
		} else {
			out[i] = "-"
		}
	}
	return out
}

func requireHTTPStatus(t *testing.T, err error, status int) *HTTPError {
	t.Helper()
	var he *HTTPError
	require.True(t, errors.As(err, &he), "error %v is not an *HTTPError", err)
	assert.Equal(t, status, he.StatusCode)
	return he
}

// S3, R7, R26: counted retries wait W_k and count in X-Retry-Count.
func TestRetryableThenSuccessBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 500}, reply{status: 500}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithMaxRetries(3))
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 3)
		assert.Equal(t, []string{"-", "1", "2"}, retryCounts(reqs))
		for k := 1; k <= 2; k++ {
			lo, hi := window(k)
			within(t, fmt.Sprintf("gap_%d", k), gap(reqs, k-1), lo, hi)
		}
		assert.Equal(t, []string{"m1"}, cb.delivered())
		assert.Empty(t, cb.errors())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S4, S5, S6, S7, S45, R12, R13, R15: which statuses retry, observed on the wire.
func TestStatusRetryBehaviour(t *testing.T) {
	retried := []int{500, 502, 503, 504, 508, 529, 408, 410, 429, 460}
	failed := []int{501, 505, 511, 400, 401, 403, 404, 413, 418, 422, 499, 600, 999, 300, 304}
	for _, status := range retried {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(sequence(reply{status: status}, reply{status: 200}))
				cb := &callbacks{}
				c := newTestClient(t, api, cb, WithMaxRetries(3))
				mustTrack(t, c, "m1")
				require.NoError(t, flush(t, c, time.Minute))
				reqs := api.requests()
				require.Len(t, reqs, 2)
				assert.Equal(t, []string{"-", "1"}, retryCounts(reqs))
				lo, hi := window(1)
				within(t, "gap_1", gap(reqs, 0), lo, hi)
				assert.Equal(t, []string{"m1"}, cb.delivered())
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
	for _, status := range failed {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(sequence(reply{status: status,
					body: `{"code":"invalid_payload","message":"the batch payload was rejected"}`}))
				cb := &callbacks{}
				c := newTestClient(t, api, cb, WithMaxRetries(3))
				mustTrack(t, c, "m1")
				require.NoError(t, flush(t, c, time.Minute))
				time.Sleep(2 * time.Second)
				require.Len(t, api.requests(), 1, "no retry of a non-retryable status")
				errs := cb.errors()
				require.Len(t, errs, 1)
				he := requireHTTPStatus(t, errs[0].err, status)
				if status < 400 {
					assert.Equal(t, KindRedirect, he.Kind)
				} else {
					assert.Equal(t, KindNonRetryable, he.Kind)
				}
				assert.Equal(t, "the batch payload was rejected", he.Message) // R18
				assert.Empty(t, cb.delivered())
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
}

// S2, R9: every 2xx is delivery, whatever the body.
func TestEvery2xxIsSuccess(t *testing.T) {
	for _, rep := range []reply{{status: 201, body: "{}"}, {status: 202}, {status: 204}, {status: 200, body: "not json"}, {status: 200, body: "[]"}, {status: 299, body: "x", cut: true}} {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(sequence(rep))
			cb := &callbacks{}
			c := newTestClient(t, api, cb)
			mustTrack(t, c, "m1")
			require.NoError(t, flush(t, c, time.Minute))
			assert.Len(t, api.requests(), 1)
			assert.Equal(t, []string{"m1"}, cb.delivered(), "status %d", rep.status)
			assert.Empty(t, cb.errors())
			require.NoError(t, closeClient(t, c, time.Second))
		})
	}
}

// S8, R27: MaxRetries counts retries, not attempts.
func TestRetriesExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 500, body: "boom"}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithMaxRetries(2))
		mustTrack(t, c, "m1")
		mustTrack(t, c, "m2")
		require.NoError(t, flush(t, c, time.Minute))
		time.Sleep(5 * time.Second)
		reqs := api.requests()
		require.Len(t, reqs, 3)
		assert.Equal(t, []string{"-", "1", "2"}, retryCounts(reqs))
		errs := cb.errors()
		require.Len(t, errs, 1)
		assert.ErrorIs(t, errs[0].err, ErrRetriesExhausted)
		requireHTTPStatus(t, errs[0].err, 500)
		assert.Contains(t, errs[0].err.Error(), "boom")
		assert.Len(t, errs[0].msgs, 2)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S9, R27, R48: an explicit MaxRetries of 0 means one attempt.
func TestMaxRetriesZero(t *testing.T) {
	for name, rep := range map[string]reply{"500": {status: 500}, "closed socket": {err: errors.New("EOF")}} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(sequence(rep))
				cb := &callbacks{}
				c := newTestClient(t, api, cb, WithMaxRetries(0))
				mustTrack(t, c, "m1")
				require.NoError(t, flush(t, c, time.Minute))
				time.Sleep(2 * time.Second)
				assert.Len(t, api.requests(), 1)
				require.Len(t, cb.errors(), 1)
				assert.ErrorIs(t, cb.errors()[0].err, ErrRetriesExhausted)
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
}

// S10 A/C, S37, R14, R16: transport errors and broken bodies retry by backoff.
func TestTransportErrorsAndBrokenBodies(t *testing.T) {
	cases := map[string]reply{
		"no status line":     {err: errors.New("EOF")},
		"truncated 500 body": {status: 500, body: "0123456789", cut: true},
	}
	for name, first := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(sequence(first, reply{status: 200}))
				cb := &callbacks{}
				c := newTestClient(t, api, cb)
				mustTrack(t, c, "m1")
				require.NoError(t, flush(t, c, time.Minute))
				reqs := api.requests()
				require.Len(t, reqs, 2)
				lo, hi := window(1)
				within(t, "gap_1", gap(reqs, 0), lo, hi)
				assert.Equal(t, "1", reqs[1].retryCount())
				assert.Equal(t, []string{"m1"}, cb.delivered())
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
}

// S37, R16, R18: the body never changes the decision or panics.
func TestErrorBodyShapes(t *testing.T) {
	bodies := []string{`[]`, `"oops"`, `5`, `null`, `{}`, `{"code":1}`, `{"message":7}`, `<html>x</html>`, ``, "\xff\xfe"}
	for _, body := range bodies {
		for _, cut := range []bool{false, true} {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(sequence(reply{status: 400, body: body, cut: cut}))
				cb := &callbacks{}
				c := newTestClient(t, api, cb)
				mustTrack(t, c, "m1")
				require.NoError(t, flush(t, c, time.Minute))
				assert.Len(t, api.requests(), 1)
				require.Len(t, cb.errors(), 1)
				requireHTTPStatus(t, cb.errors()[0].err, 400)
				require.NoError(t, closeClient(t, c, time.Second))
			})
		}
	}
}

// S11, R3, R4, R8, R17: a timed-out attempt is replayed with the same ids
// and a later sentAt.
func TestTimeoutReplaysSameBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 200, hold: 3 * time.Second}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithHTTPTimeout(time.Second), WithMaxRetries(3))
		mustTrack(t, c, "m1")
		mustTrack(t, c, "")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 2)
		assert.Equal(t, reqs[0].ids, reqs[1].ids)
		assert.Equal(t, "1", reqs[1].retryCount())
		t0, err0 := time.Parse(time.RFC3339Nano, reqs[0].sentAt)
		t1, err1 := time.Parse(time.RFC3339Nano, reqs[1].sentAt)
		require.NoError(t, err0)
		require.NoError(t, err1)
		assert.True(t, t1.After(t0), "sentAt is set per attempt")
		assert.Len(t, cb.delivered(), 2)
		assert.Empty(t, cb.errors())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S28, S29, R28: MaxTotalBackoffDuration with >=.
func TestMaxTotalBackoffDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 500}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithMaxRetries(1000), WithMaxTotalBackoffDuration(2*time.Second))
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		time.Sleep(10 * time.Second)
		reqs := api.requests()
		assert.Len(t, reqs, 4)
		require.Len(t, cb.errors(), 1)
		assert.ErrorIs(t, cb.errors()[0].err, ErrBackoffDurationExceeded)
		requireHTTPStatus(t, cb.errors()[0].err, 500)
		assert.GreaterOrEqual(t, cb.errors()[0].at.Sub(reqs[0].done), 2*time.Second)
		require.NoError(t, closeClient(t, c, time.Second))
	})
	t.Run("zero", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(sequence(reply{status: 500}))
			cb := &callbacks{}
			c := newTestClient(t, api, cb, WithMaxRetries(1000), WithMaxTotalBackoffDuration(0))
			mustTrack(t, c, "m1")
			require.NoError(t, flush(t, c, time.Minute))
			assert.Len(t, api.requests(), 1)
			assert.Equal(t, 1, cb.failedWith(ErrBackoffDurationExceeded))
			require.NoError(t, closeClient(t, c, time.Second))
		})
	})
}

// S42, R7, R26, R30: mixed retry reasons; only counted retries advance k.
func TestMixedRetryReasons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 408}, ra(429, "1"), reply{status: 500}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithMaxRetries(2))
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 4)
		assert.Equal(t, []string{"-", "1", "2", "3"}, retryCounts(reqs))
		lo, hi := window(1)
		within(t, "gap_1", gap(reqs, 0), lo, hi)
		within(t, "gap_2", gap(reqs, 1), time.Second, time.Second)
		lo, hi = window(2)
		within(t, "gap_3", gap(reqs, 2), lo, hi)
		assert.Equal(t, []string{"m1"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S44, R26: the schedule follows W_k, and the jitter is real.
func TestBackoffScheduleAndJitter(t *testing.T) {
	var gap4 []time.Duration
	for rep := 0; rep < 10; rep++ {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(sequence(reply{status: 500}))
			cb := &callbacks{}
			c := newTestClient(t, api, cb, WithMaxRetries(6))
			mustTrack(t, c, "m1")
			require.NoError(t, flush(t, c, 10*time.Minute))
			reqs := api.requests()
			require.Len(t, reqs, 7)
			for k := 1; k <= 6; k++ {
				lo, hi := window(k)
				within(t, fmt.Sprintf("gap_%d", k), gap(reqs, k-1), lo, hi)
			}
			gap4 = append(gap4, gap(reqs, 3))
			require.NoError(t, closeClient(t, c, time.Second))
		})
	}
	lo, hi := gap4[0], gap4[0]
	for _, g := range gap4 {
		lo, hi = min(lo, g), max(hi, g)
	}
	assert.GreaterOrEqual(t, hi-lo, 50*time.Millisecond, "gap_4 values %v", gap4)

	// Unit part: the consumers' schedule gives, for every k, a wait in the
	// window of the library's k-th NextBackOff; from k = 8 on (up to k =
	// 1000, MaxRetries' default) it lies in [54, 66] s and still varies.
	p := defaultBackoffPolicy()
	b := newBackoff(p)
	seenWaits := map[time.Duration]bool{}
	for k := 1; k <= 1000; k++ {
		lib := b.NextBackOff()
		require.NotEqual(t, time.Duration(-1), lib, "NextBackOff returned Stop")
		d := p.delay(k)
		lo, hi := window(k)
		within(t, fmt.Sprintf("wait_%d", k), d, lo, hi)
		within(t, fmt.Sprintf("library wait_%d", k), lib, lo, hi)
		if k >= 8 {
			seenWaits[d] = true
		}
	}
	assert.Greater(t, len(seenWaits), 10)
}

// S40, R2, R3: caller ids are kept and batches stay stable across retries.
func TestCallerMessageIDsAndStableBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 503}, reply{status: 503}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb)
		mustTrack(t, c, "m-fixed-1")
		mustTrack(t, c, "")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 3)
		require.Len(t, reqs[0].ids, 2)
		assert.Equal(t, "m-fixed-1", reqs[0].ids[0])
		assert.NotEmpty(t, reqs[0].ids[1])
		assert.Equal(t, reqs[0].ids, reqs[1].ids)
		assert.Equal(t, reqs[0].ids, reqs[2].ids)
		assert.Equal(t, reqs[0].ids, cb.delivered(), "callbacks carry the ids that were sent")
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// tooLarge answers 413 to any body larger than limit bytes, 200 otherwise.
func tooLarge(limit int) func(int, seen) reply {
	return func(_ int, r seen) reply {
		if len(r.raw) > limit {
			return reply{status: 413, body: `{"message":"request size exceeds max limit"}`}
		}
		return reply{status: 200}
	}
}

// halvingRequests predicts how many requests a batch of the given event
// sizes takes against a body limit when every 413 splits it in halves.
func halvingRequests(sizes []int, limit, frame int) int {
	body := frame + len(sizes) - 1
	for _, s := range sizes {
		body += s
	}
	if body <= limit || len(sizes) == 1 {
		return 1
	}
	mid := len(sizes) / 2
	return 1 + halvingRequests(sizes[:mid], limit, frame) + halvingRequests(sizes[mid:], limit, frame)
}

// R3, R67: a 413 cuts the batch into pieces until the one event the
// server refuses fails alone; the other 199 are delivered once each, with
// the same ids, in no more requests than halving would take.
func TestTooLargeSplitsUntilTheCulpritFailsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 20_000
		api := newFakeAPI(tooLarge(limit))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(200), WithConsumers(2))
		var sizes []int
		for i := 0; i < 200; i++ {
			m := track(fmt.Sprintf("e%03d", i))
			if i == 137 {
				m.Properties = Properties{"blob": strings.Repeat("x", 25_000)}
			}
			require.NoError(t, c.Track(m))
		}
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		// Sizes of each event's JSON as sent, read back from the first body.
		var env struct {
			Batch []json.RawMessage `json:"batch"`
		}
		require.NoError(t, json.Unmarshal(reqs[0].body, &env))
		frame := len(reqs[0].body) - 199
		for _, e := range env.Batch {
			sizes = append(sizes, len(e))
			frame -= len(e)
		}
		halving := halvingRequests(sizes, limit, frame)
		t.Logf("%d requests (halving: %d)", len(reqs), halving)
		assert.LessOrEqual(t, len(reqs), halving)
		refused := 0
		for _, r := range reqs {
			if len(r.body) > limit {
				refused++
			}
		}
		assert.LessOrEqual(t, refused, searchRefusals+1, "requests answered 413: the search's and the event's own")

		errs := cb.errors()
		require.Len(t, errs, 1)
		require.Len(t, errs[0].msgs, 1)
		assert.Equal(t, "e137", errs[0].msgs[0].ID())
		requireHTTPStatus(t, errs[0].err, 413)
		assert.Len(t, cb.delivered(), 199)
		for id, n := range cb.dispositions() {
			assert.Equal(t, 1, n, id)
		}
		// Halves carry on the attempt count and never mix in other events.
		for _, r := range reqs[1:] {
			assert.NotEmpty(t, r.retryCount(), "a half is a re-send of events already sent")
			assert.Subset(t, reqs[0].ids, r.ids)
		}
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R3, R67: a limit below every single event ends with each event failing
// alone with its own 413, after a finite number of requests (at most the
// 2n − 1 of halving).
func TestTooLargeForEveryEventEndsSplitting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(tooLarge(10))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(8))
		for i := 0; i < 8; i++ {
			mustTrack(t, c, fmt.Sprintf("e%d", i))
		}
		require.NoError(t, flush(t, c, time.Minute))
		t.Logf("%d requests", len(api.requests()))
		assert.LessOrEqual(t, len(api.requests()), 15)
		errs := cb.errors()
		assert.Len(t, errs, 8)
		for _, e := range errs {
			assert.Len(t, e.msgs, 1)
			requireHTTPStatus(t, e.err, 413)
		}
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R3, R38: Close during splitting hands back every event without an
// outcome yet; each event still gets exactly one disposition.
func TestCloseDuringSplitHandsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			rep := tooLarge(10)(n, r)
			rep.hold = 300 * time.Millisecond
			return rep
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(8), WithConsumers(1))
		for i := 0; i < 8; i++ {
			mustTrack(t, c, fmt.Sprintf("e%d", i))
		}
		time.Sleep(700 * time.Millisecond) // two requests answered 413, the third in flight
		err := closeClient(t, c, 10*time.Millisecond)
		assert.ErrorIs(t, err, ErrShutdownInterrupted)
		disp := cb.dispositions()
		assert.Len(t, disp, 8)
		for id, n := range disp {
			assert.Equal(t, 1, n, id)
		}
		assert.Equal(t, 8, cb.failedWith(ErrShutdownInterrupted)+len(cb.delivered())+countStatus(cb, 413))
		assert.Positive(t, cb.failedWith(ErrShutdownInterrupted))
	})
}

func countStatus(cb *callbacks, status int) int {
	n := 0
	for _, e := range cb.errors() {
		var he *HTTPError
		if errors.As(e.err, &he) && he.StatusCode == status && !errors.Is(e.err, ErrShutdownInterrupted) {
			n += len(e.msgs)
		}
	}
	return n
}

// R35, R46: the OnError of the batches an expired rate-limit episode fails
// runs on the consumer that noticed the expiry, and may take long. An open
// batch whose FlushInterval passes meanwhile is not held back by it: with
// other consumers free it goes when it is due, and with that consumer
// alone it goes as soon as the callback returns.
func TestExpiredEpisodeCallbacksDoNotDelayTheNextBatch(t *testing.T) {
	for _, tc := range []struct {
		consumers int
		bAt       time.Duration
	}{{1, 3500 * time.Millisecond}, {3, 2100 * time.Millisecond}} {
		t.Run(fmt.Sprintf("consumers=%d", tc.consumers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(func(n int, r seen) reply {
					if r.ids[0] == "a" {
						return ra(429, "60")
					}
					return reply{status: 200}
				})
				var failedAt []time.Duration
				start := time.Now()
				c := newTestClient(t, api, nil, WithConsumers(tc.consumers), WithFlushInterval(500*time.Millisecond),
					WithMaxRateLimitDuration(time.Second), WithOnError(func(err error, evs []Message) {
						failedAt = append(failedAt, time.Since(start))
						time.Sleep(2 * time.Second) // a slow OnError
					}))
				mustTrack(t, c, "a") // sent at +0.5 s, 429: the episode runs out at +1.5 s
				time.Sleep(1600 * time.Millisecond)
				mustTrack(t, c, "b") // its batch is due at +2.1 s
				time.Sleep(5 * time.Second)
				require.NoError(t, closeClient(t, c, time.Second))
				var sent []string
				for _, r := range api.requests() {
					sent = append(sent, fmt.Sprintf("%s at +%v", strings.Join(r.ids, ","), r.at.Sub(start)))
				}
				assert.Equal(t, []time.Duration{1500 * time.Millisecond}, failedAt, "a fails when the episode runs out")
				assert.Equal(t, []string{"a at +500ms", fmt.Sprintf("b at +%v", tc.bAt)}, sent)
			})
		})
	}
}
