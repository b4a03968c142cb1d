package analytics

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/relaykit/analytics-go/internal/httpbatch"
	"github.com/relaykit/analytics-go/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// U1, R19, D27: one parse gives one value for the decision and the
// deadline, also 0.999 s before a second boundary: the value is rounded up
// to 1 s, and the batch is sent again exactly 1 s after the answer (not
// 0.999 s, which would be before the stated instant, and not at once).
func TestParseOnceAcrossSecondBoundary(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 1_000_000, time.UTC) // 0.999 s before 12:00:01
	header := now.Truncate(time.Second).Add(time.Second).Format(http.TimeFormat)
	v := httpbatch.Judge(httpbatch.Answer{Status: 429, RetryAfter: header, HasRetryAfter: true}, false, now)
	require.Equal(t, httpbatch.RateLimited, v.Outcome)
	assert.Equal(t, time.Second, v.Delay, "the path and the deadline use the same rounded-up value")

	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if n == 0 {
				// Answered 1 ms after a whole second, naming the next one.
				next := r.at.Truncate(time.Second).Add(time.Second)
				return reply{status: 429, header: map[string]string{"Retry-After": next.Format(http.TimeFormat)}, hold: time.Millisecond}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 2)
		require.Equal(t, time.Millisecond, reqs[0].done.Sub(reqs[0].done.Truncate(time.Second)))
		assert.Equal(t, time.Second, gap(reqs, 0), "waited the rounded-up value")
		assert.Equal(t, "1", reqs[1].retryCount())
		assert.Equal(t, int64(1), c.Stats().RateLimited)
		assert.Equal(t, []string{"m1"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R31, R33, R34, R35, R55: the room keeps the episode apart from the
// deadline, and an expired episode fails only the batches that wait for a
// deadline, not those waiting for their backoff.
func TestWaitingRoomEpisodeAndDeadline(t *testing.T) {
	t0 := time.Now()
	places := newCapacity(100)
	r := newWaitingRoom(10*time.Second, places, defaultBackoffPolicy())
	one := func() *batch { return &batch{events: make([]event, 1)} }
	opened, _, _ := r.rateLimited(t0, 5*time.Second, one())
	assert.True(t, opened)
	// A shorter Retry-After never shortens the deadline (max).
	opened, _, _ = r.rateLimited(t0.Add(time.Second), time.Second, one())
	assert.False(t, opened, "one episode")
	assert.Equal(t, 5*time.Second, r.gate(t0, nil).wait)
	assert.Equal(t, int64(2), places.held(), "waiting events count against capacity")
	// Nothing is taken while the gate is closed.
	tn := takeTurn(r, t0.Add(4*time.Second), nil)
	assert.Nil(t, tn.b)
	assert.True(t, tn.gate.shut())
	// A 2xx from an in-flight request ends the episode, not the deadline.
	assert.True(t, r.endEpisode())
	assert.Equal(t, 2*time.Second, r.gate(t0.Add(3*time.Second), nil).wait)
	// Served: cleared; both batches are due, oldest due first.
	tn = takeTurn(r, t0.Add(5*time.Second), nil)
	require.NotNil(t, tn.b)
	assert.False(t, tn.gate.shut())
	tn = takeTurn(r, t0.Add(5*time.Second), nil)
	require.NotNil(t, tn.b)
	assert.Zero(t, places.held())
	assert.False(t, r.gate(t0.Add(5*time.Second), nil).shut())

	// A new episode: a batch waits for a deadline, another for its backoff.
	limited, backingOff := one(), one()
	r.rateLimited(t0.Add(20*time.Second), time.Second, limited)
	require.True(t, r.wait(backingOff, t0.Add(40*time.Second)))
	// Waits never run past start + limit.
	r.rateLimited(t0.Add(28*time.Second), 300*time.Second, one())
	assert.Equal(t, 2*time.Second, r.gate(t0.Add(28*time.Second), nil).wait)
	// At start + limit the episode expires: the deadline batches fail, the
	// gate opens at once, the backoff batch waits on.
	g := r.gate(t0.Add(30*time.Second), nil)
	assert.False(t, g.shut())
	assert.Len(t, g.expired, 2)
	assert.NotContains(t, g.expired, backingOff)
	tn = takeTurn(r, t0.Add(30*time.Second), nil)
	assert.False(t, tn.gate.shut())
	assert.Equal(t, 10*time.Second, tn.wait, "the backoff batch is due at its own time")
	// Close empties the room and refuses later arrivals.
	assert.Equal(t, []*batch{backingOff}, r.close())
	assert.False(t, r.wait(one(), t0))
}

// MaxRateLimitDuration 0: a usable Retry-After fails the batch at once
// (R35), with every batch that waits for a deadline.
func TestWaitingRoomZeroLimit(t *testing.T) {
	r := newWaitingRoom(0, newCapacity(10), defaultBackoffPolicy())
	b := &batch{}
	_, expired, ok := r.rateLimited(time.Now(), time.Second, b)
	assert.True(t, ok)
	assert.Equal(t, []*batch{b}, expired)
	assert.False(t, r.gate(time.Now(), nil).shut(), "no deadline is left behind")
}

// S12, R7, R30, R31: Retry-After waits do not spend MaxRetries.
func TestRetryAfterDoesNotSpendRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(ra(429, "1"), ra(429, "1"), reply{status: 500}, reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithMaxRetries(1))
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 4)
		assert.Equal(t, []string{"-", "1", "2", "3"}, retryCounts(reqs))
		within(t, "gap_1", gap(reqs, 0), time.Second, time.Second)
		within(t, "gap_2", gap(reqs, 1), time.Second, time.Second)
		lo, hi := window(1)
		within(t, "gap_3", gap(reqs, 2), lo, hi)
		assert.Equal(t, []string{"m1"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
	t.Run("MaxRetries=0", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(sequence(ra(429, "1"), reply{status: 200}))
			cb := &callbacks{}
			c := newTestClient(t, api, cb, WithMaxRetries(0))
			mustTrack(t, c, "m1")
			require.NoError(t, flush(t, c, time.Minute))
			assert.Len(t, api.requests(), 2)
			assert.Equal(t, []string{"m1"}, cb.delivered())
			require.NoError(t, closeClient(t, c, time.Second))
		})
	})
}

