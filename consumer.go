package analytics

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/relaykit/analytics-go/internal/guard"
)

// The consumers and their last step: a consumer takes a batch, makes one
// attempt and acts on its verdict; the settler then gives each event its
// disposition, runs the callbacks and keeps the client's counters.

// consumer is one upload goroutine. It takes the next batch — one that is
// due in the waiting room first, then a new one from the queue — makes one
// attempt, and hands the verdict on: the batch is settled, or goes back to
// the waiting room and the consumer is free at once (R29). It holds a batch
// only between taking it and the end of its attempt.
type consumer struct {
	q         *queue
	room      *waitingRoom
	transport transport    // one attempt of a batch (request.go)
	bearer    string       // the OAuth Authorization header of the next attempt; "" without OAuth (R50)
	auth      *tokenSource // nil without OAuth (R50)
	settle    *settler
	policy    retryPolicy
	log       *zap.Logger
	interrupt context.Context // cancelled when Close's deadline interrupts delivery
	retire    <-chan struct{} // closed when Close no longer needs consumers
	timer     *time.Timer
	probe     chan struct{}     // the probe this consumer holds after a deadline, nil if none (R64)
	onAttempt func(AttemptInfo) // WithAttemptHook; nil without
	limits    *learnedLimits    // what the server's refusals taught (ratelimit.go)
	trying    chan struct{}     // the turn of an untried body size this consumer holds, nil if none (R69)
	outage    *outageLog        // lines about a failing server (ratelimit.go)
	search    int64             // the search for the body limit during which the attempt was sent (R67)
}

// newConsumer is an upload goroutine of c, not started, that makes its
// attempts through t with policy's counted retries and reports each to
// onAttempt (WithAttemptHook; nil without).
func newConsumer(c *Client, t transport, policy retryPolicy, onAttempt func(AttemptInfo)) *consumer {
	return &consumer{
		q: c.q, room: c.room, transport: t, auth: c.auth, settle: c.settle,
		policy: policy, log: c.log, interrupt: c.interrupt, retire: c.retire, onAttempt: onAttempt,
		limits: c.limits, outage: c.outage,
	}
}

func (w *consumer) run() {
	w.timer = time.NewTimer(time.Hour)
	w.timer.Stop()
	for {
		b := w.nextBatch()
		if b == nil {
			return
		}
		w.attempt(b)
		w.settle.reportDrops(false)
	}
}

// nextBatch returns the next batch to send, or nil when the client shuts down.
// Nothing is taken while the rate-limit gate is shut (R32, R64); then
// batches that are due go before new ones, oldest due first (R47).
func (w *consumer) nextBatch() *batch {
	for {
		if w.interrupt.Err() != nil {
			return nil
		}
		now := time.Now()
		due, wait, gate := w.room.takeTurn(now, w.probe)
		w.settle.rateLimitExceeded(gate.expired)
		if gate.probe != nil {
			w.probe = gate.probe
		}
		if due != nil {
			return due
		}
		if gate.shut() {
			w.settle.stats.countRateLimitWait()
			if !w.room.waitAtGate(gate, w.timer, w.interrupt.Done()) {
				return nil
			}
			continue
		}
		mine, answer := w.limits.claim() // the turn of an untried size (R69)
		if answer != nil {
			// Only new batches wait for that answer: one in the waiting
			// room goes when it is due (R26, R61).
			if !w.sleepUntil(answer, wait) {
				return nil
			}
			continue
		}
		b, open := w.q.take(now)
		if b != nil {
			w.trying = mine
			return b
		}
		if mine != nil {
			w.limits.done(mine)
		}
		w.endProbe() // nothing to probe with: the gate opens for everyone
		if open >= 0 && (wait < 0 || open < wait) {
			wait = open
		}
		if !w.sleep(wait, w.retire) {
			return nil
		}
	}
}

// sleepUntil waits for answer, a batch put in the waiting room, d (until
// the next one there is due; d < 0: none waits), retire or shutdown; it
// reports false when the consumer must stop.
func (w *consumer) sleepUntil(answer chan struct{}, d time.Duration) bool {
	var due <-chan time.Time
	if d >= 0 {
		w.timer.Reset(d)
		defer w.timer.Stop()
		due = w.timer.C
	}
	select {
	case <-due:
	case <-answer:
	case <-w.room.ready:
	case <-w.retire:
		return false
	case <-w.interrupt.Done():
		return false
	}
	return true
}

// sleep waits until d has passed (d < 0: no limit), work may have arrived,
// or retire; it reports false when the consumer must stop. Every wait ends at
// shutdown (R37).
func (w *consumer) sleep(d time.Duration, retire <-chan struct{}) bool {
	var expired <-chan time.Time
	if d >= 0 {
		w.timer.Reset(d)
		defer w.timer.Stop()
		expired = w.timer.C
	}
	var work, due <-chan struct{}
	if retire != nil { // not at the gate: new work and due batches wake it
		work, due = w.q.ready, w.room.ready
	}
	select {
	case <-expired:
	case <-work:
	case <-due:
	case <-retire:
		return false
	case <-w.interrupt.Done():
		return false
	}
	return true
}

