package analytics

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// R43's memory bound holds when a rate-limit episode runs out (R35): the
// batches that waited for its deadline keep their places while their
// OnError runs, so a producer cannot fill QueueCapacity again beside them
// while a consumer is busy with their callbacks.
func TestExpiredBatchesKeepTheirPlacesUntilTheirCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(_ int, r seen) reply {
			if len(r.ids) == 1 && (r.ids[0] == "a" || r.ids[0] == "b") {
				return reply{status: 429, header: map[string]string{"Retry-After": "5"}}
			}
			return reply{status: 200, hold: 10 * time.Second} // on the wire meanwhile
		})
		release := make(chan struct{})
		var mu sync.Mutex
		var failed []string
		onError := WithOnError(func(err error, m []Message) {
			mu.Lock()
			for _, x := range m {
				failed = append(failed, x.ID())
			}
			mu.Unlock()
			if errors.Is(err, ErrRateLimitDurationExceeded) {
				<-release // a slow callback
			}
		})
		const capacity, consumers, flushAt = 4, 2, 1
		c := newTestClient(t, api, nil, noAudit("the callback blocks on purpose"), onError,
			WithQueueCapacity(capacity), WithConsumers(consumers), WithFlushAt(flushAt), WithMaxRateLimitDuration(time.Second))
		mustTrack(t, c, "a")
		mustTrack(t, c, "b")
		synctest.Wait() // a and b answered 429: they wait for the deadline
		mustTrack(t, c, "c")
		mustTrack(t, c, "d")
		time.Sleep(time.Second + time.Millisecond) // the episode runs out: a and b fail (R35)
		synctest.Wait()
		mu.Lock()
		inCallback := len(failed)
		mu.Unlock()
		if inCallback == 0 {
			t.Fatal("no OnError for the batches whose episode ran out")
		}
		accepted := 0
		for i := range 10 {
			if c.Track(track("n"+string(rune('0'+i)))) == nil {
				accepted++
			}
		}
		// a and b (their OnError has not returned), c (on the wire), d
		// (queued), and what was accepted now.
		if held, bound := 4+accepted, capacity+consumers*flushAt; held > bound {
			t.Errorf("%d accepted events without an outcome while OnError ran for those whose episode ran out, more than QueueCapacity + Consumers × FlushAt = %d", held, bound)
		}
		close(release)
		if err := closeClient(t, c, time.Minute); err != nil {
			t.Errorf("Close: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(failed) != 2 || failed[0] != "a" && failed[0] != "b" {
			t.Errorf("OnError got %v, want a and b (their episode ran out)", failed)
		}
	})
}

// R32, R63: when the gate opens, a rate-limited retry needs no token of
// the retry allowance, so it does not wait behind counted retries that
// are due before it but find no token: it goes as soon as those with a
// token have gone, not when the allowance has paid for all of them.
func TestRateLimitedRetryDoesNotWaitForTheAllowance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var rTries []time.Time
		api := newFakeAPI(func(_ int, r seen) reply {
			if len(r.ids) == 1 && r.ids[0] == "r" {
				mu.Lock()
				defer mu.Unlock()
				rTries = append(rTries, time.Now())
				if len(rTries) == 1 {
					return reply{status: 429, header: map[string]string{"Retry-After": "1"}}
				}
				return reply{status: 200}
			}
			return reply{status: 500} // every other batch waits for a counted retry
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, noAudit("the 500s go on until Close"), WithFlushAt(1), WithConsumers(1),
			WithMaxRetries(1000), WithMaxRateLimitDuration(time.Minute))
		for i := range 40 {
			mustTrack(t, c, fmt.Sprintf("e%02d", i))
		}
		mustTrack(t, c, "r")
		time.Sleep(5 * time.Second)
		synctest.Wait()
		mu.Lock()
		tries := slices.Clone(rTries)
		mu.Unlock()
		if len(tries) < 2 {
			t.Fatalf("the rate-limited batch was sent %d times in 5 s, want 2", len(tries))
		}
		// The deadline is 1 s after the 429; an HTTP-date would round it up
		// by up to a second more. Behind 20 retries that find no token at 5
		// tokens a second it would wait 4 s more.
		if waited := tries[1].Sub(tries[0]); waited > 2*time.Second {
			t.Errorf("the rate-limited batch was sent again %v after its 429 (Retry-After: 1), behind counted retries waiting for the allowance", waited)
		}
		_ = closeClient(t, c, time.Second)
	})
}