// S13, R25, R32: Retry-After on any retryable status closes the shared gate.
func TestRetryAfterOnRetryableStatuses(t *testing.T) {
	for _, status := range []int{503, 529, 408, 500, 460} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(func(n int, r seen) reply {
					if n == 0 {
						return reply{status: status, header: map[string]string{"Retry-After": "2"}, hold: 10 * time.Millisecond}
					}
					return reply{status: 200}
				})
				cb := &callbacks{}
				c := newTestClient(t, api, cb, WithFlushAt(1), WithConsumers(2), WithMaxRetries(0))
				mustTrack(t, c, "m1")
				synctest.Wait() // m1 is in flight
				mustTrack(t, c, "m2")
				mustTrack(t, c, "m3")
				require.NoError(t, flush(t, c, time.Minute))
				reqs := api.requests()
				require.Len(t, reqs, 4)
				deadline := reqs[0].done.Add(2 * time.Second)
				for _, r := range reqs[1:] {
					if r.at.After(reqs[0].done) {
						assert.False(t, r.at.Before(deadline), "request at %v before the deadline %v", r.at, deadline)
					}
				}
				retry := findRetry(reqs, "m1")
				require.NotNil(t, retry)
				assert.Equal(t, "1", retry.retryCount())
				assert.ElementsMatch(t, []string{"m1", "m2", "m3"}, cb.delivered())
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
}

func findRetry(reqs []seen, id string) *seen {
	for i := range reqs {
		if len(reqs[i].ids) > 0 && reqs[i].ids[0] == id && reqs[i].retryCount() != "" {
			return &reqs[i]
		}
	}
	return nil
}

