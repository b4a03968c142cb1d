package analytics

import (
	"cmp"
	"container/heap"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go/internal/wire"
)

// What the client knows of the server, shared by every consumer: the
// waiting room with its gate and rate-limit episode, the server's health
// and retry allowance, the lines the logs give a failing server, and, at
// the end of the file, the limits learned from the server's refusals.

// waitingRoom is where a batch waits to be sent again, and the state about
// the server every consumer shares (R29, R31–R35, R55, R60). A batch waits
// here for its counted backoff or for a Retry-After deadline, ordered by
// the instant it may be sent again, and holds no consumer meanwhile. The
// gate is the deadline before which nobody sends anything; the episode is
// when rate limiting began. They are kept apart: the deadline is cleared
// when it has been served (R33), the episode when rate limiting stops
// (R34). Beside them the room keeps the server's health (R60–R63): how many
// 2xx answers arrived, the recent answers, the retry allowance, and what
// the logs say about a failing server (R51); they follow the room in this
// file. One mutex guards it all.
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
	outage outage // what the logs say about a failing server (see outageLog)
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
	if b.countedRetry() && due.After(r.latest) {
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

// waitAtGate waits at the shut gate g: for its deadline (on timer), for
// the answer to another consumer's probe (R64), or until a Close that
// waits for no retry opens it (dueNow, shared.Compat FastClose). It
// reports false when stop closes first (shutdown).
func (r *waitingRoom) waitAtGate(g gateState, timer *time.Timer, stop <-chan struct{}) bool {
	var expired <-chan time.Time
	if g.answer == nil {
		timer.Reset(g.wait)
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case <-expired:
	case <-g.answer:
	case <-r.opened:
	case <-stop:
		return false
	}
	return true
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

// takeTurn passes the gate and takes the batch that has been due longest
// (R47). With the gate shut it returns the gate g; otherwise, with nothing
// due (b nil), wait is how long until the next batch is due, or -1 when
// none waits. A counted retry also needs a token of the retry allowance
// (R63); without one it stays, the oldest due batch that needs none goes in
// its place (R32), and with none, wait says when the token comes.
func (r *waitingRoom) takeTurn(now time.Time, held chan struct{}) (b *batch, wait time.Duration, g gateState) {
	r.mu.Lock()
	g = r.gateLocked(now, held)
	if g.shut() {
		r.mu.Unlock()
		return nil, 0, g
	}
	if len(r.waiting) == 0 {
		r.mu.Unlock()
		return nil, -1, g
	}
	first := r.waiting[0]
	if now.Before(first.due) {
		r.mu.Unlock()
		return nil, first.due.Sub(now), g
	}
	at := 0
	if first.b.countedRetry() && !r.unpaced {
		if wait := r.health.takeToken(now); wait > 0 {
			// A due batch that needs no token (a rate-limited retry)
			// does not wait behind it (R32, R63).
			if at = r.dueWithoutTokenLocked(now); at < 0 {
				r.mu.Unlock()
				return nil, wait, g
			}
		}
	}
	b = heap.Remove(&r.waiting, at).(waiter).b
	more := len(r.waiting) > 0
	r.mu.Unlock()
	r.places.releaseBatches(b)
	if more {
		signal(r.ready) // another consumer takes or times the next one
	}
	return b, 0, g
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
		events += w.b.Len()
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

// The server's health as every consumer saw it (docs/delivery.md
// R60–R63): the recent answers, the count of 2xx answers that restarts a
// batch's failure streak, the retry allowance, and whether the server is
// failing as the logs tell it (R51). It is kept in the waiting room and
// guarded by its mutex; nothing from here on takes a lock but outageLog,
// at the end, which writes the lines outside it.

// The retry allowance (R63), a token bucket in the manner of gRPC's retry
// throttling and the AWS SDKs' retry quota: a consumer takes a token when
// it takes a due counted retry; tokens come back at allowanceRate per second and
// allowancePerSuccess for every 2xx, up to allowanceBurst. A counted retry
// that finds no token waits for one; first attempts and rate-limited
// retries never do. While at most three in four answers are counted
// failures, 2xx answers refill it faster than retries drain it, and it never
// binds; against a server that fails more, retries leave at the rate 2xx
// answers pay for, and during an outage at allowanceRate.
const (
	allowanceRate       = 5.0 // tokens per second without any 2xx
	allowancePerSuccess = 3.0
	allowanceBurst      = 20.0
)

// health is the server's health as every consumer saw it (R60): guarded by
// the waiting room's mutex.
type health struct {
	successes uint64    // 2xx answers so far: a batch's streak restarts when it moves (R61)
	tokens    float64   // retry allowance (R63)
	refilled  time.Time // when tokens were last brought up to date
	recent    uint16    // the last answers, newest in bit 0: 1 a counted failure, 0 a 2xx
	seen      int       // how many bits of recent hold an answer (at most recentAnswers)
}

// newHealth is the health of a server that has not answered yet: no
// answer seen, and the whole retry allowance (R63).
func newHealth() health { return health{tokens: allowanceBurst} }

// recentAnswers is how many of the latest answers decide whether the server
// is healthy (R63).
const recentAnswers = 16

// note records one answer: a counted failure or a 2xx.
func (h *health) note(failure bool) {
	h.recent <<= 1
	if failure {
		h.recent |= 1
	}
	h.seen = min(h.seen+1, recentAnswers)
}

// healthy reports whether the recent answers show a healthy server (R63)
// to a batch whose streak is streak: at least four of them, and fewer than
// half counted failures, once the batch's own failures since the last 2xx
// are left out (they are the newest answers, after the last 2xx, so at most
// the failures that follow it).
func (h *health) healthy(streak int) bool {
	known := h.recent & uint16(1<<h.seen-1)
	failures := bits.OnesCount16(known)
	own := min(streak, bits.TrailingZeros16(^known)) // the failures after the last 2xx, at most
	seen, failures := h.seen-own, failures-own
	return seen >= 4 && 2*failures < seen
}

// refill brings the allowance up to now.
func (h *health) refill(now time.Time) {
	if !h.refilled.IsZero() && now.After(h.refilled) {
		h.tokens = min(allowanceBurst, h.tokens+now.Sub(h.refilled).Seconds()*allowanceRate)
	}
	if now.After(h.refilled) {
		h.refilled = now
	}
}

// takeToken takes a token of the allowance for a counted retry at now and
// returns 0, or, when none is there, how long until one is (R63).
// A wait that rounds to nothing counts as a token that is there.
func (h *health) takeToken(now time.Time) time.Duration {
	h.refill(now)
	if h.tokens < 1 {
		if wait := time.Duration((1 - h.tokens) / allowanceRate * float64(time.Second)); wait > 0 {
			return wait
		}
	}
	h.tokens--
	return 0
}

// succeeded records a 2xx at now (R60): it restarts every batch's streak
// (R61) and pays allowancePerSuccess into the allowance (R63).
func (h *health) succeeded(now time.Time) {
	h.successes++
	h.note(false)
	h.refill(now)
	h.tokens = min(allowanceBurst, h.tokens+allowancePerSuccess)
}

// lastFailed reports whether the latest answer was a counted failure.
func (h *health) lastFailed() bool { return h.seen > 0 && h.recent&1 == 1 }

// What the logs say about a server that fails (R51): one
// warning when it starts failing, one aggregated warning at most every
// outageReportInterval while it goes on, and one information line when it
// answers again. The state lives in the waiting room beside the server's
// health (R60), under the same lock, and is judged from the same recent
// answers; the lines are written by the consumer that saw the answer,
// outside the lock.

// outageReportInterval is the least time between two warnings about a
// failing server.
const outageReportInterval = 30 * time.Second

// The server starts failing at a counted failure after which either at
// least outageMinFailures of the recent answers, and at least half of them,
// are counted failures, or the last outageStreak answers are counted
// failures and the first of them is outageStreakAge old (a client with
// few requests, whose window still holds the 2xx answers of before).
const (
	outageMinFailures = 3
	outageStreak      = 4
	outageStreakAge   = time.Second
)

// outage is the client's view of a failing server; guarded by the waiting
// room's mutex.
type outage struct {
	on          bool      // the server is failing
	announced   bool      // a warning said so (a run that starts within outageReportInterval of the last warning waits for the next one)
	since       time.Time // first counted failure of the run
	streakStart time.Time // first counted failure since the last 2xx
	lastLine    time.Time // last warning
	failures    int64     // counted failures since the run began
	unreported  int64     // counted failures since the last warning
	lastErr     error     // the last counted failure's error
	// changed is closed at the next counted failure or usable Retry-After:
	// Close, in durable mode, looks again whether the server answers.
	changed chan struct{}
}

// outageKind is what a line says.
type outageKind int

const (
	outageNone    outageKind = iota
	outageStarted            // WARN: the server started failing
	outageGoingOn            // WARN: it still fails
	outageEnded              // INFO: it answers again
)

// outageLine is one line about a failing server, its numbers taken under
// the waiting room's lock.
type outageLine struct {
	kind     outageKind
	err      error
	failures int64         // started: failures among the recent answers; going on: since the last line; ended: in the whole run
	recent   int           // started: the recent answers they are among
	lasted   time.Duration // since the run's first counted failure
}

// failingNow reports whether the server is failing and the latest answer
// of all (h) was a counted failure, with that failure's error.
func (o *outage) failingNow(h *health) (bool, error) {
	if o.on && h.lastFailed() {
		return true, o.lastErr
	}
	return false, nil
}

// nextChange is a channel closed at the next counted failure or usable
// Retry-After (poke).
func (o *outage) nextChange() <-chan struct{} {
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	return o.changed
}

// poke wakes whoever watches changed.
func (o *outage) poke() {
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
}

// failure records a counted failure with err at now, already noted in h,
// and says which line is due.
func (o *outage) failure(h *health, now time.Time, err error) outageLine {
	known := h.recent & uint16(1<<h.seen-1)
	streak := bits.TrailingZeros16(^known)
	if streak <= 1 || o.streakStart.IsZero() {
		o.streakStart = now
	}
	o.lastErr = err
	o.unreported++
	o.poke()
	if !o.on {
		failures := bits.OnesCount16(known)
		byShare := failures >= outageMinFailures && 2*failures >= h.seen
		byStreak := streak >= outageStreak && now.Sub(o.streakStart) >= outageStreakAge
		if !byShare && !byStreak {
			return outageLine{}
		}
		o.on, o.announced, o.since = true, false, o.streakStart
		o.failures, o.unreported = int64(failures), int64(failures)
		if !o.lastLine.IsZero() && now.Sub(o.lastLine) < outageReportInterval {
			return outageLine{} // announced by the next warning, when the interval has passed
		}
		o.announced, o.lastLine, o.unreported = true, now, 0
		return outageLine{kind: outageStarted, err: err, failures: int64(failures), recent: h.seen, lasted: now.Sub(o.since)}
	}
	o.failures++
	if now.Sub(o.lastLine) < outageReportInterval {
		return outageLine{}
	}
	line := outageLine{kind: outageGoingOn, err: err, failures: o.unreported, lasted: now.Sub(o.since)}
	if !o.announced {
		line.kind, o.announced = outageStarted, true
	}
	o.lastLine, o.unreported = now, 0
	return line
}

// success records a 2xx at now, already noted in h; retrying reports
// whether a batch still waits for a counted retry. The run ends when the
// recent answers show a healthy server (R63's measure: at least four,
// fewer than half of them failures), or when nothing failed is left to
// retry; its end is told only if its start was.
func (o *outage) success(h *health, now time.Time, retrying func() bool) outageLine {
	o.streakStart = time.Time{}
	if !o.on {
		return outageLine{}
	}
	known := h.recent & uint16(1<<h.seen-1)
	healthy := h.seen >= 4 && 2*bits.OnesCount16(known) < h.seen
	if !healthy && retrying() {
		return outageLine{}
	}
	o.on = false
	if !o.announced {
		return outageLine{}
	}
	line := outageLine{kind: outageEnded, err: o.lastErr, failures: o.failures, lasted: now.Sub(o.since)}
	o.failures, o.unreported, o.lastErr = 0, 0, nil
	return line
}

// The lines about a failing server (R51) are decided above, in the waiting
// room under its lock, and written here by the consumer that saw the
// answer, outside the lock.

// outageLog writes the lines about a failing server, with what is held:
// events without an outcome, batches waiting in the room, events on disk
// only (durable mode), and when the next attempt is due.
type outageLog struct {
	log    *zap.Logger
	q      *queue
	room   *waitingRoom
	disk   *durable
	stats  *counters
	before atomic.Int64 // Stats.Delivered at the first warning of a run
}

func newOutageLog(log *zap.Logger, q *queue, room *waitingRoom, disk *durable, stats *counters) *outageLog {
	return &outageLog{log: log, q: q, room: room, disk: disk, stats: stats}
}

// write writes l, if it says anything; o may be nil (no lines).
func (o *outageLog) write(l outageLine) {
	if l.kind == outageNone || o == nil {
		return
	}
	now := time.Now()
	batches, _, next := o.room.backlog(now)
	fields := make([]zap.Field, 0, 8)
	if l.err != nil {
		fields = append(fields, zap.Error(l.err))
	}
	fields = append(fields, zap.Int("heldEvents", o.q.outstanding()), zap.Int("waitingBatches", batches))
	if o.disk != nil {
		fields = append(fields, zap.Int64("onDisk", o.disk.heldOnDisk()))
	}
	delivered := zap.Int64("deliveredEvents", o.stats.delivered.Load()-o.before.Load()) // since the first warning
	switch l.kind {
	case outageStarted:
		o.before.Store(o.stats.delivered.Load())
		fields = append(fields, zap.Int64("failedRequests", l.failures), zap.Int("ofRecent", l.recent),
			zap.Duration("nextAttemptIn", next))
		o.log.Warn("the server is failing: events are held and retried", fields...)
	case outageGoingOn:
		fields = append(fields, zap.Int64("failedRequests", l.failures), zap.Duration("failingFor", l.lasted),
			delivered, zap.Duration("nextAttemptIn", next))
		o.log.Warn("the server is still failing: events are held and retried", fields...)
	case outageEnded:
		fields = append(fields, zap.Int64("failedRequests", l.failures), zap.Duration("failedFor", l.lasted), delivered)
		o.log.Info("the server is answering again", fields...)
	}
}

// What the client learns of a server's limits from its refusals
// (docs/delivery.md R67–R69), shared by every consumer:
//
//   - until the first 413, batches close at twice the largest body
//     accepted (the ramp), then a 413: the client searches the body limit
//     between the largest body accepted and the smallest refused, and
//     batches close at the size it tries next, then at the largest
//     accepted (R67);
//   - a batch answered 429 without a usable Retry-After twice in a row:
//     the smallest batch refused so and the largest one delivered bound the
//     number of events per batch from then on (R68);
//   - a body larger than any the server has accepted goes alone: the other
//     consumers wait for its answer before they send one (R69), so the
//     consumers search the limit together, one size at a time.
//
// How a batch over these limits is cut is in consumer.go.

// The search for a body limit (R67). A 413 costs a request and its round
// trip; a body smaller than the limit costs requests for the life of the
// client. So the search tries sizes between the largest body accepted (lo)
// and the smallest refused (hi), as one request each:
//
//   - until the first 413, no body is larger than rampFactor times the
//     largest accepted, nor than rampStart while that is smaller: the first
//     refused body is then at most twice the limit, whenever the limit is
//     rampStart or more (the ramp);
//   - after it, when lo is at least half of hi, each try is probeStep times
//     lo (and at least one event more), so that its refusal, the second,
//     leaves the client within probeStep of the limit;
//   - when lo is less than half of hi (a limit below rampStart, or a limit
//     that went down), the first try is the point probeWeight of the way
//     from lo (or one event's body) to hi on a logarithmic scale, at most
//     probeCap when hi is within the ramp's first size, then it climbs as
//     above; if that point is refused too, the climb starts from lo or one
//     event, and its refusal is the third (searchRefusals);
//
// once the next step would reach hi, batches close at lo. So a fixed limit
// of probeCap or more is refused at most twice.
const (
	searchRefusals = 3
	rampStart      = 8 << 10
	rampFactor     = 2
	probeWeight    = 0.45
	probeCap       = 2 << 10
	probeStep      = 1.2
)

// learnedLimits is what the client has learned of the server's limits since New
// (R67, R68). It is shared by every consumer and read by Stats; it sets the
// queue's byte and event budgets when it learns something.
type learnedLimits struct {
	q        *queue
	bodies   wire.Frame // the client's body format: size is its BodySize
	frame    int        // bodies.Size: what a body adds around its events; batches close at the learned body limit less this (R67)
	perEvent int        // what a body adds to each event (the per-event sentAt, R59)
	flushAt  int        // the configured FlushAt
	maxBytes int        // the configured byte budget of a batch's events (R45)
	ramp     int        // the ramp's first size: rampStart

	mu            sync.Mutex
	refusedBody   int  // smallest size (see size) answered 413 in this search; 0: none yet
	refusals      int  // 413s in this search
	probe         int  // the first size this search tries when lo is less than half of hi; 0: none (see searchRefusals)
	settled       bool // a step of the climb was refused: batches close at the largest accepted size until the limit goes down
	oneEvent      int  // the size of a body of one event, the smallest average of the batches answered since New
	refusedEvents int  // fewest events in a batch split after repeated 429s (R68); 0: none yet

	acceptedEvents atomic.Int64  // most events in a batch answered 2xx since New (R68)
	acceptedSize   atomic.Int64  // largest size (see size) answered 2xx since New, or since the limit went down (R67, R69)
	acceptedBody   atomic.Int64  // the largest body as sent answered 2xx in the same time
	trying         chan struct{} // guarded by mu: a body of an untried size is on the wire; closed at its answer (R69)

	searches atomic.Int64 // searches begun since New: a 413 on a body sent during an earlier one counts in none

	target atomic.Int64 // where batches close, in bytes, during the ramp or a search or after it; 0: nowhere short of the configured size
	body   atomic.Int64 // target once a 413 came; 0: no 413 yet (Stats.BodyLimit)
	events atomic.Int64 // learned events per batch; 0: none (Stats.EventLimit)
}

// newLearnedLimits starts with nothing learned; bodies is the format of
// the client's bodies, and q's batches close at flushAt events or maxBytes
// of events with perEvent bytes each (its queueOptions) until a limit is
// learned.
func newLearnedLimits(q *queue, bodies wire.Frame, flushAt, maxBytes, perEvent int) *learnedLimits {
	l := &learnedLimits{q: q, bodies: bodies, frame: bodies.Size(), flushAt: flushAt, maxBytes: maxBytes, perEvent: perEvent, ramp: rampStart}
	l.mu.Lock()
	l.applyLocked() // the ramp's first size
	l.mu.Unlock()
	return l
}

// endRamp ends R67's ramp before the client starts: batches close at the
// configured sizes from the first request (tests of other rules).
func (l *learnedLimits) endRamp() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ramp = l.maxBytes + l.frame
	l.applyLocked()
}

// bodyLimit and eventLimit are the learned limits, 0 when none is known.
func (l *learnedLimits) bodyLimit() int  { return int(l.body.Load()) }
func (l *learnedLimits) closeAt() int    { return int(l.target.Load()) } // where batches close: the learned limit or the ramp's
func (l *learnedLimits) eventLimit() int { return int(l.events.Load()) }

// size is how large b's body can be: its events, what the body adds to
// each (R59) and the most the frame adds. It is known before b is encoded.
func (l *learnedLimits) size(b *batch) int {
	return l.bodies.BodySize(b)
}

// raise sets a to v if v is larger.
func raise(a *atomic.Int64, v int) {
	for {
		most := a.Load()
		if int64(v) <= most || a.CompareAndSwap(most, int64(v)) {
			return
		}
	}
}

// try asks to send a body of the given size (R69). When the server has
// accepted one at least as large, or no body of an untried size is on the
// wire, it returns wait nil: the caller may send, and when mine is not nil
// it holds the turn and gives it back with done at the end of its
// attempt. Otherwise the caller waits for wait to close and asks again.
func (l *learnedLimits) try(size int) (mine, wait chan struct{}) {
	if l.tried(size) {
		return nil, nil // the common case takes no lock
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tried(size) {
		return nil, nil
	}
	if l.trying != nil {
		return nil, l.trying
	}
	l.trying = make(chan struct{})
	return l.trying, nil
}

// claim is asked before a new batch is taken from the queue. While the
// answer to a body of an untried size may change where batches close
// (nothing accepted yet, the ramp, or a search for the body limit), only
// the consumer holding the turn of an untried size takes one: claim then
// returns mine, the turn (given back with done), or wait, closed at the
// answer of the body on the wire, before which the caller takes nothing.
// The events stay in the queue meanwhile and are batched at what the
// answer teaches (R69). Otherwise both are nil.
func (l *learnedLimits) claim() (mine, wait chan struct{}) {
	if accepted := l.acceptedSize.Load(); accepted > 0 && l.target.Load() <= accepted {
		return nil, nil // the common case takes no lock
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.trying != nil {
		return nil, l.trying
	}
	l.trying = make(chan struct{})
	return l.trying, nil
}

// untriedFloor is the body size up to which R69 holds no body back until
// the first 413: small batches (a few events each, as at a low rate) go
// side by side from the first request on, also while the server answers
// nothing but failures. It is probeCap: a limit that small may cost a
// third refusal anyway (R67). Once a 413 has come, every size the server
// has not accepted goes alone, however small.
const untriedFloor = probeCap

// tried reports whether a body of the given size may go side by side with
// others (R69): the server accepted one at least as large, or no 413 has
// come yet and it is within untriedFloor.
func (l *learnedLimits) tried(size int) bool {
	return int64(size) <= l.acceptedSize.Load() || (size <= untriedFloor && l.body.Load() == 0)
}

// done gives back the turn try handed out, whatever the attempt's end.
func (l *learnedLimits) done(mine chan struct{}) {
	l.mu.Lock()
	if l.trying == mine {
		l.trying = nil
	}
	l.mu.Unlock()
	close(mine)
}

// accepted records a body answered 2xx: size bytes as sent, estimate as
// size reckons it before sending, n events.
func (l *learnedLimits) accepted(size, estimate, n int) {
	raise(&l.acceptedEvents, n)
	if l.target.Load() == 0 && l.events.Load() == 0 {
		// Nothing learned and the ramp over: nothing to search (the
		// common case takes no lock).
		raise(&l.acceptedSize, estimate)
		raise(&l.acceptedBody, size)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refusedBody == 0 || estimate < l.refusedBody {
		// A body at least as large as one refused was sent before the
		// limit went down: it says nothing of the limit now.
		raise(&l.acceptedSize, estimate)
		raise(&l.acceptedBody, size)
	}
	if one := l.frame + (estimate-l.frame+n-1)/max(n, 1); l.oneEvent == 0 || one < l.oneEvent {
		l.oneEvent = one // the climb's step of one event is the smallest seen (R67)
	}
	l.applyLocked()
}

// refusedSize records a multi-event body answered 413 (R67): size bytes as
// sent, estimate as size reckons it before sending, n events, sent during
// search number search.
func (l *learnedLimits) refusedSize(size, estimate, n int, search int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case search != l.searches.Load():
		// Sent before the limit went down and answered after: it says the
		// limit is below its size, and costs the search nothing.
		if estimate < l.refusedBody {
			l.refusedBody = estimate
		}
		l.applyLocked()
		return
	case int64(size) <= l.acceptedBody.Load():
		// The server refuses what it accepted before: its limit went down.
		// What it accepted says nothing any more; the search starts over,
		// and every size is untried again (R69).
		l.acceptedSize.Store(0)
		l.acceptedBody.Store(0)
		l.refusedBody, l.refusals, l.probe, l.settled = 0, 0, 0, false
	case int64(estimate) <= l.acceptedSize.Load():
		// Refused, though no larger as reckoned than one accepted: the
		// frame of that one was shorter. Sizes as sent are safe.
		l.acceptedSize.Store(l.acceptedBody.Load())
	}
	begins := l.refusedBody == 0
	if l.refusals > 0 && (l.probe == 0 || estimate > l.probe) {
		l.settled = true // a step of the climb, not the probe: the search is over (R67)
	}
	if l.refusedBody == 0 || estimate < l.refusedBody {
		l.refusedBody = estimate
	}
	l.refusals++
	one := l.frame + (estimate-l.frame+n-1)/max(n, 1)
	if l.oneEvent == 0 || one < l.oneEvent {
		l.oneEvent = one
	}
	if l.refusals == 1 {
		l.probe = l.probeLocked()
	}
	l.applyLocked()
	if begins {
		// A search begins: bodies already on the wire cost it nothing. It
		// is counted after the limit is stored, so that a consumer that
		// sees the new search also sees the limit (readyToSend).
		l.searches.Add(1)
	}
}

// refusedOne records a body of one event answered 413 (R67): it cannot be
// cut, so it costs the search no refusal, but the server refuses bodies
// of its size (estimate, as size reckons it), so no batch that large
// follows. The first 413 begins a search.
func (l *learnedLimits) refusedOne(estimate int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refusedBody != 0 && estimate >= l.refusedBody {
		return
	}
	begins := l.refusedBody == 0
	l.refusedBody = estimate
	if begins {
		l.probe = l.probeLocked()
	}
	l.applyLocked()
	if begins {
		l.searches.Add(1) // after the limit is stored, as refusedSize says
	}
}

// refusedCount records a batch of n events split after repeated 429s
// (R68).
func (l *learnedLimits) refusedCount(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refusedEvents == 0 || n < l.refusedEvents {
		l.refusedEvents = n
	}
	l.applyLocked()
}

// loLocked is the largest body accepted below hi, the smallest refused, as
// sent. A body as reckoned (size) counts the longest sentAt; the accepted
// one may have had a shorter one (a clock at a round instant), so a batch
// reckoned no larger than it could weigh a few bytes more as sent, and
// with the limit between, every consumer would be refused at once. A
// batch reckoned no larger than one as sent weighs no more.
func (l *learnedLimits) loLocked(hi int) int {
	return int(min(l.acceptedBody.Load(), int64(hi-1)))
}

// probeLocked is the first size a search tries when the largest body
// accepted is less than half the refused one: the point probeWeight of the
// way from it (or one event's body) to the refused size, on a logarithmic
// scale; 0 otherwise, when the search climbs from the largest accepted at
// once (R67).
func (l *learnedLimits) probeLocked() int {
	hi := l.refusedBody
	lo := l.loLocked(hi)
	if 2*lo >= hi {
		return 0
	}
	from := max(lo, min(l.oneEvent, hi-1), 1)
	p := int(math.Exp((1-probeWeight)*math.Log(float64(from)) + probeWeight*math.Log(float64(hi))))
	if hi <= l.ramp {
		// The ramp's first 413: a limit of probeCap or more is not refused
		// again before the climb (R67).
		p = min(p, probeCap)
	}
	if p <= lo {
		return 0
	}
	return p
}

// bodyTargetLocked is where batches close (R67): before any 413, the
// ramp's size, rampFactor times the largest body accepted or rampStart, or
// 0 once that is over the configured size; during a search, the size it
// tries next; after it, the largest accepted.
func (l *learnedLimits) bodyTargetLocked() int {
	hi := l.refusedBody
	if hi == 0 {
		ramp := max(l.ramp, rampFactor*int(l.acceptedSize.Load()))
		if ramp >= l.maxBytes+l.frame {
			return 0
		}
		return ramp
	}
	lo := l.loLocked(hi)
	if lo == 0 { // nothing accepted in this search
		if l.refusals <= 1 && l.probe > 0 {
			return min(l.probe, hi-1)
		}
		return max(min(l.oneEvent, hi-1), 1) // one event at a time, then up
	}
	each := max(l.oneEvent-l.frame, 1)
	up := max(int(probeStep*float64(lo)), lo+each+each/8+1) // a step adds at least one event, of an event size or a little larger
	switch {
	case l.settled || l.refusals >= searchRefusals || up >= hi:
		return lo
	case l.refusals <= 1 && l.probe > up: // not tried yet: once it is accepted, a step reaches past it
		return min(l.probe, hi-1)
	}
	return up
}

// tooManyForServer reports whether a batch of n events is larger than any
// the server has accepted since New (R68): only then is its size the
// suspect; a batch no larger than one delivered waits for the window.
func (l *learnedLimits) tooManyForServer(n int) bool {
	return int64(n) > l.acceptedEvents.Load()
}

// applyLocked derives the limits and hands them to the queue: batches
// close at the size the search for the body limit tries next or settled
// on (bodyTargetLocked), and at the larger of half the fewest events
// refused with repeated 429s and the most delivered in one batch.
func (l *learnedLimits) applyLocked() {
	var events int
	body := l.bodyTargetLocked()
	if l.refusedEvents > 0 {
		events = max(int(l.acceptedEvents.Load()), (l.refusedEvents+1)/2)
	}
	learned := body
	if l.refusedBody == 0 {
		learned = 0 // the ramp's size is no limit of the server's
	}
	if int64(body) == l.target.Load() && int64(learned) == l.body.Load() && int64(events) == l.events.Load() {
		return
	}
	l.target.Store(int64(body))
	l.body.Store(int64(learned))
	l.events.Store(int64(events))
	maxBytes, flushAt := l.maxBytes, l.flushAt
	if body > 0 {
		maxBytes = min(maxBytes, max(body-l.frame, 1))
	}
	if events > 0 {
		flushAt = min(flushAt, events)
	}
	l.q.setBudget(maxBytes, flushAt)
}

// tooLarge reports whether b should be cut before it is sent: it has
// several events and is over a learned limit (R67, R68). A batch taken
// before the limit was learned, or waiting for a retry, is one; a half of
// a split is not, unless its body is over the size batches close at (a
// half of a batch sent before a 413 lowered it): it would be refused (R3,
// R66, R68).
func (l *learnedLimits) tooLarge(b *batch) bool {
	if b.Len() < 2 {
		return false
	}
	if n := l.eventLimit(); n > 0 && b.Len() > n && !b.cut {
		return true
	}
	body := l.closeAt()
	return body > 0 && l.size(b) > body
}

// fitting is where b, over a learned limit, is cut before it is sent
// (R67, R68): after the most events whose body fits the body limit, at
// least one; in halves when only the event limit binds (the first half is
// looked at again).
func (l *learnedLimits) fitting(b *batch) int {
	body := l.closeAt()
	if body == 0 || l.size(b) <= body {
		return max(b.Len()/2, 1)
	}
	return max(b.within(body-l.frame, l.perEvent), 1) // room for the events, their commas and what the body adds to each
}
