package analytics

import (
	"container/heap"
	"sync"
	"time"
)

// waitingRoom is where a batch waits to be sent again, and the rate-limit
// state every consumer shares (R29, R31–R35, R55). A batch waits here for
// its counted backoff or for a Retry-After deadline, ordered by the instant
// it may be sent again, and holds no consumer meanwhile. The gate is the
// deadline before which nobody sends anything; the episode is when rate
// limiting began. They are kept apart: the deadline is cleared when it has
// been served (R33), the episode when rate limiting stops (R34). One mutex
// guards it all.
type waitingRoom struct {
	mu     sync.Mutex
	limit  time.Duration // MaxRateLimitDuration
	places *capacity     // waiting events count against QueueCapacity (R43)

	deadline time.Time // the gate; zero: open. Monotonic (R36).
	start    time.Time // episode start; zero: no episode. Monotonic.
	waiting  dueOrder
	seq      uint64 // arrival order, for ties of due instants
	closed   bool   // Close has handed everything back: nothing may enter
	noWait   bool   // Close waits for no retry (dueNow, compat.go): everything is due at once

	ready chan struct{} // cap 1: a batch arrived, or more are due
}

func newWaitingRoom(limit time.Duration, places *capacity) *waitingRoom {
	return &waitingRoom{limit: limit, places: places, ready: make(chan struct{}, 1)}
}

// wait puts b in the room until due (counted backoff, R29; or back from the
// gate, R32). It reports false when Close has already handed everything
// back; the caller then hands b back itself.
func (r *waitingRoom) wait(b *batch, due time.Time) bool {
	r.mu.Lock()
	ok := r.putLocked(b, due)
	r.mu.Unlock()
	if ok {
		signal(r.ready)
	}
	return ok
}

func (r *waitingRoom) putLocked(b *batch, due time.Time) bool {
	if r.closed {
		return false
	}
	if r.noWait {
		due = time.Time{}
	}
	r.seq++
	heap.Push(&r.waiting, waiter{b: b, due: due, seq: r.seq})
	r.places.hold(len(b.events)) // never refused, but counted (R44)
	return true
}

// rateLimited records a usable Retry-After of d that b received at now
// (R31): the deadline becomes the later of itself and now + d, an episode
// opens if none is open, and b waits for the deadline, intact (R32). When
// the episode has lasted MaxRateLimitDuration (R35), the episode and its
// deadline are cleared and b is returned in expired with every batch that
// waits for a deadline, to fail together. ok is false when Close has
// already handed everything back; the caller then hands b back.
func (r *waitingRoom) rateLimited(now time.Time, d time.Duration, b *batch) (opened bool, expired []*batch, ok bool) {
	r.mu.Lock()
	if r.start.IsZero() {
		r.start = now
		opened = true
	}
	if now.Sub(r.start) >= r.limit {
		expired = append(r.expireLocked(), b)
		r.mu.Unlock()
		return opened, expired, true
	}
	if dl := now.Add(d); dl.After(r.deadline) && !r.noWait {
		r.deadline = dl
	}
	b.rateLimited = true
	ok = r.putLocked(b, now.Add(d))
	r.mu.Unlock()
	if ok {
		signal(r.ready)
	}
	return opened, nil, ok
}

// expireLocked ends an episode that has lasted MaxRateLimitDuration (R35):
// it clears the episode and its deadline and takes out every batch that
// waits for a deadline. Batches waiting for their backoff stay.
func (r *waitingRoom) expireLocked() []*batch {
	r.start, r.deadline = time.Time{}, time.Time{}
	var expired []*batch
	kept := r.waiting[:0]
	for _, w := range r.waiting {
		if w.b.rateLimited {
			expired = append(expired, w.b)
			r.places.release(len(w.b.events), true)
		} else {
			kept = append(kept, w)
		}
	}
	clear(r.waiting[len(kept):])
	r.waiting = kept
	heap.Init(&r.waiting)
	return expired
}

// endEpisode records a response that was not retryable-with-usable-
// Retry-After: the episode ends, but an unserved deadline stays, because
// that response came from a request already in flight (R34 a, c).
func (r *waitingRoom) endEpisode() (ended bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ended = !r.start.IsZero()
	r.start = time.Time{}
	return ended
}

// gate is the check every consumer makes before it sends anything (R32).
// It returns how long the gate stays closed (0: open), never past the
// episode's end (R35). A served deadline is cleared (R33). When the
// episode has run out, expired holds the batches that waited for a
// deadline, for the caller to fail.
func (r *waitingRoom) gate(now time.Time) (wait time.Duration, expired []*batch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gateLocked(now)
}

func (r *waitingRoom) gateLocked(now time.Time) (wait time.Duration, expired []*batch) {
	if !r.start.IsZero() && now.Sub(r.start) >= r.limit {
		expired = r.expireLocked()
	}
	if r.deadline.IsZero() {
		return 0, expired
	}
	if !now.Before(r.deadline) {
		r.deadline = time.Time{} // served: it classifies nothing later (R33)
		return 0, expired
	}
	wait = r.deadline.Sub(now)
	if !r.start.IsZero() {
		wait = min(wait, r.start.Add(r.limit).Sub(now))
	}
	return wait, expired
}

// next passes the gate and takes the batch that has been due longest
// (R47). With the gate closed it returns closed and how long it stays so;
// otherwise, with nothing due, it returns how long until the next batch is
// due, or -1 when none waits.
func (r *waitingRoom) next(now time.Time) (b *batch, wait time.Duration, closed bool, expired []*batch) {
	r.mu.Lock()
	wait, expired = r.gateLocked(now)
	if wait > 0 {
		r.mu.Unlock()
		return nil, wait, true, expired
	}
	if len(r.waiting) == 0 {
		r.mu.Unlock()
		return nil, -1, false, expired
	}
	if first := r.waiting[0]; now.Before(first.due) {
		r.mu.Unlock()
		return nil, first.due.Sub(now), false, expired
	}
	b = heap.Pop(&r.waiting).(waiter).b
	more := len(r.waiting) > 0
	r.mu.Unlock()
	r.places.release(len(b.events), true)
	if more {
		signal(r.ready) // another consumer takes or times the next one
	}
	return b, 0, false, expired
}

// close empties the room for the final hand-back at Close and gives the
// batches' places back; later arrivals are refused, so nothing can be left
// behind.
func (r *waitingRoom) close() []*batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	bs := make([]*batch, 0, len(r.waiting))
	n := 0
	for _, w := range r.waiting {
		bs = append(bs, w.b)
		n += len(w.b.events)
	}
	r.waiting = nil
	r.places.release(n, true) // handed back: no longer held (R43)
	return bs
}

// waiter is one batch in the room.
type waiter struct {
	b   *batch
	due time.Time
	seq uint64
}

// dueOrder is a min-heap of waiters by due instant, then arrival.
type dueOrder []waiter

func (h dueOrder) Len() int { return len(h) }
func (h dueOrder) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h dueOrder) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueOrder) Push(x any)   { *h = append(*h, x.(waiter)) }
func (h *dueOrder) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = waiter{}
	*h = old[:len(old)-1]
	return w
}