// S14, R25: Retry-After on a non-retryable status is ignored: no gate.
func TestRetryAfterIgnoredOnNonRetryable(t *testing.T) {
	for _, status := range []int{400, 413, 501} {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(sequence(ra(status, "5"), reply{status: 200}))
			cb := &callbacks{}
			c := newTestClient(t, api, cb, WithFlushAt(1))
			mustTrack(t, c, "m1")
			require.NoError(t, flush(t, c, time.Minute))
			start := time.Now()
			mustTrack(t, c, "m2")
			require.NoError(t, flush(t, c, time.Minute))
			reqs := api.requests()
			require.Len(t, reqs, 2)
			assert.Less(t, reqs[1].at.Sub(start), time.Second)
			assert.Len(t, cb.errors(), 1)
			assert.Equal(t, []string{"m2"}, cb.delivered())
			require.NoError(t, closeClient(t, c, time.Second))
		})
	}
}

// S15, S22, S24, R20, R24: huge values are capped at 300 s and waited.
func TestRetryAfterCapped(t *testing.T) {
	for _, value := range []string{"600", "99999999999999999999", "9300000000", "date+3600"} {
		t.Run(value, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				v := value
				if v == "date+3600" {
					v = time.Now().Add(3600 * time.Second).UTC().Format(http.TimeFormat)
				}
				api := newFakeAPI(sequence(ra(429, v), reply{status: 200}))
				cb := &callbacks{}
				c := newTestClient(t, api, cb)
				mustTrack(t, c, "m1")
				require.NoError(t, flush(t, c, time.Hour))
				reqs := api.requests()
				require.Len(t, reqs, 2)
				within(t, "gap_1", gap(reqs, 0), 300*time.Second, 300*time.Second)
				assert.Equal(t, []string{"m1"}, cb.delivered())
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
}

// S16, S17, S18, S21, R23, R25, R54: zero, negative, past and unparseable
// values take counted backoff and never a tight loop.
func TestRetryAfterNotUsableTakesBackoff(t *testing.T) {
	values := []string{"0", "-30", "soon", "2.5", "", "+5", "1e3", "5 s", "Wed, 21 Oct 2037 07:28:00 EST", "Fri, 31 Dec 1999 23:59:00 GMT" /* past: synctest starts in 2000 */}
	for _, value := range values {
		t.Run(value, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(sequence(ra(429, value), ra(503, value), reply{status: 200}))
				cb := &callbacks{}
				c := newTestClient(t, api, cb, WithMaxRetries(2))
				mustTrack(t, c, "m1")
				require.NoError(t, flush(t, c, time.Minute))
				reqs := api.requests()
				require.Len(t, reqs, 3)
				for k := 1; k <= 2; k++ {
					lo, hi := window(k)
					within(t, fmt.Sprintf("gap_%d", k), gap(reqs, k-1), lo, hi)
				}
				assert.Equal(t, []string{"m1"}, cb.delivered())
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
	t.Run("zero with MaxRetries=0", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(sequence(ra(429, "0")))
			cb := &callbacks{}
			c := newTestClient(t, api, cb, WithMaxRetries(0))
			mustTrack(t, c, "m1")
			require.NoError(t, flush(t, c, time.Minute))
			time.Sleep(3 * time.Second)
			assert.Len(t, api.requests(), 1)
			require.Len(t, cb.errors(), 1)
			assert.ErrorIs(t, cb.errors()[0].err, ErrRetriesExhausted)
			requireHTTPStatus(t, cb.errors()[0].err, 429)
			require.NoError(t, closeClient(t, c, time.Second))
		})
	})
}

// S19, S20, S23, R21, R22: HTTP-dates in every accepted form, under any
// host time zone, are waited exactly (rounded up) and not counted.
func TestRetryAfterHTTPDate(t *testing.T) {
	forms := map[string]func(time.Time) string{
		"IMF-fixdate": func(t time.Time) string { return t.UTC().Format(http.TimeFormat) },
		"-0000":       func(t time.Time) string { return t.UTC().Format("Mon, 02 Jan 2006 15:04:05") + " -0000" },
		"+0000":       func(t time.Time) string { return t.UTC().Format("Mon, 02 Jan 2006 15:04:05") + " +0000" },
		"+0530":       func(t time.Time) string { return t.In(time.FixedZone("", 5*3600+1800)).Format(time.RFC1123Z) },
		"RFC 850":     func(t time.Time) string { return t.UTC().Format("Monday, 02-Jan-06 15:04:05 GMT") },
		"asctime":     func(t time.Time) string { return t.UTC().Format(time.ANSIC) },
	}
	for _, tz := range []string{"UTC", "Pacific/Kiritimati", "Etc/GMT+12"} {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Skipf("no zone database: %v", err)
		}
		for name, form := range forms {
			t.Run(tz+"/"+name, func(t *testing.T) {
				saved := time.Local
				time.Local = loc
				defer func() { time.Local = saved }()
				synctest.Test(t, func(t *testing.T) {
					api := newFakeAPI(func(n int, r seen) reply {
						if n == 0 {
							return ra(429, form(r.at.Add(3*time.Second)))
						}
						return reply{status: 200}
					})
					cb := &callbacks{}
					c := newTestClient(t, api, cb, WithMaxRetries(0))
					mustTrack(t, c, "m1")
					require.NoError(t, flush(t, c, time.Minute))
					reqs := api.requests()
					require.Len(t, reqs, 2)
					within(t, "gap_1", gap(reqs, 0), 3*time.Second, 3*time.Second)
					assert.Equal(t, []string{"m1"}, cb.delivered())
					require.NoError(t, closeClient(t, c, time.Second))
				})
			})
		}
	}
}

