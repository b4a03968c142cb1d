package analytics

import (
	"cmp"
	"container/heap"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// waitingRoom is where a batch waits to be sent again, and the state about
// the server every consumer shares (R29, R31–R35, R55, R60). A batch waits
// here for its counted backoff or for a Retry-After deadline, ordered by
// the instant it may be sent again, and holds no consumer meanwhile. The
// gate is the deadline before which nobody sends anything; the episode is
// when rate limiting began. They are kept apart: the deadline is cleared
// when it has been served (R33), the episode when rate limiting stops
// (R34). Beside them the room keeps the server's health (R60–R63): how many
// 2xx answers arrived, and the retry allowance. One mutex guards it all.
type waitingRoom struct {
	mu     sync.Mutex
	limit  time.Duration // MaxRateLimitDuration
	places *capacity     // waiting events count against QueueCapacity (R43)

	deadline time.Time // the gate; zero: open. Monotonic (R36).
	start    time.Time // episode start; zero: no episode. Monotonic.
	waiting  dueOrder
	answer   chan struct{} // a probe is out (R64); closed at its answer
	seq      uint64        // arrival order, for ties of due instants
	closed   bool          // Close has handed everything back: nothing may enter
	noWait   bool          // Close waits for no retry (dueNow): everything is due at once
	unpaced  bool          // shared.Compat NoRetryAllowance: counted retries take no token

	health health
	outage outage // what the logs say about a failing server (health.go)
	// release is the first counted wait d_1 (R62), and releaseMax its
	// longest draw: after a 2xx, no counted retry stays due later than
	// that. Both come from the client's backoff policy (retry.go).
	release, releaseMax time.Duration
	latest              time.Time // no counted retry waits later than this (zero: none waits)

	ready  chan struct{} // cap 1: a batch arrived, or more are due
	opened chan struct{} // closed by dueNow: consumers at the gate go on
}

// newWaitingRoom returns the room of a client whose rate-limit episodes
// last at most limit (MaxRateLimitDuration), whose held events count in
// places, and whose counted retries wait as backoff says (R26, R62).
func newWaitingRoom(limit time.Duration, places *capacity, backoff backoffPolicy) *waitingRoom {
	release, releaseMax := backoff.firstWait()
	return &waitingRoom{
		limit: limit, places: places, ready: make(chan struct{}, 1), opened: make(chan struct{}),
		health:  newHealth(),
		release: release, releaseMax: releaseMax,
	}
}

// unpace lets counted retries leave without a token of the retry
// allowance (shared.Compat NoRetryAllowance). Call it before the room is
// shared.
func (r *waitingRoom) unpace() { r.unpaced = true }

// failed records a counted failure of b (R60) at now. It returns the k of
// its next wait, b's counted failures since the server last answered 2xx to
// any batch (R61); whether the recent answers other than b's own streak show
// a healthy server (R63): then b waits the short healthy wait whatever k, so
// that a batch unlucky on its own against a server that answers most
// requests does not sit out growing waits, even when it is the last one left
// and its own failures fill the window; and the line due about a failing
// server (written by outageLog), if any.
func (r *waitingRoom) failed(b *batch, now time.Time) (k int, healthy bool, line outageLine) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.health.note(true)
	line = r.outage.failure(&r.health, now, b.lastErr)
	k = b.countFailure(r.health.successes)
	return k, r.health.healthy(k), line
}

// Bounds of the healthy wait d_h (R61): a counted retry against a healthy
// server waits a uniform draw between them, whatever its streak.
const (
	healthyWaitMin = 80 * time.Millisecond
	healthyWaitMax = 120 * time.Millisecond
)

// healthyWait draws d_h, uniform in [healthyWaitMin, healthyWaitMax] (R61).
func healthyWait() time.Duration {
	return healthyWaitMin + rand.N(healthyWaitMax-healthyWaitMin+1)
}

// succeeded records a 2xx at now (R60): it pays allowancePerSuccess into
// the allowance, restarts every batch's streak (R61) and releases the
// backlog (R62): every batch waiting for a counted retry due later than
// d_1 from now becomes due within d_1, in due order, each at its own
// instant (the window is cut in equal slices, one per batch, and each
// batch draws its instant inside its slice). Rate-limited batches and
// batches waiting for a token keep their instant. It returns the line due
// about a failing server that answers again (written by outageLog), if any.
func (r *waitingRoom) succeeded(now time.Time) (line outageLine) {
	r.mu.Lock()
	r.health.succeeded(now)
	line = r.outage.success(&r.health, now, r.retryingLocked)
	horizon := now.Add(r.releaseMax)
	if r.unpaced || r.latest.IsZero() || !r.latest.After(horizon) { // unpaced: each batch keeps its own schedule
		r.mu.Unlock()
		return line
	}
	late := make([]int, 0, len(r.waiting))
	for i, w := range r.waiting {
		if w.b.countedRetry() && !awaitsToken(w.b) && w.due.After(horizon) {
			late = append(late, i)
		}
	}
	slices.SortFunc(late, func(i, j int) int { return r.waiting.compare(i, j) })
	r.latest = horizon
	if n := len(late); n > 0 {
		slice := float64(r.release) / float64(n)
		for i, at := range late {
			r.waiting[at].due = now.Add(time.Duration(slice * (float64(i) + rand.Float64())))
		}
		heap.Init(&r.waiting)
	}
	r.mu.Unlock()
	if len(late) > 0 {
		signal(r.ready)
	}
	return line
}

