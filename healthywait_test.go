package analytics

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// R61, R62, R63: against servers that answer a fraction f of requests 500
// at random, from 0 to 90 %, every event gets one outcome (here: all are
// delivered), and every counted wait, measured at the server from a
// failure's answer to the batch's next attempt, is what the rules allow:
//   - never shorter than d_h's 80 ms, unless a 2xx released it (R62): then
//     the retry comes within d_1's longest draw of that 2xx;
//   - with at most one failure in ten, d_h (80–120 ms), or d_1 while fewer
//     than four answers of other batches are known;
//   - with one in five or three in ten, nine in ten of them so (the server
//     may look unhealthy for a moment);
//   - with eight or nine in ten, mostly long: R26's growing waits and R63's
//     allowance.
func TestFailureFractionsWaitAsTheRulesSay(t *testing.T) {
	t.Logf("| failing | requests | counted waits | 80–120 ms | median wait | released |")
	for _, pct := range []int{0, 10, 20, 30, 40, 50, 60, 70, 80, 90} {
		t.Run(fmt.Sprint(pct), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				rng := rand.New(rand.NewPCG(uint64(pct), 61))
				api := newFakeAPI(func(_ int, _ seen) reply {
					mu.Lock()
					fail := rng.IntN(100) < pct
					mu.Unlock()
					if fail {
						return reply{status: 500, hold: 5 * time.Millisecond}
					}
					return reply{status: 200, hold: 5 * time.Millisecond}
				})
				cb := &callbacks{}
				c := newTestClient(t, api, cb, WithFlushAt(20))
				const n = 2000 // 1 000 events/s for 2 s
				for i := range n {
					mustTrack(t, c, fmt.Sprintf("f%04d", i))
					if i%20 == 19 {
						time.Sleep(20 * time.Millisecond)
					}
				}
				require.NoError(t, closeClient(t, c, 30*time.Minute))
				assert.Len(t, cb.delivered(), n)
				assert.Empty(t, cb.errors())
				for id, k := range cb.dispositions() {
					require.Equal(t, 1, k, id)
				}

				reqs := api.requests()
				byBatch := map[string][]seen{}
				var order []string
				for _, r := range reqs {
					if _, ok := byBatch[r.ids[0]]; !ok {
						order = append(order, r.ids[0])
					}
					byBatch[r.ids[0]] = append(byBatch[r.ids[0]], r)
				}
				var waits []time.Duration
				healthy, short, released := 0, 0, 0 // short: d_h, or d_1 before four other answers
				lo, hi := healthyWindow()
				for _, id := range order {
					rs := byBatch[id]
					for i := 1; i < len(rs); i++ {
						failedAt, retryAt := rs[i-1].done, rs[i].at
						w := retryAt.Sub(failedAt)
						waits = append(waits, w)
						if w >= lo && w <= hi {
							healthy++
						}
						if w < lo {
							// Released by a 2xx between the failure and the retry (R62).
							ok := slices.ContainsFunc(reqs, func(o seen) bool {
								return o.ids[0] != id && isLastAttempt(byBatch, o) && o.done.After(failedAt) &&
									!o.done.After(retryAt) && retryAt.Sub(o.done) <= 550*time.Millisecond
							})
							assert.True(t, ok, "%s: a wait of %v after failure %d, and no 2xx released it", id, w, i)
							released++
						}
						wl, wh := lo, hi
						if answersBefore(reqs, failedAt, id) < 4 {
							wl, wh = window(1) // nothing says the server is healthy yet
						}
						if w >= wl && w <= wh {
							short++
						} else if pct <= 10 {
							t.Errorf("%s: wait after failure %d = %v, want in [%v, %v]", id, i, w, wl, wh)
						}
					}
				}
				slices.Sort(waits)
				median := time.Duration(0)
				if len(waits) > 0 {
					median = waits[len(waits)/2]
				}
				t.Logf("| %d %% | %d | %d | %d | %v | %d |", pct, len(reqs), len(waits), healthy, median.Round(time.Millisecond), released)
				switch {
				case pct >= 20 && pct <= 30:
					assert.GreaterOrEqual(t, float64(short), 0.9*float64(len(waits)), "waits of 80–120 ms (or d_1 before four other answers)")
				case pct >= 80:
					assert.GreaterOrEqual(t, median, 450*time.Millisecond, "median wait")
				}
			})
		})
	}
}

// isLastAttempt reports whether r is the last attempt of its batch, the
// one that was answered 2xx (every batch is delivered in the end).
func isLastAttempt(byBatch map[string][]seen, r seen) bool {
	rs := byBatch[r.ids[0]]
	return rs[len(rs)-1].at.Equal(r.at) && rs[len(rs)-1].done.Equal(r.done)
}
