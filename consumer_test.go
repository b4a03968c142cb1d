package analytics

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
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

	// Unit part: from k = 8 on the wait lies in [54, 66] s and still varies.
	b := newBackoff(DefaultBackoffPolicy())
	seenWaits := map[time.Duration]bool{}
	for k := 1; k <= 40; k++ {
		d := b.NextBackOff()
		require.NotEqual(t, time.Duration(-1), d, "NextBackOff returned Stop")
		if k >= 8 {
			within(t, fmt.Sprintf("wait_%d", k), d, 54*time.Second, 66*time.Second)
			seenWaits[d] = true
		}
	}
	assert.Greater(t, len(seenWaits), 10)
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

// S33, R41: Flush waits through a rate-limit wait, no longer.
func TestFlushWaitsThroughRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(ra(429, "2"), reply{status: 200}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb)
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, 10*time.Second))
		reqs := api.requests()
		require.Len(t, reqs, 2)
		assert.Equal(t, 2*time.Second, time.Since(reqs[0].done))
		assert.Equal(t, []string{"m1"}, cb.delivered(), "OnSuccess ran before Flush returned")
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

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
		assert.Equal(t, int64(1), c.Stats().Dropped)
		require.NoError(t, closeClient(t, c, time.Second))
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