// attempt makes one attempt of b through the transport and passes b on as
// the verdict says, unless adapt takes it over to cut it (R66–R68). The
// loop around attempts is ours.
func (w *consumer) attempt(b *batch) {
	defer w.endProbe() // the probe's answer is in (or it was never sent): R64
	defer w.endTry()   // likewise for a body of an untried size: R69
	// readyToSend: a batch over a learned limit is cut before it is sent (R67,
	// R68); one of an untried size waits for the one on the wire (R69).
	if !w.readyToSend(b) || !w.passGate(b) || !w.authorize(b) {
		return
	}
	if w.interrupt.Err() != nil {
		// Close interrupted delivery while b waited (for its turn, the
		// gate or a token): no request after that (R38, R39).
		w.settle.handBack(b, nil)
		return
	}
	if b.sendingRetry() {
		w.settle.stats.countRetry()
	}
	ctx, cancel := context.WithTimeout(w.interrupt, w.policy.httpTimeout) // R8
	start := w.startAttempt()
	r := w.transport.attempt(ctx, b, w.bearer)
	cancel()
	w.observe(b, start, r)
	b.attempted()
	w.settle.stats.countRequest()
	now := time.Now()
	if r.cause != nil && w.interrupt.Err() != nil {
		w.settle.handBack(b, r.cause) // cancelled on the wire: the server may have it (R40)
		return
	}

	if r.reauth {
		w.auth.invalidate(w.bearer) // R50
	}
	if r.outcome != outcomeDelivered {
		b.lastErr = r.err
	}
	if r.cause == nil && r.outcome != outcomeRateLimited {
		w.endEpisode() // R34: an answer without a wait; a transport error is no answer
	}
	if r.retried() && w.policy.retriesEnded() {
		w.settle.failed(b, b.lastErr) // Close waits for no retry (shared.Compat FastClose)
		return
	}
	if w.adapt(b, r, now) { // R66–R68: learned limits, cuts (below)
		return
	}
	switch r.outcome {
	case outcomeDelivered:
		line := w.room.succeeded(now) // R60–R62
		w.settle.delivered(b)
		w.outage.write(line) // R51
	case outcomeFailed, outcomeTooLarge, outcomePoison: // one event, or a batch adapt did not take over
		w.settle.failed(b, b.lastErr)
	case outcomeRateLimited:
		w.settle.stats.countRateLimited()
		opened, expired, ok := w.room.rateLimited(now, r.delay, b) // R31, R32
		if opened {
			w.log.Debug("rate-limit episode started", zap.Int("status", r.status), durationField("retryAfter", r.delay)) // R51
		}
		w.settle.rateLimitExceeded(expired) // R35; b among them
		if !ok {
			w.settle.handBack(b, nil)
		}
	case outcomeRetry, outcomeTooMany:
		w.retryLater(b, now)
	}
}

// endProbe gives up the probe this consumer holds, if any (R64).
func (w *consumer) endProbe() {
	if w.probe != nil {
		w.room.endProbe(w.probe)
		w.probe = nil
	}
}

// passGate checks the shared gate right before sending (R32, R64): if
// another consumer's response shut it since b was taken, b goes back to the
// waiting room (no attempt was made, nothing is counted) and passGate
// returns false. When this look ends an episode that ran out (R35), the
// batches that waited for it fail first, and the gate is looked at again
// after their OnError has returned: a callback may take long, and another
// consumer's usable Retry-After may have shut the gate meanwhile.
func (w *consumer) passGate(b *batch) bool {
	for {
		now := time.Now()
		g := w.room.gate(now, w.probe)
		if g.probe != nil {
			w.probe = g.probe
		}
		if len(g.expired) > 0 {
			w.settle.rateLimitExceeded(g.expired)
			continue
		}
		if !g.shut() {
			return true
		}
		w.park(b, now)
		return false
	}
}

// retryLater schedules a counted retry of b (R26–R28, R61), or fails it
// when a budget is spent.
func (w *consumer) retryLater(b *batch, now time.Time) {
	if spent := w.policy.spent(b.retries, b.failingFor(now)); spent != nil {
		w.settle.failed(b, b.budgetError(spent))
		return
	}
	k, healthy, line := w.room.failed(b, now) // R61: k restarts at every 2xx to anyone
	d := w.policy.retryWait(b.retries, k, healthy)
	b.scheduleRetry()
	w.park(b, now.Add(d))
	w.outage.write(line) // R51
}