// S25, R32, R47: a rate-limited batch goes back to the front of the queue
// and nothing is sent until the deadline.
func TestRequeueAtFrontAndGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if n == 0 {
				return ra(429, "2")
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithConsumers(1), WithFlushAt(1))
		mustTrack(t, c, "e1")
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 3)
		assert.Equal(t, [][]string{{"e1"}, {"e1"}, {"e2"}}, [][]string{reqs[0].ids, reqs[1].ids, reqs[2].ids})
		assert.Equal(t, []string{"-", "1", "-"}, retryCounts(reqs))
		within(t, "gap_1", gap(reqs, 0), 2*time.Second, 2*time.Second)
		assert.False(t, reqs[2].at.Before(reqs[0].done.Add(2*time.Second)))
		assert.Equal(t, []string{"e1", "e2"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S25b, R32, R55: the gate is shared by every consumer.
func TestGateSharedByConsumers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if n == 0 {
				return reply{status: 429, header: map[string]string{"Retry-After": "2"}, hold: 10 * time.Millisecond}
			}
			return reply{status: 200, hold: 50 * time.Millisecond}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithConsumers(4), WithFlushAt(1))
		for i := 0; i < 8; i++ {
			mustTrack(t, c, fmt.Sprintf("e%d", i))
		}
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 9)
		limited := reqs[0].done
		inFlight := 0
		for _, r := range reqs[1:] {
			switch {
			case !r.at.After(limited):
				inFlight++
			default:
				assert.False(t, r.at.Before(limited.Add(2*time.Second)), "request at +%v inside the gate", r.at.Sub(limited))
			}
		}
		assert.LessOrEqual(t, inFlight, 3)
		assert.Len(t, cb.delivered(), 8)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S26, R33: a served deadline is cleared; a later 400 fails once.
func TestServedDeadlineDoesNotMisrouteErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(ra(429, "1"), reply{status: 400, body: `{"code":"bad","message":"nope"}`}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithMaxRetries(3))
		mustTrack(t, c, "m1")
		start := time.Now()
		require.NoError(t, flush(t, c, time.Minute))
		within(t, "flush", time.Since(start), time.Second, time.Second+10*time.Millisecond)
		time.Sleep(3 * time.Second)
		require.Len(t, api.requests(), 2)
		require.Len(t, cb.errors(), 1)
		requireHTTPStatus(t, cb.errors()[0].err, 400)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S26b, R33: stale rate-limit state does not touch a later batch.