// reschedule makes every waiting batch for which pick reports true due at
// now, and wakes a consumer; it returns how many it moved. OAuth uses it
// when a token arrives or the token source fails for good.
func (r *waitingRoom) reschedule(now time.Time, pick func(*batch) bool) int {
	r.mu.Lock()
	n := 0
	for i := range r.waiting {
		if pick(r.waiting[i].b) {
			r.waiting[i].due = now
			n++
		}
	}
	if n > 0 {
		heap.Init(&r.waiting)
	}
	r.mu.Unlock()
	if n > 0 {
		signal(r.ready)
	}
	return n
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
	if b.retryPending && due.After(r.latest) {
		r.latest = due
	}
	r.places.holdBatch(b) // never refused, but counted (R44)
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
	r.outage.poke() // Close looks again whether the gate outlasts it
	if r.start.IsZero() {
		r.start = now
		opened = true
	}
	if now.Sub(r.start) >= r.limit {
		r.places.holdBatch(b) // like those it fails with (see expireLocked)
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
// waits for a deadline. Batches waiting for their backoff stay. The
// batches taken out keep their places until their OnError has returned
// (settler.rateLimitExceeded), so that memory stays within R43's bound.
func (r *waitingRoom) expireLocked() []*batch {
	r.start, r.deadline = time.Time{}, time.Time{}
	r.answerProbeLocked() // no episode, no probe: everyone may go
	var expired []*batch
	kept := r.waiting[:0]
	for _, w := range r.waiting {
		if w.b.rateLimited {
			expired = append(expired, w.b)
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

// gate is the check every consumer makes before it sends anything (R32,
// R64); held is the probe the caller holds, if any. It returns
// how long the gate stays shut (0: open), never past the episode's end
// (R35), or answer, non-nil while another consumer's probe is out (closed
// at its answer). probe is non-nil when the caller has just become the
// probe; it passes it back as held, and to endProbe.
// A served deadline is cleared (R33). When the episode has run out,
// expired holds the batches that waited for a deadline, for the caller to
// fail.
func (r *waitingRoom) gate(now time.Time, held chan struct{}) (g gateState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gateLocked(now, held)
}

// gateState is the gate as one consumer found it.
type gateState struct {
	wait    time.Duration   // > 0: shut for this long
	answer  <-chan struct{} // non-nil: shut until another consumer's probe is answered (R64)
	probe   chan struct{}   // non-nil: the caller is the probe; it sends one batch, the others wait
	expired []*batch        // rate-limited batches whose episode ran out (R35)
}

func (g gateState) shut() bool { return g.wait > 0 || g.answer != nil }

func (r *waitingRoom) gateLocked(now time.Time, held chan struct{}) (g gateState) {
	if !r.start.IsZero() && now.Sub(r.start) >= r.limit {
		g.expired = r.expireLocked()
	}
	if !r.deadline.IsZero() {
		if now.Before(r.deadline) {
			g.wait = r.deadline.Sub(now)
			if !r.start.IsZero() {
				g.wait = min(g.wait, r.start.Add(r.limit).Sub(now))
			}
			return g
		}
		r.deadline = time.Time{} // served: it classifies nothing later (R33)
	}
	if r.start.IsZero() || (held != nil && held == r.answer) {
		return g
	}
	// The deadline is served and the episode still open: one request at a
	// time until an answer ends the episode or sets a new deadline (R64).
	if r.answer != nil {
		g.answer = r.answer
		return g
	}
	r.answer = make(chan struct{})
	g.probe = r.answer
	return g
}

// endProbe records that the attempt of probe is over (answered, or failed
// without an answer): the consumers waiting for it look at the gate again.
func (r *waitingRoom) endProbe(probe chan struct{}) {
	r.mu.Lock()
	if r.answer != nil && r.answer == probe {
		r.answerProbeLocked()
	}
	r.mu.Unlock()
}

// turn is what a free consumer gets from the waiting room.
type turn struct {
	b    *batch        // the batch to send, nil if none is due
	wait time.Duration // with b nil: how long until one is due or the gate opens; -1: none waits
	gate gateState
}

// takeTurn passes the gate and takes the batch that has been due longest
// (R47). With the gate shut it returns the gate; otherwise, with nothing
// due, how long until the next batch is due, or -1 when none waits. A
// counted retry also needs a token of the retry allowance (R63); without
// one it stays, the oldest due batch that needs none goes in its place
// (R32), and with none, wait says when the token comes.
func (r *waitingRoom) takeTurn(now time.Time, held chan struct{}) (t turn) {
	r.mu.Lock()
	t.gate = r.gateLocked(now, held)
	if t.gate.shut() {
		r.mu.Unlock()
		return t
	}
	if len(r.waiting) == 0 {
		r.mu.Unlock()
		t.wait = -1
		return t
	}
	first := r.waiting[0]
	if now.Before(first.due) {
		r.mu.Unlock()
		t.wait = first.due.Sub(now)
		return t
	}
	at := 0
	if first.b.countedRetry() && !r.unpaced {
		if wait := r.health.takeToken(now); wait > 0 {
			// A due batch that needs no token (a rate-limited retry)
			// does not wait behind it (R32, R63).
			if at = r.dueWithoutTokenLocked(now); at < 0 {
				r.mu.Unlock()
				t.wait = wait
				return t
			}
		}
	}
	t.b = heap.Remove(&r.waiting, at).(waiter).b
	more := len(r.waiting) > 0
	r.mu.Unlock()
	r.places.releaseBatches(t.b)
	if more {
		signal(r.ready) // another consumer takes or times the next one
	}
	return t
}

// dueWithoutTokenLocked is the index of the oldest due batch that needs
// no token of the retry allowance (R63), or -1.
func (r *waitingRoom) dueWithoutTokenLocked(now time.Time) int {
	at := -1
	for i, w := range r.waiting {
		if !now.Before(w.due) && !w.b.countedRetry() && (at < 0 || r.waiting.compare(i, at) < 0) {
			at = i
		}
	}
	return at
}

// close empties the room for the final hand-back at Close and gives the
// batches' places back; later arrivals are refused, so nothing can be left
// behind.
func (r *waitingRoom) close() []*batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	bs := make([]*batch, 0, len(r.waiting))
	for _, w := range r.waiting {
		bs = append(bs, w.b)
	}
	r.waiting = nil
	r.places.releaseBatches(bs...) // handed back: no longer held (R43)
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

func (h dueOrder) Len() int           { return len(h) }
func (h dueOrder) Less(i, j int) bool { return h.compare(i, j) < 0 }

// compare orders waiters i and j by due instant, then arrival.
func (h dueOrder) compare(i, j int) int {
	if c := h[i].due.Compare(h[j].due); c != 0 {
		return c
	}
	return cmp.Compare(h[i].seq, h[j].seq)
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

// dueNow makes every waiting batch due at now and opens the gate, for a
// Close that waits for no retry; a batch that a consumer puts in the room
// later (its outcome was decided before Close began) is due at once too.
func (r *waitingRoom) dueNow(now time.Time) {
	r.mu.Lock()
	if !r.noWait && r.opened != nil {
		close(r.opened) // the gate opens for the consumers sleeping at it too
	}
	r.noWait = true
	r.deadline, r.start = time.Time{}, time.Time{}
	r.answerProbeLocked() // no episode, no probe (R64): nobody waits for one
	for i := range r.waiting {
		if r.waiting[i].due.After(now) {
			r.waiting[i].due = now
		}
	}
	heap.Init(&r.waiting)
	r.mu.Unlock()
	signal(r.ready)
}

// retryingLocked reports whether a batch waits for a counted retry; r.mu
// is held.
func (r *waitingRoom) retryingLocked() bool {
	for _, w := range r.waiting {
		if w.b.countedRetry() {
			return true
		}
	}
	return false
}

// backlog is what waits in the room: batches, their events, and how long
// until the first of them is due (-1: none waits).
func (r *waitingRoom) backlog(now time.Time) (batches, events int, next time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next = -1
	for _, w := range r.waiting {
		batches++
		events += len(w.b.events)
	}
	if len(r.waiting) > 0 {
		next = max(r.waiting[0].due.Sub(now), 0)
	}
	if r.deadline.After(now) && r.deadline.Sub(now) > next {
		next = r.deadline.Sub(now)
	}
	return batches, events, next
}

// notAnswering reports whether the server is not answering, as Close in
// durable mode judges it: the server is failing (see outage), and the
// latest answer of all was a counted failure; or the rate-limit gate is
// shut until deadline or later (a zero deadline: never so). Otherwise it
// returns a channel closed at the next counted failure or Retry-After,
// when it may have become so. last is the last counted failure's error.
func (r *waitingRoom) notAnswering(deadline time.Time) (yes bool, changed <-chan struct{}, last error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if failing, last := r.outage.failingNow(&r.health); failing {
		return true, nil, last
	}
	if !r.deadline.IsZero() && !deadline.IsZero() && !r.deadline.Before(deadline) {
		return true, nil, nil
	}
	return false, r.outage.nextChange(), nil
}

// answerProbeLocked ends the probe, if one is out (R64): whoever waits for
// its answer goes on. r.mu is held.
func (r *waitingRoom) answerProbeLocked() {
	if r.answer != nil {
		close(r.answer)
		r.answer = nil
	}
}