// authorize sets the Authorization header of b's next attempt to the
// current bearer token (R50) and reports true. Without a token it puts b
// in the waiting room until one arrives and reports false; when the token
// source failed for good, b fails with that *OAuthError. Without OAuth it
// does nothing.
func (w *consumer) authorize(b *batch) bool {
	if w.auth == nil {
		return true
	}
	now := time.Now()
	header, due, failed := w.auth.token(now)
	if header != "" {
		b.awaitToken = false
		w.bearer = header
		return true
	}
	if failed != nil {
		b.awaitToken = false
		w.settle.failed(b, failed)
		return false
	}
	b.awaitToken = true
	if !w.room.wait(b, due) {
		w.settle.handBack(b, nil)
		return false
	}
	// The token may have arrived between the look above and the wait, its
	// wake-up finding no batch: look again, so b does not sleep until due.
	if header, _, failed := w.auth.token(time.Now()); header != "" || failed != nil {
		w.room.reschedule(time.Now(), awaitsToken)
	}
	return false
}

func (w *consumer) endEpisode() {
	if w.room.endEpisode() {
		w.log.Debug("rate-limit episode ended")
	}
}

// AttemptInfo describes one HTTP attempt to upload a batch, as passed to
// the WithAttemptHook function.
type AttemptInfo struct {
	// Events is the number of events in the batch.
	Events int
	// Bytes is the size of the request body as sent: compressed when
	// WithGzip is on.
	Bytes int
	// Retry is the number of earlier attempts of the same batch (the
	// X-Retry-Count header of this attempt; 0 for the first).
	Retry int
	// Status is the HTTP status received, or 0 when no response arrived
	// (then Err is set).
	Status int
	// Duration is the time from the start of the request to the end of
	// reading the response (or to the error).
	Duration time.Duration
	// Err is the error of an attempt that received no status: a network
	// error, the per-attempt timeout (WithHTTPTimeout) or the cancellation
	// by Close. It is nil when Status is set, whatever the status.
	Err error
}

// startAttempt returns the start time of an attempt, or the zero time
// without a hook.
func (w *consumer) startAttempt() time.Time {
	if w.onAttempt == nil {
		return time.Time{}
	}
	return time.Now()
}

// observe reports an attempt of b (before b.attempts counts it) to the
// hook, if any.
func (w *consumer) observe(b *batch, start time.Time, r attemptResult) {
	if w.onAttempt == nil {
		return
	}
	info := AttemptInfo{Events: b.Len(), Bytes: r.sent, Retry: b.attempts,
		Duration: time.Since(start), Err: r.cause, Status: r.status}
	defer func() {
		if p := recover(); p != nil {
			guard.Caught(w.log, userHook, p)
		}
	}()
	w.onAttempt(info)
}

// readyToSend reports whether b may be sent now. A body larger than any the
// server has accepted waits until no other such body is on the wire (R69),
// and is then looked at again, since that body's answer may have taught a
// limit; the consumer holds the batch meanwhile, at most one attempt long.
// Close's interruption ends the wait and hands b back. Once b may go, it
// is cut down to the learned limits (fit).
func (w *consumer) readyToSend(b *batch) bool {
	for {
		mine, wait := w.trying, (chan struct{})(nil) // the turn claimed with b, if any
		if mine == nil {
			mine, wait = w.limits.try(w.limits.size(b))
		}
		if wait == nil {
			w.trying = mine
			w.search = w.limits.searches.Load()
			w.fit(b)
			if w.trying == nil && !w.limits.tried(w.limits.size(b)) {
				// A 413 came since try: b's size is untried now, and
				// goes alone (R69). (A search is counted after its
				// limit is stored, so when w.search is that search's,
				// tried sees the limit.)
				continue
			}
			if w.trying != nil && w.limits.tried(w.limits.size(b)) {
				w.endTry() // what is left of b is of a size the server took: others need not wait
			}
			return true
		}
		select {
		case <-wait:
		case <-w.interrupt.Done():
			w.settle.handBack(b, nil)
			return false
		}
	}
}

// endTry gives up the turn of an untried size this consumer holds, if any
// (R69).
func (w *consumer) endTry() {
	if w.trying != nil {
		w.limits.done(w.trying)
		w.trying = nil
	}
}