func TestStaleStateDoesNotMisrouteLaterBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if r.ids[0] == "e2" {
				return reply{status: 400}
			}
			if n == 0 {
				return ra(429, "1")
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		mustTrack(t, c, "e1")
		require.NoError(t, flush(t, c, time.Minute))
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Minute))
		time.Sleep(3 * time.Second)
		reqs := api.requests()
		require.Len(t, reqs, 3)
		assert.Equal(t, []string{"e2"}, reqs[2].ids)
		require.Len(t, cb.errors(), 1)
		requireHTTPStatus(t, cb.errors()[0].err, 400)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S26c, R34: an episode ends on a response without usable Retry-After.
func TestEpisodeEndsOnPlainResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			switch {
			case r.ids[0] == "e1" && n == 0:
				return ra(429, "1")
			case r.ids[0] == "e1":
				return reply{status: 400}
			case r.retryCount() == "":
				// Answered 4.5 s after e1's episode began: a stale start
				// would make this 429 exceed the 4 s limit at once.
				return reply{status: 429, header: map[string]string{"Retry-After": "1"}, hold: time.Second}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), WithMaxRateLimitDuration(4*time.Second))
		mustTrack(t, c, "e1")
		require.NoError(t, flush(t, c, time.Minute))
		time.Sleep(2500 * time.Millisecond)
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 4)
		within(t, "e2 gap", gap(reqs, 2), time.Second, time.Second)
		assert.Equal(t, []string{"e2"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S27, R30, R35: MaxRateLimitDuration fails the waiting batch and resumes.
func TestMaxRateLimitDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if r.ids[0] == "e1" {
				return ra(429, "1")
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithMaxRateLimitDuration(3*time.Second), WithMaxRetries(0), WithConsumers(1), WithFlushAt(1))
		start := time.Now()
		mustTrack(t, c, "e1")
		time.Sleep(500 * time.Millisecond)
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 4)
		for i, want := range []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second} {
			assert.Equal(t, want, reqs[i].at.Sub(start), "request %d", i)
		}
		assert.Equal(t, []string{"e2"}, reqs[3].ids)
		errs := cb.errors()
		require.Len(t, errs, 1)
		assert.ErrorIs(t, errs[0].err, ErrRateLimitDurationExceeded)
		requireHTTPStatus(t, errs[0].err, 429)
		assert.Equal(t, 3*time.Second, errs[0].at.Sub(start))
		assert.Equal(t, []string{"e2"}, cb.delivered())
		// S34 variant: nothing is outstanding, Flush returns at once.
		before := time.Now()
		require.NoError(t, flush(t, c, 5*time.Second))
		assert.Zero(t, time.Since(before))
		require.NoError(t, closeClient(t, c, time.Second))
	})
	t.Run("zero fails at the first Retry-After", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(sequence(ra(429, "1"), reply{status: 200}))
			cb := &callbacks{}
			c := newTestClient(t, api, cb, WithMaxRateLimitDuration(0))
			mustTrack(t, c, "e1")
			require.NoError(t, flush(t, c, time.Minute))
			assert.Len(t, api.requests(), 1)
			assert.Equal(t, 1, cb.failedWith(ErrRateLimitDurationExceeded))
			require.NoError(t, closeClient(t, c, time.Second))
		})
	})
}

// S36, R32, R44, R47: a batch returning to the waiting room of a full
// client loses nothing. QueueCapacity counts the events of the open batch
// too (R43), so the capacity is 2 here: e1 and e2 are one batch, and while
// it is on the wire e3 and e4 fill the queue.
func TestRequeueIntoFullQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if n == 0 {
				return reply{status: 429, header: map[string]string{"Retry-After": "2"}, hold: time.Second}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithQueueCapacity(2), WithFlushAt(2), WithConsumers(1))
		mustTrack(t, c, "e1")
		mustTrack(t, c, "e2")
		synctest.Wait()
		require.Len(t, api.requests(), 1)
		mustTrack(t, c, "e3")
		mustTrack(t, c, "e4")
		assert.ErrorIs(t, c.Track(track("e5")), ErrQueueFull)
		require.NoError(t, flush(t, c, 10*time.Second))
		reqs := api.requests()
		require.Len(t, reqs, 3)
		assert.Equal(t, []string{"e1", "e2"}, reqs[1].ids)
		assert.Equal(t, "1", reqs[1].retryCount())
		assert.GreaterOrEqual(t, gap(reqs, 0), 2*time.Second)
		assert.Equal(t, []string{"e3", "e4"}, reqs[2].ids)
		assert.Empty(t, cb.errors())
		assert.Equal(t, map[string]int{"e1": 1, "e2": 1, "e3": 1, "e4": 1}, cb.dispositions())
		require.NoError(t, closeClient(t, c, time.Second))
	})
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

