package analytics

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// healthyWindow is the range of the healthy wait d_h (R61): fake time is
// exact, so no tolerance is needed.
func healthyWindow() (time.Duration, time.Duration) { return healthyWaitMin, healthyWaitMax }

// answersBefore is how many requests of batches other than the one whose
// first event is id were answered by t.
func answersBefore(reqs []seen, t time.Time, id string) int {
	n := 0
	for _, r := range reqs {
		if r.ids[0] != id && !r.done.After(t) {
			n++
		}
	}
	return n
}

// perSecond is how many of reqs arrived in [from, to), per second.
func perSecond(reqs []seen, from, to time.Time) float64 {
	n := 0
	for _, r := range reqs {
		if !r.at.Before(from) && r.at.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// S49, R61: a batch that keeps failing while other batches are delivered
// waits the healthy wait d_h every time; its fourth failure is not followed
// by d_4 (4 s) but by 80–120 ms. Alone against a failing server, the same batch's waits
// grow as before (S44).
func TestCountedWaitFollowsServerHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var unlucky atomic.Int32
		api := newFakeAPI(func(_ int, r seen) reply {
			if slices.Contains(r.ids, "a") && unlucky.Add(1) <= 4 {
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		start := time.Now()
		mustTrack(t, c, "a")
		// Other batches are delivered all along, one every 100 ms.
		for i := 0; time.Since(start) < 5*time.Second; i++ {
			time.Sleep(100 * time.Millisecond)
			mustTrack(t, c, fmt.Sprintf("o%d", i))
		}
		require.NoError(t, flush(t, c, time.Minute))
		mine := requestsFor(api.requests(), "a")
		require.Len(t, mine, 5, "four failures, then delivered")
		// a's first failure comes before any other answer: nothing says the
		// server is healthy, so it waits d_1; by its second, other batches
		// have been delivered.
		lo, hi := window(1)
		within(t, "wait after failure 1", mine[1].at.Sub(mine[0].done), lo, hi)
		lo, hi = healthyWindow()
		for k := 2; k <= 4; k++ {
			within(t, fmt.Sprintf("wait after failure %d", k), mine[k].at.Sub(mine[k-1].done), lo, hi)
		}
		assert.Equal(t, "4", mine[4].retryCount(), "X-Retry-Count still counts every attempt")
		assert.Contains(t, cb.delivered(), "a")
		assert.Empty(t, cb.errors())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S50, R62: after an outage, the first 2xx releases the backlog: every
// waiting batch is sent within d_1 of that answer, in due order, no two at
// the same instant.
func TestRecoveryReleasesBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		recovery := start.Add(30 * time.Second)
		api := newFakeAPI(func(_ int, r seen) reply {
			if r.at.Before(recovery) {
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		const n = 20
		for i := range n {
			mustTrack(t, c, fmt.Sprintf("m%d", i))
		}
		require.NoError(t, flush(t, c, 5*time.Minute))
		reqs := api.requests()
		first := slices.IndexFunc(reqs, func(r seen) bool { return !r.at.Before(recovery) })
		require.GreaterOrEqual(t, first, 0)
		healed := reqs[first].done
		after := reqs[first+1:]
		require.Len(t, after, n-1, "every other batch once more, after the first 2xx")
		arrivals := map[time.Time]bool{}
		for _, r := range after {
			within(t, "sent after the first 2xx", r.at.Sub(healed), 0, 550*time.Millisecond)
			assert.False(t, arrivals[r.at], "two batches left at the same instant %v", r.at.Sub(start))
			arrivals[r.at] = true
		}
		assert.Len(t, cb.delivered(), n)
		assert.Empty(t, cb.errors())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S51, R63: against a server that fails 80 % of requests, the short waits
// stop: counted retries leave no faster than the retry allowance pays for
// (5/s, plus 3 per 2xx), although 200 batches wait and each one's streak
// keeps restarting. Everything is still delivered.
func TestEightyPercentFailuresPaceRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(n int, _ seen) reply {
			if n%5 != 4 {
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		start := time.Now()
		const n = 200
		for i := range n {
			mustTrack(t, c, fmt.Sprintf("m%d", i))
		}
		require.NoError(t, flush(t, c, 10*time.Minute))
		reqs := api.requests()
		// After the first attempts and the allowance's first burst: at most
		// 5/s + 3 × (1 in 5 of the requests) = 12.5/s; without the
		// allowance, 200 batches retried every 0.5 s.
		rate := perSecond(reqs, start.Add(2*time.Second), start.Add(12*time.Second))
		assert.LessOrEqual(t, rate, 14.0, "requests/s against an 80 %-failing server")
		assert.Greater(t, rate, 5.0, "retries go on at the allowance")
		assert.Len(t, cb.delivered(), n)
		assert.Empty(t, cb.errors())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S52, R63: during a total outage the client sends at most the allowance's
// 5 requests/s, whatever the number of waiting batches (1 000 here, each
// with its own growing wait), and nothing fails.
func TestOutageRequestRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		recovery := start.Add(60 * time.Second)
		api := newFakeAPI(func(_ int, r seen) reply {
			if r.at.Before(recovery) {
				return reply{status: 503}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		const n = 1000
		for i := range n {
			mustTrack(t, c, fmt.Sprintf("m%d", i))
		}
		require.NoError(t, flush(t, c, 10*time.Minute))
		reqs := api.requests()
		rate := perSecond(reqs, start.Add(5*time.Second), recovery)
		assert.LessOrEqual(t, rate, 5.5, "requests/s during the outage")
		assert.Len(t, cb.delivered(), n)
		assert.Empty(t, cb.errors())
		assert.Less(t, time.Since(recovery), 10*time.Second, "the backlog leaves soon after recovery")
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S53, R64: when the gate opens after a deadline with the episode still
// open, exactly one request goes out; the others follow its 2xx.
func TestOneProbeAfterDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		api := newFakeAPI(func(_ int, r seen) reply {
			if r.at.Before(start.Add(time.Second)) {
				return reply{status: 429, header: map[string]string{"Retry-After": "1"}}
			}
			return reply{status: 200, hold: 300 * time.Millisecond}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		const n = 10
		for i := range n {
			mustTrack(t, c, fmt.Sprintf("m%d", i))
		}
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		i := slices.IndexFunc(reqs, func(r seen) bool { return !r.at.Before(start.Add(time.Second)) })
		require.GreaterOrEqual(t, i, 1)
		probe := reqs[i]
		assert.Equal(t, start.Add(time.Second), probe.at, "the probe goes when the deadline passes")
		for _, r := range reqs[i+1:] {
			assert.False(t, r.at.Before(probe.done), "a request at %v, before the probe's 2xx at %v",
				r.at.Sub(start), probe.done.Sub(start))
		}
		assert.Len(t, cb.delivered(), n)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S53 (second part), R64: a probe answered with another usable Retry-After
// holds the others for the new deadline; then the next probe.
func TestProbeAnsweredWithRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		api := newFakeAPI(func(_ int, r seen) reply {
			if r.at.Before(start.Add(2 * time.Second)) {
				return reply{status: 429, header: map[string]string{"Retry-After": "1"}, hold: 50 * time.Millisecond}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		for i := range 5 {
			mustTrack(t, c, fmt.Sprintf("m%d", i))
		}
		require.NoError(t, flush(t, c, time.Minute))
		var at1 []string
		for _, r := range api.requests() {
			if d := r.at.Sub(start); d >= time.Second && d < 2*time.Second {
				at1 = append(at1, strings.Join(r.ids, ","))
			}
		}
		assert.Len(t, at1, 1, "one probe in the second second, answered 429: %v", at1)
		assert.Len(t, cb.delivered(), 5)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S54, R27, R28, R61: a 6-hour outage, then recovery: with the default
// MaxRetries every held event is delivered and none fails.
func TestSixHourOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		recovery := start.Add(6 * time.Hour)
		api := newFakeAPI(func(_ int, r seen) reply {
			if r.at.Before(recovery) {
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		for i := range 3 {
			mustTrack(t, c, fmt.Sprintf("m%d", i))
		}
		require.NoError(t, flush(t, c, 7*time.Hour))
		assert.ElementsMatch(t, []string{"m0", "m1", "m2"}, cb.delivered())
		assert.Empty(t, cb.errors())
		assert.Less(t, time.Since(recovery), 70*time.Second, "delivered within one longest wait of recovery")
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R62: the release keeps due order, spreads the batches over d_1 and leaves
// batches waiting for a deadline or a token where they were.
func TestReleaseKeepsDueOrder(t *testing.T) {
	now := time.Now()
	r := newWaitingRoom(time.Hour, newCapacity(100), defaultBackoffPolicy())
	counted := func(name string) *batch {
		return &batch{events: []event{{data: []byte(name)}}, retryPending: true}
	}
	b10, b5, b20, soon := counted("10"), counted("5"), counted("20"), counted("soon")
	token := counted("token")
	token.awaitToken = true
	for _, w := range []struct {
		b   *batch
		due time.Duration
	}{{b10, 10 * time.Second}, {b5, 5 * time.Second}, {b20, 20 * time.Second}, {soon, 300 * time.Millisecond}, {token, 30 * time.Second}} {
		require.True(t, r.wait(w.b, now.Add(w.due)))
	}
	limited := &batch{events: []event{{data: []byte("limited")}}}
	_, _, ok := r.rateLimited(now, 40*time.Second, limited)
	require.True(t, ok)
	r.endEpisode()
	r.mu.Lock()
	r.deadline = time.Time{} // only the batch's own instant is left
	r.mu.Unlock()

	r.succeeded(now)
	dues := map[*batch]time.Time{}
	for _, w := range r.waiting {
		dues[w.b] = w.due
	}
	assert.Equal(t, now.Add(300*time.Millisecond), dues[soon], "due within d_1 already: untouched")
	assert.Equal(t, now.Add(30*time.Second), dues[token], "waits for a token: untouched")
	assert.Equal(t, now.Add(40*time.Second), dues[limited], "waits for a deadline: untouched")
	prev := now
	for _, b := range []*batch{b5, b10, b20} {
		within(t, "released due", dues[b].Sub(now), 0, 500*time.Millisecond)
		assert.True(t, dues[b].After(prev), "in due order, no two at one instant")
		prev = dues[b]
	}
}

// The segment v3 package's seam (shared.Compat RetryDelay) still sets the
// counted waits, keyed to the batch's own retries as in v3, while the room
// keeps the streak (R61) for everything else.
func TestCompatRetryDelayStillDrivesWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 500}, reply{status: 500}, reply{status: 200}))
		var ks []int
		seam := optionFunc(func(s *settings) {
			s.compat.RetryDelay = func(k int) time.Duration { ks = append(ks, k); return time.Duration(k+1) * 100 * time.Millisecond }
		})
		c := newTestClient(t, api, nil, WithFlushAt(1), seam)
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 3)
		assert.Equal(t, 100*time.Millisecond, gap(reqs, 0))
		assert.Equal(t, 200*time.Millisecond, gap(reqs, 1))
		assert.Equal(t, []int{0, 1}, ks)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S49 (second part), R61, R63: a batch unlucky on its own, with no other
// batch in flight, against a server whose recent answers are mostly 2xx,
// waits d_h (80–120 ms) each time; the same batch against a server that has answered
// nothing but failures waits d_1, d_2, d_3 (S44).
func TestLoneUnluckyBatchOnHealthyServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var unlucky atomic.Int32
		api := newFakeAPI(func(_ int, r seen) reply {
			if slices.Contains(r.ids, "a") && unlucky.Add(1) <= 3 {
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		for i := range 10 {
			mustTrack(t, c, fmt.Sprintf("o%d", i))
		}
		require.NoError(t, flush(t, c, time.Minute))
		mustTrack(t, c, "a")
		require.NoError(t, flush(t, c, time.Minute))
		mine := requestsFor(api.requests(), "a")
		require.Len(t, mine, 4)
		lo, hi := healthyWindow()
		for k := 1; k <= 3; k++ {
			within(t, fmt.Sprintf("wait after failure %d", k), mine[k].at.Sub(mine[k-1].done), lo, hi)
		}
		assert.Empty(t, cb.errors())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// S49 (third part), R61, R63: the end of a run, when only one unlucky batch
// is left. The other batches' last 16 answers were 12 2xx and 4 failures (a
// server that answers most requests); then batch a fails four times with no
// other answer in between. Its own failures are not evidence about the
// server, so each of its four waits is d_h (80–120 ms), not d_4 once its
// own failures make up half of the recent answers.
func TestLastBatchOwnFailuresKeepShortWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		failed := map[string]int{}
		api := newFakeAPI(func(_ int, r seen) reply {
			mu.Lock()
			defer mu.Unlock()
			id := r.ids[0]
			fails := map[string]int{"o8": 1, "o9": 1, "o10": 1, "o11": 1, "a": 4}[id]
			if failed[id] < fails {
				failed[id]++
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		// Recent answers, oldest first: eight 2xx, then four times a
		// failure and its retry's 2xx: 16 answers, 4 failures.
		for i := range 12 {
			mustTrack(t, c, fmt.Sprintf("o%d", i))
			require.NoError(t, flush(t, c, time.Minute))
		}
		mustTrack(t, c, "a")
		require.NoError(t, flush(t, c, time.Minute))
		mine := requestsFor(api.requests(), "a")
		require.Len(t, mine, 5, "four failures, then delivered")
		lo, hi := healthyWindow()
		for k := 1; k <= 4; k++ {
			within(t, fmt.Sprintf("wait after failure %d", k), mine[k].at.Sub(mine[k-1].done), lo, hi)
		}
		assert.Len(t, cb.delivered(), 13)
		assert.Empty(t, cb.errors())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R61: a streak restarts at any 2xx. A fresh client (nothing known, so the
// server does not count as healthy) sees batch a fail twice: its waits grow
// (d_1, d_2). Then another batch is answered 2xx, late enough in a's second
// wait that the release (R62) leaves that wait alone; a's third failure
// starts a new streak, and its wait is d_1 again, not d_3.
func TestStreakRestartsAtAnyTwoHundred(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tries atomic.Int32
		api := newFakeAPI(func(_ int, r seen) reply {
			if slices.Contains(r.ids, "a") && tries.Add(1) <= 3 {
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		mustTrack(t, c, "a")
		// a fails at 0 and at about 0.5 s, then waits d_2 (0.9–1.1 s): o's
		// 2xx at 1.2 s comes less than d_1 before a is due.
		time.Sleep(1200 * time.Millisecond)
		mustTrack(t, c, "o")
		require.NoError(t, flush(t, c, time.Minute))
		mine := requestsFor(api.requests(), "a")
		require.Len(t, mine, 4, "three failures, then delivered")
		for i, k := range []int{1, 2, 1} {
			lo, hi := window(k)
			within(t, fmt.Sprintf("wait after failure %d", i+1), mine[i+1].at.Sub(mine[i].done), lo, hi)
		}
		assert.ElementsMatch(t, []string{"a", "o"}, cb.delivered())
		assert.Empty(t, cb.errors())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R61, R63: the retry tail of a paced run is the last batches' own luck and
// nothing else. A producer tracks 20 000 events/s for half a second while one
// request in five, at random, is answered 500; then Close. Every counted
// wait of every batch is d_h, 80–120 ms (the server stays healthy; d_1 for
// a failure before four other answers are known), and
// Close returns as soon as the last batch is delivered: its tail is its
// first attempt plus one d_h and one answer per failure.
func TestPacedTailIsTheLastBatchesLuck(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			rng := rand.New(rand.NewPCG(seed, 21))
			api := newFakeAPI(func(_ int, _ seen) reply {
				mu.Lock()
				fail := rng.Float64() < 0.2
				mu.Unlock()
				if fail {
					return reply{status: 500, hold: time.Millisecond}
				}
				return reply{status: 200, hold: time.Millisecond}
			})
			cb := &callbacks{}
			c := newTestClient(t, api, cb)
			const n, perTick = 10000, 250 // 250 events every 12.5 ms
			for i := range n {
				mustTrack(t, c, fmt.Sprintf("m%d", i))
				if i%perTick == perTick-1 {
					time.Sleep(12500 * time.Microsecond)
				}
			}
			closing := time.Now()
			require.NoError(t, closeClient(t, c, time.Minute))
			closed := time.Now()

			byBatch := map[string][]seen{}
			var lastDone time.Time
			for _, r := range api.requests() {
				byBatch[r.ids[0]] = append(byBatch[r.ids[0]], r)
				if r.done.After(lastDone) {
					lastDone = r.done
				}
			}
			retried := 0
			for id, rs := range byBatch {
				for i := 1; i < len(rs); i++ {
					// Until four answers of other batches are known, nothing
					// says the server is healthy: d_1 (R63).
					lo, hi := healthyWindow()
					if answersBefore(api.requests(), rs[i-1].done, id) < 4 {
						lo, hi = window(1)
					}
					within(t, fmt.Sprintf("seed %d: %s wait after failure %d", seed, id, i), rs[i].at.Sub(rs[i-1].done), lo, hi)
					retried++
				}
			}
			assert.Greater(t, retried, 0, "some batches were retried")
			assert.Equal(t, lastDone, closed, "Close returns when the last batch is answered")
			t.Logf("seed %d: Close took %v, %d counted retries", seed, closed.Sub(closing), retried)
			assert.Len(t, cb.delivered(), n)
			assert.Empty(t, cb.errors())
		})
	}
}

// R60, R61, R63: an outage after a healthy stretch. Ten batches are
// delivered, then every request fails for 30 s while five batches wait.
// Their failures, recorded beside the ten 2xx, soon make up half of the
// recent answers, and from then on the waits grow as R26 says: from 10 s
// to 30 s into the outage the five batches send a handful of requests,
// not one each every d_1 (about 200, or 100 at the retry allowance).
func TestOutageAfterHealthyStretchGrowsWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var outage atomic.Pointer[time.Time]
		api := newFakeAPI(func(_ int, r seen) reply {
			if from := outage.Load(); from != nil && r.at.Before(from.Add(30*time.Second)) {
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1))
		for i := range 10 {
			mustTrack(t, c, fmt.Sprintf("o%d", i))
			require.NoError(t, flush(t, c, time.Minute))
		}
		start := time.Now()
		outage.Store(&start)
		for i := range 5 {
			mustTrack(t, c, fmt.Sprintf("a%d", i))
		}
		require.NoError(t, flush(t, c, 10*time.Minute))
		n := 0
		for _, r := range api.requests() {
			if d := r.at.Sub(start); d >= 10*time.Second && d < 30*time.Second {
				n++
			}
		}
		t.Logf("%d requests from 10 s to 30 s into the outage", n)
		assert.LessOrEqual(t, n, 20, "requests from 10 s to 30 s into the outage")
		assert.Len(t, cb.delivered(), 15)
		assert.Empty(t, cb.errors())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}