// adapt looks at the verdict on b's attempt before it is settled: it
// learns from deliveries and bodies too large (R67, R68), and it takes
// over a batch of several events when a refusal as a whole (R66) or
// repeated "too many" answers without a wait (R68) call for halving,
// reporting true; then b is in the waiting room as two halves, or failed.
func (w *consumer) adapt(b *batch, r attemptResult, now time.Time) bool {
	if r.cause != nil {
		return false
	}
	size := r.plainSize // the body as encoded, before gzip
	estimate := w.limits.size(b)
	tooMany := b.countTooMany(r.outcome == outcomeTooMany)
	switch {
	case r.outcome == outcomeDelivered:
		w.limits.accepted(size, estimate, b.Len())
	case r.outcome == outcomeTooLarge && b.Len() > 1:
		w.limits.refusedSize(size, estimate, b.Len(), w.search)
		w.log.Debug("batch answered 413: sending it again in pieces of the size being tried", // R51
			zap.Int("events", b.Len()), zap.Int("bodyBytes", w.limits.bodyLimit()))
		// Instead of R3's halves, the batch waits, whole and due at once,
		// to be cut at the size the search tries next when it may be sent
		// (readyToSend).
		b.waitWhole()
		w.park(b, now)
		return true
	case r.outcome == outcomeTooLarge:
		w.limits.refusedOne(estimate) // a single event: it fails (R3)
	case r.outcome == outcomePoison && b.Len() > 1:
		return w.isolate(b, now)
	case r.outcome == outcomeTooMany:
		if tooMany >= 2 && b.Len() > 1 && w.limits.tooManyForServer(b.Len()) {
			return w.splitTooMany(b, now)
		}
	}
	return false
}

// How a consumer cuts a batch (docs/delivery.md R3, R66–R68). Every cut
// keeps the events in order and carries the batch's attempts and budgets
// on to both pieces (cutAt, queue.go):
//
//   - before sending, a batch over a learned limit (ratelimit.go) is cut down
//     to it, and the rest waits its turn (fit);
//   - after a 400 on a batch of several events, it is halved until the
//     events at fault are alone, within a request budget (isolate, R66);
//   - after a second 429 in a row without a usable Retry-After, it is
//     halved as its counted retry (splitTooMany, R68).

// fit cuts b down before it is sent while it is over a learned limit (R67,
// R68): b keeps its first events, as many as the limit allows, and the
// rest goes to the waiting room, due at once, to be looked at again when
// its turn comes. A batch whose body is over the limit is cut only by the
// consumer that may send a body of an untried size (readyToSend), so the piece
// it sends is the size the search tries next.
func (w *consumer) fit(b *batch) {
	for w.limits.tooLarge(b) {
		now := time.Now()
		k := w.limits.fitting(b)
		if b.attempts > 0 {
			w.settle.stats.countRecut()
		}
		w.log.Debug("batch over the learned limit: sending it in pieces", zap.Int("events", b.Len()), zap.Int("first", k))
		_, rest := cutAt(b, k)
		w.park(rest, now)
	}
}

// isolate answers a 400 on a batch of several events (R66): the server
// refused the whole request for what may be one event, so the batch is
// halved, both halves due at once, until the events at fault fail alone,
// while the budget of the first refused batch lasts. Without budget the
// batch fails whole, as it would have without this rule.
func (w *consumer) isolate(b *batch, now time.Time) bool {
	started, ok := b.takeIsolation()
	if started {
		w.log.Debug("batch answered 400: halving it until the events at fault are alone", zap.Int("events", b.Len()))
	}
	if !ok {
		return false
	}
	w.settle.stats.countIsolation()
	w.splitAndPark(b, now, now)
	return true
}

// splitTooMany answers the second 429 in a row without a usable
// Retry-After on a batch larger than any delivered since (R68): the batch
// is halved and the halves wait the first counted delay, each with its own
// jitter. This is the batch's counted retry: both halves carry it, and
// when a budget is spent the batch fails as R27 and R28 say.
func (w *consumer) splitTooMany(b *batch, now time.Time) bool {
	if w.policy.spent(b.retries, b.failingFor(now)) != nil {
		return false // retryLater fails it with the budget's reason
	}
	w.limits.refusedCount(b.Len())
	_, _, line := w.room.failed(b, now) // a counted failure, for the server's health (R60, R61)
	first := b.retries
	b.scheduleRetry()
	if !b.cut { // one line per refused batch, not one per piece (R51)
		w.log.Debug("batch answered 429 twice without Retry-After: sending it again as two halves",
			zap.Int("events", b.Len()))
	}
	w.splitAndPark(b, now.Add(w.policy.firstDelay(first)), now.Add(w.policy.firstDelay(first)))
	w.outage.write(line) // R51
	return true
}

// splitAndPark halves b, refused as a whole (R3, R66, R68), marks it cut
// and puts the halves in the waiting room, the first due at d1 and the
// second at d2.
func (w *consumer) splitAndPark(b *batch, d1, d2 time.Time) {
	b.cut = true
	first, second := halve(b)
	w.park(first, d1)
	w.park(second, d2)
}

// park puts b in the waiting room, due at due; a batch that finds the room
// closed (Close handed everything back) is handed back.
func (w *consumer) park(b *batch, due time.Time) {
	if !w.room.wait(b, due) {
		w.settle.handBack(b, nil)
	}
}