// R32: when the gate closed between taking a batch and sending it, the
// batch goes back to the waiting room without an attempt: nothing reaches
// the server before the deadline, and the batch is sent after it.
func TestGateClosedAfterTakeSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		places := newCapacity(10)
		q := newQueue(places, 1, batchEventBytes, time.Second)
		room := newWaitingRoom(time.Hour, places, defaultBackoffPolicy())
		w := newGateConsumers(t, api, q, room, &settler{log: zap.NewNop(), q: q})()
		// Another consumer's 429 closed the gate for 2 s; its batch waits
		// until then, "mine" (turned back below) is due at once.
		require.NoError(t, q.push(event{data: []byte(`{"messageId":"other"}`)}))
		other, _ := q.take(time.Now())
		require.NotNil(t, other)
		_, _, ok := room.rateLimited(time.Now(), 2*time.Second, other)
		require.True(t, ok)
		require.NoError(t, q.push(event{data: []byte(`{"messageId":"mine"}`)}))
		b, _ := q.take(time.Now())
		require.NotNil(t, b)
		start := time.Now()
		w.attempt(b)
		assert.Empty(t, api.requests(), "nothing is sent through a closed gate")
		time.Sleep(2 * time.Second)
		tn := takeTurn(room, time.Now(), nil)
		assert.False(t, tn.gate.shut())
		require.NotNil(t, tn.b, "the batch waited in the room for the gate")
		w.probe = tn.gate.probe
		w.attempt(tn.b)
		reqs := api.requests()
		require.Len(t, reqs, 1)
		assert.Equal(t, []string{"mine"}, reqs[0].ids)
		assert.Equal(t, 2*time.Second, reqs[0].at.Sub(start), "sent when the gate opened")
		assert.Empty(t, reqs[0].header.Values("X-Retry-Count"), "the turned-back take was no attempt: this is the first")
		assert.Zero(t, w.settle.stats.retries.Load(), "and no retry was counted")
		tn = takeTurn(room, time.Now(), nil)
		require.NotNil(t, tn.b, "the other batch, due at the deadline too")
		w.attempt(tn.b)
		assert.Nil(t, q.mark(), "every event has its outcome")
	})
}

