package analytics

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go/internal/guard"
)

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
	limits    *learnedLimits    // what the server's refusals taught (learned.go)
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
// returns false.
func (w *consumer) passGate(b *batch) bool {
	now := time.Now()
	g := w.room.gate(now, w.probe)
	w.settle.rateLimitExceeded(g.expired)
	if g.probe != nil {
		w.probe = g.probe
	}
	if !g.shut() {
		return true
	}
	w.park(b, now)
	return false
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
	defer guard.Contain(w.log, userHook, nil)
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
// on to both pieces (cutAt, batch.go):
//
//   - before sending, a batch over a learned limit (learned.go) is cut down
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