// settler gives every accepted event its one disposition (R42): delivered,
// failed or handed back. It runs the callback first and discharges the
// ledger after it, so a Flush that returns has seen the callbacks of its
// events; then the events' slab holds are released. It also keeps the
// client's counters. Safe for concurrent use.
type settler struct {
	log       *zap.Logger
	onSuccess func([]Message)
	onError   func(error, []Message)
	q         *queue   // its ledger is discharged once per event
	capacity  int      // QueueCapacity, for the drop warning
	disk      *durable // durable mode: outcomes are acknowledged on disk; nil otherwise
	// keep: durable mode, and the disk buffer holds what is handed back
	// (Close clears it when its last sync fails): hand-backs get no callback.
	keep atomic.Bool

	stats counters

	// inSuccess and inError count the events whose OnSuccess or OnError
	// call has not returned yet, for Close's error.
	inSuccess, inError atomic.Int64

	dropMu    sync.Mutex
	dropsSeen rejections // rejections already reported
	dropLast  time.Time  // last aggregated rejection warning
	// reportPending: a report of rejections is scheduled (see rejected).
	reportPending atomic.Bool
}

// newSettler returns the settler of a client: its callbacks (nil when not
// registered), the queue whose ledger it discharges, and QueueCapacity for
// the rejection warning.
func newSettler(log *zap.Logger, onSuccess func([]Message), onError func(error, []Message), q *queue, capacity int) *settler {
	return &settler{log: log, onSuccess: onSuccess, onError: onError, q: q, capacity: capacity}
}

// keepOnDisk puts the settler in durable mode: outcomes are acknowledged
// on disk, and hand-backs stay there without a callback (see keep).
func (s *settler) keepOnDisk(d *durable) {
	s.disk = d
	s.keep.Store(true)
}

// keepsOnDisk reports whether hand-backs stay on disk without a callback
// (durable mode, until Close's last sync fails).
func (s *settler) keepsOnDisk() bool { return s.disk != nil && s.keep.Load() }

// stopKeeping gives hand-backs their OnError again: the disk buffer could
// not be synced, so they are not safe on disk.
func (s *settler) stopKeeping() { s.keep.Store(false) }

// handedBack is the number of events handed back so far (Stats.HandedBack).
func (s *settler) handedBack() int64 { return s.stats.handedBack.Load() }

// inCallbacks is the number of events whose OnSuccess, and whose OnError,
// call has not returned yet.
func (s *settler) inCallbacks() (success, failure int64) {
	return s.inSuccess.Load(), s.inError.Load()
}

// delivered, failed and handBack end a batch: the caller must not use b
// after.

func (s *settler) delivered(b *batch) {
	s.stats.countBatch()
	s.batch(b, nil)
}

func (s *settler) failed(b *batch, err error) { s.batch(b, err) }

// handBack returns a batch at shutdown (R38): waiting, assembled, or
// cancelled in flight (then cause is the cancellation, R40).
func (s *settler) handBack(b *batch, cause error) {
	s.batch(b, b.handBackError(cause))
}

// batch settles b's events with err. A piece of a batch being isolated
// after a 400 (R66) logs no failure of its own: the isolation says in one
// line what its pieces came to, once the last has its outcome (R51).
func (s *settler) batch(b *batch, err error) {
	iso, n := b.isolation, len(b.events)
	s.settle(b.events, err, iso == nil)
	if iso != nil && iso.settled(n, err, errors.Is(err, ErrShutdownInterrupted)) {
		iso.report(s.log)
	}
	recycle(b)
}

// rateLimitExceeded fails batches whose rate-limit episode ran out (R35).
// They came out of the waiting room holding their places (expireLocked);
// each gives them back once its OnError has returned, so a producer does not
// fill QueueCapacity again beside events still in a callback (R43).
func (s *settler) rateLimitExceeded(bs []*batch) {
	if len(bs) == 0 {
		return
	}
	s.log.Debug("rate-limit episode exceeded MaxRateLimitDuration")
	for _, b := range bs {
		n := b.Len() // settling b may recycle it
		s.failed(b, b.budgetError(ErrRateLimitDurationExceeded))
		s.q.releasePlaces(n)
	}
}

// events settles evs with err (nil: delivered).
func (s *settler) events(evs []event, err error) { s.settle(evs, err, true) }