// R32, R35, INV5: the look at the gate that ends an episode that ran out
// fails the batches that waited for it, and their OnError runs on that
// consumer before it sends. A response taken in meanwhile may shut the gate
// again: the batch in hand is not sent through it, since the gate is looked
// at again after the callbacks.
func TestGateLookedAtAgainAfterRateLimitCallbacks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, r seen) reply {
			if r.ids[0] == "mine" {
				return reply{status: 200}
			}
			return ra(429, "5")
		})
		places := newCapacity(10)
		q := newQueue(places, 1, batchEventBytes, time.Second)
		room := newWaitingRoom(time.Second, places, defaultBackoffPolicy()) // MaxRateLimitDuration 1 s
		cb := &callbacks{}
		settle := &settler{log: zap.NewNop(), q: q, onError: func(err error, m []Message) {
			cb.mu.Lock()
			cb.errs = append(cb.errs, errCall{err: err, msgs: m, at: time.Now()})
			cb.mu.Unlock()
			time.Sleep(2 * time.Second) // a slow OnError
		}}
		consumer := newGateConsumers(t, api, q, room, settle)
		w, other := consumer(), consumer()
		take := func(id string) *batch {
			require.NoError(t, q.push(event{data: []byte(`{"type":"track","messageId":"` + id + `","userId":"u1","event":"Tested"}`)}))
			b, _ := q.take(time.Now())
			require.NotNil(t, b)
			return b
		}
		start := time.Now()
		other.attempt(take("first")) // 429, Retry-After 5: an episode until +1 s (the limit), the gate until +5 s
		time.Sleep(time.Second)
		// At +1 s the episode has run out. w takes "mine"; its look at the
		// gate fails "first", whose OnError lasts until +3 s. At +2.5 s the
		// other consumer's 429 starts a new episode and shuts the gate until
		// +7.5 s, or until that episode runs out at +3.5 s.
		mine := take("mine")
		second := take("second")
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(1500 * time.Millisecond)
			other.attempt(second)
		})
		w.attempt(mine)
		wg.Wait()
		// What reached the server: each request's batch and its arrival.
		sent := func() []string {
			var out []string
			for _, r := range api.requests() {
				out = append(out, fmt.Sprintf("%s at +%v retry %q", strings.Join(r.ids, ","), r.at.Sub(start), r.retryCount()))
			}
			return out
		}
		assert.Equal(t, []string{`first at +0s retry ""`, `second at +2.5s retry ""`}, sent(),
			"nothing is sent through the gate the 429 at +2.5 s shut")
		errs := cb.errors()
		require.Len(t, errs, 1)
		assert.ErrorIs(t, errs[0].err, ErrRateLimitDurationExceeded)
		require.Len(t, errs[0].msgs, 1)
		assert.Equal(t, "first", errs[0].msgs[0].ID())
		assert.Equal(t, time.Second, errs[0].at.Sub(start))

		// "mine" waited in the room: it goes when the second episode runs
		// out (+3.5 s), after that episode's batch has had its OnError (2 s).
		// The turned-back take was no attempt: no X-Retry-Count.
		b := w.nextBatch()
		require.NotNil(t, b)
		w.attempt(b)
		assert.Equal(t, []string{`first at +0s retry ""`, `second at +2.5s retry ""`, `mine at +5.5s retry ""`}, sent())
		errs = cb.errors()
		require.Len(t, errs, 2)
		assert.ErrorIs(t, errs[1].err, ErrRateLimitDurationExceeded)
		require.Len(t, errs[1].msgs, 1)
		assert.Equal(t, "second", errs[1].msgs[0].ID())
		assert.Equal(t, 3500*time.Millisecond, errs[1].at.Sub(start))
		assert.Nil(t, q.mark(), "every event has its outcome")
	})
}

// newGateConsumers returns a maker of consumers that share q, room and
// settle and send to api, each as run prepares it (its timer stopped), for
// tests that drive attempts and turns by hand: one counted retry, an HTTP
// timeout of 1 s, never interrupted.
func newGateConsumers(t *testing.T, api http.RoundTripper, q *queue, room *waitingRoom, settle *settler) func() *consumer {
	s, err := resolve("wk", []Option{WithEndpoint("http://api.test"), WithHTTPClient(&http.Client{Transport: api})})
	require.NoError(t, err)
	limits := newLearnedLimits(q, wire.NewFrame("wk", nil, false), 1, batchEventBytes, 0)
	return func() *consumer {
		w := &consumer{
			q: q, room: room, transport: s.transport(s.uploadClient()), settle: settle,
			policy: retryPolicy{maxRetries: 1, maxBackoffTotal: time.Hour, delay: defaultBackoffPolicy().delay, httpTimeout: time.Second},
			log:    zap.NewNop(), interrupt: context.Background(), limits: limits,
			timer: time.NewTimer(time.Hour),
		}
		w.timer.Stop()
		return w
	}
}

// turn is what waitingRoom.takeTurn returns, as one value for the tests.
type turn struct {
	b    *batch
	wait time.Duration
	gate gateState
}

func takeTurn(r *waitingRoom, now time.Time, held chan struct{}) turn {
	b, wait, g := r.takeTurn(now, held)
	return turn{b: b, wait: wait, gate: g}
}