// settle settles evs with err (nil: delivered), with a log line for a
// failure when logFailure is set; a hand-back is not logged here: Close
// logs one line for all of them (R51). Counters move before the callback
// runs, so Close can count hand-backs whose callbacks are slow.
//
// In durable mode delivered and failed events are acknowledged on disk
// after their callback and before the ledger is discharged: a crash
// between the two repeats the callback at the next start, never loses it.
// Handed-back events stay on disk, and while keep holds they get no
// callback: they are not undelivered, the next client sends them and
// theirs is the callback (docs/delivery.md §7).
func (s *settler) settle(evs []event, err error, logFailure bool) {
	n := int64(len(evs))
	handedBack := errors.Is(err, ErrShutdownInterrupted)
	switch {
	case err == nil:
		s.stats.countDelivered(n)
		if s.onSuccess != nil {
			s.callback(&s.inSuccess, n, func() { s.onSuccess(s.messages(evs)) })
		}
	case handedBack:
		s.stats.countHandedBack(n)
		if s.onError != nil && !s.keep.Load() {
			s.callback(&s.inError, n, func() { s.onError(err, s.messages(evs)) })
		}
	default:
		s.stats.countFailed(n)
		if logFailure {
			s.log.Error("events not delivered", zap.Int64("events", n), zap.Error(err))
		}
		if s.onError != nil {
			s.callback(&s.inError, n, func() { s.onError(err, s.messages(evs)) })
		}
	}
	if s.disk != nil && !handedBack {
		s.disk.ack(evs)
	}
	s.q.discharge(evs)
	releaseEvents(evs)
}

// callback runs a user callback reporting n events, counted in running
// while it runs; a panic is logged, not propagated, so a consumer survives
// it (guard.go, internal/guard).
func (s *settler) callback(running *atomic.Int64, n int64, f func()) {
	running.Add(n)
	defer running.Add(-n)
	defer func() {
		if p := recover(); p != nil {
			guard.Caught(s.log, userCallback, p)
		}
	}()
	f()
}

// messages are the Messages a callback gets for evs. An event carries a
// copy made at enqueue only when OnSuccess is registered: a delivered event
// is the common case and a copy costs less than decoding (bench_test.go,
// BenchmarkCallbackMessages). Otherwise (OnError alone, and events replayed
// from disk) the message is rebuilt from the event's JSON here, while the
// JSON is still held: enqueue then costs what it costs without callbacks,
// and a held event is no larger. rebuildMessage says how a rebuilt message
// can differ from the caller's (WithOnError documents it). Our own JSON
// always decodes; should it not, the event is left out and logged.
func (s *settler) messages(evs []event) []Message {
	msgs := make([]Message, 0, len(evs))
	for i := range evs {
		m, err := evs[i].message()
		if err != nil {
			s.log.Error("cannot rebuild an event's message for a callback", zap.Error(err))
			continue
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// dropReportInterval is the minimum time between two aggregated warnings
// about rejected enqueue calls.
const dropReportInterval = 10 * time.Second

// dropReportDelay is how long a report waits after the first rejection of
// a quiet interval, so that a burst of rejections makes one line.
const dropReportDelay = time.Second

// rejected arranges the aggregated warning for a rejected enqueue call: the
// first rejection after a quiet interval schedules one report,
// dropReportDelay later (at most one per dropReportInterval), on a timer
// goroutine, never on the caller's. So rejections reach the logs even when
// no batch is being sent, and after Close. It does no I/O, and allocates
// only when it schedules; without a logger that logs warnings it does
// nothing.
func (s *settler) rejected() {
	if !s.log.Core().Enabled(zapcore.WarnLevel) || !s.reportPending.CompareAndSwap(false, true) {
		return
	}
	delay := dropReportDelay
	s.dropMu.Lock() // only when scheduling: at most once per interval
	if !s.dropLast.IsZero() {
		delay = max(delay, dropReportInterval-time.Since(s.dropLast))
	}
	s.dropMu.Unlock()
	time.AfterFunc(delay, func() {
		s.reportPending.Store(false)
		s.reportDrops(true)
	})
}

// reportDrops logs one warning for the rejections since the last one, with
// a count per reason, at most once per dropReportInterval unless final; it
// runs on consumers, on the timer rejected set and in Close, never on the
// caller's goroutine.
func (s *settler) reportDrops(final bool) {
	now := s.stats.rejections()
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	if now == s.dropsSeen || (!final && !s.dropLast.IsZero() && time.Since(s.dropLast) < dropReportInterval) {
		return
	}
	s.log.Warn("enqueue calls rejected; their events will not be sent", now.since(s.dropsSeen).logFields(s.capacity)...)
	s.dropsSeen, s.dropLast = now, time.Now()
}

// The client's counters, which the settler keeps, and Stats, the snapshot
// of them Client.Stats returns.

// Stats are cumulative counters of a Client, in events unless named
// otherwise. Read them with Client.Stats; safe for concurrent use.
type Stats struct {
	Delivered         int64 // events answered 2xx
	Failed            int64 // events reported to OnError as failed
	HandedBack        int64 // events handed back at shutdown (ErrShutdownInterrupted); in durable mode kept on disk, without a callback
	RejectedQueueFull int64 // enqueue calls rejected with ErrQueueFull
	Pending           int64 // accepted events without a disposition yet
	Batches           int64 // batches delivered
	Requests          int64 // HTTP attempts made
	Retries           int64 // counted retries sent (a retry cut off by Close is not counted)
	RateLimited       int64 // responses with a usable Retry-After
	RateLimitWaits    int64 // waits of a consumer at the closed rate-limit gate
	Isolations        int64 // batches answered 400 and sent again as two halves to isolate the events at fault (R66)

	// Limits learned from the server's refusals since New (R67, R68); 0
	// until one is learned. Batches close at or below them.
	BodyLimit  int64 // request body in bytes (uncompressed), after a 413
	EventLimit int64 // events per batch, after repeated 429s without Retry-After

	// Enqueue calls by outcome: each returns nil (Accepted) or exactly one
	// error, counted by reason (ErrQueueFull is RejectedQueueFull, above).
	Accepted         int64 // enqueue calls that returned nil
	RejectedInvalid  int64 // enqueue calls rejected with a *MessageError (ErrInvalidMessage)
	RejectedTooLarge int64 // enqueue calls rejected with ErrEventTooLarge
	RejectedClosed   int64 // enqueue calls rejected with ErrClosed
	RejectedDisk     int64 // enqueue calls rejected with a *DiskError (durable mode)

	// Durable mode only (WithDiskBuffer), found at New:
	Replayed    int64 // events an earlier client left in the disk buffer, sent first (less records found not to be events when read back: those are in DiskCorrupt)
	DiskTorn    int64 // torn records (a write cut short by a crash) skipped at New
	DiskCorrupt int64 // corrupt regions before valid records skipped at New, and replayed records that were not events
	DiskMissing int64 // segments lost from the directory (a gap in their numbers, or no valid header), found at New
	DiskSkipped int64 // directory entries named like disk buffer files that are not regular files, ignored at New

	// Durable mode: the disk as the buffer (QueueCapacity bounds memory,
	// WithDiskLimit what is accepted; see WithDiskBuffer).
	Spilled int64 // events accepted while memory was full (or events were already on disk only), written to the disk buffer only and read back later
	// DiskLost: accepted or replayed events whose records were found gone
	// from disk before they could be read back (their segment file
	// removed, replaced, cut short or overwritten by another process),
	// at any time, Close included. They are counted in Failed too and get
	// no callback (no message can be rebuilt from them); an error log
	// line names how many.
	DiskLost int64
	// OnDisk is not cumulative: the accepted and replayed events that are
	// on disk only now, waiting to be read back into memory. After Close
	// it is the number Close kept there for the next client (in memory or
	// on disk only before), counted in HandedBack and given no callback.
	OnDisk int64
	// DiskBytes is not cumulative either: what the disk buffer's files take
	// now (the active segment at its preallocated size), which
	// WithDiskLimit bounds; 0 after Close.
	DiskBytes int64
}

// counters are the client's cumulative counters behind Stats, and a few
// kept for tests and logs only. Safe for concurrent use.
type counters struct {
	delivered, failed, handedBack, dropped atomic.Int64
	batches, requests, retries             atomic.Int64
	rateLimited, rateLimitWaits            atomic.Int64
	isolations                             atomic.Int64
	recuts                                 atomic.Int64 // cuts of an attempted batch before it is sent again (R67); not in Stats

	rejectedInvalid, rejectedTooLarge, rejectedClosed atomic.Int64
	rejectedDisk                                      atomic.Int64

	// Durable mode (durable.go).
	replayed    atomic.Int64 // events an earlier client left, less those found not to be events
	spilled     atomic.Int64 // events accepted to disk only
	diskLost    atomic.Int64 // events on disk only whose record was gone when read back
	diskSkipped atomic.Int64 // replayed records with a valid checksum but no JSON object
}

// count counts the outcome of one enqueue call and returns err. An
// accepted call is counted where its event is queued or spilled instead
// (queue.accepted, countSpilled), under a lock that call holds anyway.
func (s *counters) count(err error) error {
	switch {
	case err == nil:
	case errors.Is(err, ErrQueueFull):
		s.dropped.Add(1)
	case errors.Is(err, ErrClosed):
		s.rejectedClosed.Add(1)
	case errors.Is(err, ErrEventTooLarge):
		s.rejectedTooLarge.Add(1)
	case errors.Is(err, ErrInvalidMessage):
		s.rejectedInvalid.Add(1)
	default:
		if _, ok := err.(*DiskError); ok {
			s.rejectedDisk.Add(1)
		}
	}
	return err
}

// snapshot is Stats as far as the counters tell it: pending is the
// accepted events without a disposition, queued the events queued by
// enqueue calls (queue.accepted; the calls whose event was spilled to disk
// only are counted here), bodyLimit and eventLimit the learned limits (0
// until learned); what the disk buffer itself tells is added by
// durable.addStats. The counters are read one by one.
func (s *counters) snapshot(pending, queued int64, bodyLimit, eventLimit int) Stats {
	return Stats{
		Delivered:         s.delivered.Load(),
		Failed:            s.failed.Load(),
		HandedBack:        s.handedBack.Load(),
		RejectedQueueFull: s.dropped.Load(),
		Pending:           pending,
		Batches:           s.batches.Load(),
		Requests:          s.requests.Load(),
		Retries:           s.retries.Load(),
		RateLimited:       s.rateLimited.Load(),
		RateLimitWaits:    s.rateLimitWaits.Load(),
		Isolations:        s.isolations.Load(),
		BodyLimit:         int64(bodyLimit),
		EventLimit:        int64(eventLimit),

		Accepted:         queued + s.spilled.Load(),
		RejectedInvalid:  s.rejectedInvalid.Load(),
		RejectedTooLarge: s.rejectedTooLarge.Load(),
		RejectedClosed:   s.rejectedClosed.Load(),
		RejectedDisk:     s.rejectedDisk.Load(),

		Replayed:    s.replayed.Load(),
		Spilled:     s.spilled.Load(),
		DiskLost:    s.diskLost.Load(),
		DiskCorrupt: s.diskSkipped.Load(), // durable.addStats adds the records the disk buffer found corrupt
	}
}

// rejections are the enqueue calls rejected, by reason.
type rejections struct {
	queueFull, invalid, tooLarge, closed, disk int64
}

func (s *counters) rejections() rejections {
	return rejections{
		queueFull: s.dropped.Load(),
		invalid:   s.rejectedInvalid.Load(),
		tooLarge:  s.rejectedTooLarge.Load(),
		closed:    s.rejectedClosed.Load(),
		disk:      s.rejectedDisk.Load(),
	}
}

// countBatch counts a batch delivered (Stats.Batches).
func (s *counters) countBatch() { s.batches.Add(1) }

// countDelivered counts n events delivered (Stats.Delivered).
func (s *counters) countDelivered(n int64) { s.delivered.Add(n) }

// countFailed counts n events failed (Stats.Failed).
func (s *counters) countFailed(n int64) { s.failed.Add(n) }

// countHandedBack counts n events handed back at shutdown (Stats.HandedBack).
func (s *counters) countHandedBack(n int64) { s.handedBack.Add(n) }

// countReplayed counts n events an earlier client left on disk (Stats.Replayed).
func (s *counters) countReplayed(n int64) { s.replayed.Add(n) }

// countNotEvents counts n replayed records that turned out not to be
// events: no longer replayed, they count as corrupt (Stats.DiskCorrupt).
func (s *counters) countNotEvents(n int64) {
	s.diskSkipped.Add(n)
	s.replayed.Add(-n)
}

// countSpilled counts an event accepted to disk only (Stats.Spilled).
func (s *counters) countSpilled() { s.spilled.Add(1) }

// countLost counts n events on disk only whose records were gone when read
// back: failed, without a callback (Stats.DiskLost, Stats.Failed).
func (s *counters) countLost(n int64) {
	s.diskLost.Add(n)
	s.failed.Add(n)
}

// countRetry counts a counted retry about to be sent (Stats.Retries).
func (s *counters) countRetry() { s.retries.Add(1) }

// countRequest counts an HTTP attempt made (Stats.Requests).
func (s *counters) countRequest() { s.requests.Add(1) }

// countRateLimited counts a response with a usable Retry-After.
func (s *counters) countRateLimited() { s.rateLimited.Add(1) }

// countRateLimitWait counts a consumer's wait at the closed rate-limit gate.
func (s *counters) countRateLimitWait() { s.rateLimitWaits.Add(1) }

// countIsolation counts a batch answered 400 and sent again as two halves.
func (s *counters) countIsolation() { s.isolations.Add(1) }

// countRecut counts a cut of an attempted batch before it is sent again.
func (s *counters) countRecut() { s.recuts.Add(1) }

// since is what was rejected after seen, by reason.
func (r rejections) since(seen rejections) rejections {
	return rejections{r.queueFull - seen.queueFull, r.invalid - seen.invalid, r.tooLarge - seen.tooLarge,
		r.closed - seen.closed, r.disk - seen.disk}
}

// logFields are the fields of the warning about these rejections: their
// total, and a count for every reason with any; capacity is QueueCapacity,
// named when the queue was full.
func (r rejections) logFields(capacity int) []zap.Field {
	fields := []zap.Field{zap.Int64("events", r.queueFull+r.invalid+r.tooLarge+r.closed+r.disk)}
	add := func(key string, n int64) {
		if n > 0 {
			fields = append(fields, zap.Int64(key, n))
		}
	}
	add("queueFull", r.queueFull)
	if r.queueFull > 0 {
		fields = append(fields, zap.Int("queueCapacity", capacity))
	}
	add("invalid", r.invalid)
	add("tooLarge", r.tooLarge)
	add("closed", r.closed)
	add("disk", r.disk)
	return fields
}
