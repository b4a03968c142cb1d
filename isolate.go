package analytics

import (
	"math"
	"math/bits"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// This file holds what the client learns from a server's refusals and how
// it cuts a batch to get past them (docs/delivery.md R66–R69):
//
//   - a 400 on a batch of several events: the batch is halved until the
//     events at fault are alone, within a request budget (R66);
//   - a 413: the client searches the body limit between the largest body
//     accepted and the smallest refused, and batches close at the size it
//     tries next, then at the largest accepted (R67);
//   - a batch answered 429 without a usable Retry-After twice in a row:
//     it is halved, and the smallest batch refused so and the largest one
//     delivered bound the number of events per batch from then on (R68);
//   - a body larger than any the server has accepted goes alone: the other
//     consumers wait for its answer before they send one (R69), so the
//     consumers search the limit together, one size at a time.

// maxFrame is the most a body adds around its events: the envelope, the
// longest sentAt and the write key (as encoded). Batches close at the
// learned body limit less this (R67).
func maxFrame(writeKey string) int {
	return len(`{"batch":[],"sentAt":"","writeKey":}`) + len("2006-01-02T15:04:05.999999999Z") +
		len(appendString(nil, writeKey))
}

// The search for a body limit (R67). A 413 costs a request and its round
// trip; a body smaller than the limit costs requests for the life of the
// client. So the search tries sizes between the largest body accepted and
// the smallest refused, as one request each, and may be refused
// searchRefusals times: while two refusals are left it tries the point
// probeWeight of the way from the largest accepted size (or one event's
// body, when none was accepted) to the refused one on a logarithmic scale;
// with one left, at most probeStep times the largest accepted, so that its
// refusal leaves the client within probeStep of the limit; with none left,
// or once the two sizes are within doneRatio of each other, batches close
// at the largest accepted size.
const (
	searchRefusals = 3
	probeWeight    = 0.55
	probeStep      = 1.2
	doneRatio      = 1.1
)

// limits is what the client has learned of the server's limits since New
// (R67, R68). It is shared by every consumer and read by Stats; it sets the
// queue's byte and event budgets when it learns something.
type limits struct {
	q        *queue
	frame    int // maxFrame of the write key
	flushAt  int // the configured FlushAt
	maxBytes int // the configured byte budget of a batch's events (R45)

	mu            sync.Mutex
	refusedBody   int  // smallest size (see size) answered 413 in this search; 0: none yet
	refusals      int  // 413s in this search
	oneEvent      int  // the size of a body of one event, as the refused batches average it
	asSent        bool // the search goes by the largest body accepted as sent, not as reckoned
	refusedEvents int  // fewest events in a batch split after repeated 429s (R68); 0: none yet

	acceptedEvents atomic.Int64  // most events in a batch answered 2xx since New (R68)
	acceptedSize   atomic.Int64  // largest size (see size) answered 2xx since New, or since the limit went down (R67, R69)
	acceptedBody   atomic.Int64  // the largest body as sent answered 2xx in the same time
	trying         chan struct{} // guarded by mu: a body of an untried size is on the wire; closed at its answer (R69)

	searches atomic.Int64 // searches begun since New: a 413 on a body sent during an earlier one counts in none

	body   atomic.Int64 // where batches close, in bytes; 0: no 413 yet (Stats.BodyLimit)
	events atomic.Int64 // learned events per batch; 0: none (Stats.EventLimit)
}

func newLimits(q *queue, writeKey string) *limits {
	return &limits{q: q, frame: maxFrame(writeKey), flushAt: q.flushAt, maxBytes: q.maxBytes}
}

// bodyLimit and eventLimit are the learned limits, 0 when none is known.
func (l *limits) bodyLimit() int  { return int(l.body.Load()) }
func (l *limits) eventLimit() int { return int(l.events.Load()) }

// size is how large b's body can be: its events, what the body adds to
// each (R59) and the most the frame adds. It is known before b is encoded.
func (l *limits) size(b *batch, perEvent int) int {
	return b.bytes + len(b.events)*perEvent + l.frame
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
func (l *limits) try(size int) (mine, wait chan struct{}) {
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
// (nothing accepted yet, or a search for the body limit going on), only
// the consumer holding the turn of an untried size takes one: claim then
// returns mine, the turn (given back with done), or wait, closed at the
// answer of the body on the wire, before which the caller takes nothing.
// The events stay in the queue meanwhile and are batched at what the
// answer teaches (R69). Otherwise both are nil.
func (l *limits) claim() (mine, wait chan struct{}) {
	if accepted := l.acceptedSize.Load(); accepted > 0 && l.body.Load() <= accepted {
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
// nothing but failures. Once a 413 has come, every size the server has not
// accepted goes alone, however small.
const untriedFloor = 16 << 10

// tried reports whether a body of the given size may go side by side with
// others (R69): the server accepted one at least as large, or no 413 has
// come yet and it is within untriedFloor.
func (l *limits) tried(size int) bool {
	return int64(size) <= l.acceptedSize.Load() || (size <= untriedFloor && l.body.Load() == 0)
}

// done gives back the turn try handed out, whatever the attempt's end.
func (l *limits) done(mine chan struct{}) {
	l.mu.Lock()
	if l.trying == mine {
		l.trying = nil
	}
	l.mu.Unlock()
	close(mine)
}

// accepted records a body answered 2xx: size bytes as sent, estimate as
// size reckons it before sending, n events.
func (l *limits) accepted(size, estimate, n int) {
	raise(&l.acceptedEvents, n)
	if l.body.Load() == 0 && l.events.Load() == 0 {
		// Nothing learned: nothing to search (the common case takes no lock).
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
	l.applyLocked()
}

// refusedSize records a multi-event body answered 413 (R67): size bytes as
// sent, estimate as size reckons it before sending, n events, sent during
// search number search.
func (l *limits) refusedSize(size, estimate, n int, search int64) {
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
		l.refusedBody, l.refusals = 0, 0
	case int64(estimate) <= l.acceptedSize.Load():
		// Refused, though no larger as reckoned than one accepted: the
		// frame of that one was shorter. Sizes as sent are safe.
		l.acceptedSize.Store(l.acceptedBody.Load())
		l.asSent = true
	}
	begins := l.refusedBody == 0
	if l.refusedBody == 0 || estimate < l.refusedBody {
		l.refusedBody = estimate
	}
	l.refusals++
	one := l.frame + (estimate-l.frame+n-1)/max(n, 1)
	if l.oneEvent == 0 || one < l.oneEvent {
		l.oneEvent = one
	}
	l.applyLocked()
	if begins {
		// A search begins: bodies already on the wire cost it nothing. It
		// is counted after the limit is stored, so that a consumer that
		// sees the new search also sees the limit (ready).
		l.searches.Add(1)
	}
}

// refusedOne records a body of one event answered 413 (R67): it cannot be
// cut, so it costs the search no refusal, but the server refuses bodies
// of its size (estimate, as size reckons it), so no batch that large
// follows. The first 413 begins a search.
func (l *limits) refusedOne(estimate int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refusedBody != 0 && estimate >= l.refusedBody {
		return
	}
	begins := l.refusedBody == 0
	l.refusedBody = estimate
	l.applyLocked()
	if begins {
		l.searches.Add(1) // after the limit is stored, as refusedSize says
	}
}

// refusedCount records a batch of n events split after repeated 429s
// (R68).
func (l *limits) refusedCount(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refusedEvents == 0 || n < l.refusedEvents {
		l.refusedEvents = n
	}
	l.applyLocked()
}

// bodyTargetLocked is the size at which batches close during and after a
// search for the body limit (R67): the next size to try, or the largest
// accepted when the search is over; 0 before any 413.
func (l *limits) bodyTargetLocked() int {
	hi := l.refusedBody
	if hi == 0 {
		return 0
	}
	// The largest body accepted, as reckoned; once one reckoned no larger
	// was refused (its sentAt was longer), as sent, which is safe whatever
	// the sentAt's length.
	lo := int(min(l.acceptedSize.Load(), int64(hi-1)))
	if l.asSent {
		lo = int(min(l.acceptedBody.Load(), int64(hi-1)))
	}
	floor := max(min(l.oneEvent, hi-1), 1) // one event's body: a batch of one event
	left := searchRefusals - l.refusals
	switch {
	case lo == 0 && left <= 1:
		return floor // nothing accepted and no refusal to spare: one event at a time
	case lo > 0 && (left <= 0 || float64(hi) <= doneRatio*float64(lo) || hi-lo <= l.oneEvent-l.frame):
		return lo
	}
	each := max(l.oneEvent-l.frame, 1)
	step := each + each/8 + 1 // a probe adds at least one event, of an event size or a little larger
	if left == 1 {
		return min(max(int(probeStep*float64(lo)), lo+step), hi-1)
	}
	from := max(lo, floor)
	p := int(math.Exp((1-probeWeight)*math.Log(float64(from)) + probeWeight*math.Log(float64(hi))))
	return min(max(p, lo+step), hi-1)
}

// tooManyForServer reports whether a batch of n events is larger than any
// the server has accepted since New (R68): only then is its size the
// suspect; a batch no larger than one delivered waits for the window.
func (l *limits) tooManyForServer(n int) bool {
	return int64(n) > l.acceptedEvents.Load()
}

// applyLocked derives the limits and hands them to the queue: batches
// close at the size the search for the body limit tries next or settled
// on (bodyTargetLocked), and at the larger of half the fewest events
// refused with repeated 429s and the most delivered in one batch.
func (l *limits) applyLocked() {
	var events int
	body := l.bodyTargetLocked()
	if l.refusedEvents > 0 {
		events = max(int(l.acceptedEvents.Load()), (l.refusedEvents+1)/2)
	}
	if int64(body) == l.body.Load() && int64(events) == l.events.Load() {
		return
	}
	l.body.Store(int64(body))
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
// a split is not: it goes out as cut (R3, R66, R68).
func (l *limits) tooLarge(b *batch, perEvent int) bool {
	if len(b.events) < 2 || b.cut {
		return false
	}
	if n := l.eventLimit(); n > 0 && len(b.events) > n {
		return true
	}
	body := l.bodyLimit()
	return body > 0 && l.size(b, perEvent) > body
}

// fitting is where b, over a learned limit, is cut before it is sent
// (R67, R68): after the most events whose body fits the body limit, at
// least one; in halves when only the event limit binds (the first half is
// looked at again).
func (l *limits) fitting(b *batch, perEvent int) int {
	body := l.bodyLimit()
	if body == 0 || l.size(b, perEvent) <= body {
		return max(len(b.events)/2, 1)
	}
	room, k := body-l.frame, 0 // room for the events, their commas and what the body adds to each
	for used := -1; k < len(b.events); k++ {
		used += len(b.events[k].data) + 1 + perEvent
		if used > room {
			break
		}
	}
	return max(k, 1)
}

// isolation is the request budget of a batch being halved after a 400
// (R66), shared by every piece of it, and what the pieces came to: the
// logs say it in one line once every piece has its outcome (R51), not a
// line per piece.
type isolation struct {
	left     atomic.Int64 // requests the pieces may still make
	requests atomic.Int64 // requests made: the refused one and the pieces'
	events   int          // in the refused batch

	mu        sync.Mutex
	pieces    int   // pieces without an outcome
	delivered int64 // events delivered
	failed    int64 // events failed
	err       error // the first failure's error
}

// newIsolation starts the isolation of b, refused with a 400.
func newIsolation(b *batch) *isolation {
	s := &isolation{events: len(b.events), pieces: 1}
	s.left.Store(isolationBudget(len(b.events)))
	s.requests.Store(1)
	return s
}

// settled records the outcome of a piece of n events (err nil: delivered;
// a hand-back counts as neither) and reports whether it was the last.
func (s *isolation) settled(n int, err error, handedBack bool) (last bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case handedBack:
	case err == nil:
		s.delivered += int64(n)
	default:
		s.failed += int64(n)
		if s.err == nil {
			s.err = err
		}
	}
	s.pieces--
	return s.pieces == 0
}

// report is the one line about an isolation that has ended (R51).
func (s *isolation) report(log *zap.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fields := []zap.Field{zap.Int64("events", s.failed), zap.Int("ofBatch", s.events),
		zap.Int64("delivered", s.delivered), zap.Int64("requests", s.requests.Load())}
	if s.failed == 0 {
		log.Debug("batch answered 400: its events were delivered once it was halved", fields...)
		return
	}
	log.Error("events not delivered", append(fields, zap.Error(s.err))...)
}

// isolationBudget is the number of requests the pieces of a batch of n
// events refused with a 400 may make: 4·⌈log₂ n⌉, enough to find two
// events at fault among any n (halving finds one in 2·⌈log₂ n⌉).
func isolationBudget(n int) int64 { return 4 * int64(bits.Len(uint(n-1))) }

// take spends the two requests of one more halving; false when the budget
// does not have them.
func (s *isolation) take() bool {
	for {
		left := s.left.Load()
		if left < 2 {
			return false
		}
		if s.left.CompareAndSwap(left, left-2) {
			return true
		}
	}
}

// ready reports whether b may be sent now. A body larger than any the
// server has accepted waits until no other such body is on the wire (R69),
// and is then looked at again, since that body's answer may have taught a
// limit; the consumer holds the batch meanwhile, at most one attempt long.
// Close's interruption ends the wait and hands b back. Once b may go, it
// is cut down to the learned limits (fit).
func (w *consumer) ready(b *batch) bool {
	if w.limits == nil {
		return true
	}
	for {
		mine, wait := w.trying, (chan struct{})(nil) // the turn claimed with b, if any
		if mine == nil {
			mine, wait = w.limits.try(w.limits.size(b, w.q.perEvent))
		}
		if wait == nil {
			w.trying = mine
			w.search = w.limits.searches.Load()
			w.fit(b)
			if w.trying == nil && !w.limits.tried(w.limits.size(b, w.q.perEvent)) {
				// A 413 came since try: b's size is untried now, and
				// goes alone (R69). (A search is counted after its
				// limit is stored, so when w.search is that search's,
				// tried sees the limit.)
				continue
			}
			if w.trying != nil && w.limits.tried(w.limits.size(b, w.q.perEvent)) {
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

// fit cuts b down before it is sent while it is over a learned limit (R67,
// R68): b keeps its first events, as many as the limit allows, and the
// rest goes to the waiting room, due at once, to be looked at again when
// its turn comes. A batch whose body is over the limit is cut only by the
// consumer that may send a body of an untried size (ready), so the piece
// it sends is the size the search tries next.
func (w *consumer) fit(b *batch) {
	for w.limits.tooLarge(b, w.q.perEvent) {
		now := time.Now()
		k := w.limits.fitting(b, w.q.perEvent)
		if b.attempts > 0 {
			w.settle.stats.recuts.Add(1)
		}
		w.log.Debug("batch over the learned limit: sending it in pieces", zap.Int("events", len(b.events)), zap.Int("first", k))
		_, rest := w.cutAt(b, k)
		if !w.room.wait(rest, now) {
			w.settle.handBack(rest, nil)
		}
	}
}

// adapt looks at the answer to b's attempt before it is settled: it
// learns from 2xx and 413 answers (R67, R68), and it takes over b when a
// 400 (R66) or repeated 429s without a usable Retry-After (R68) call for
// halving, reporting true; then b is in the waiting room as two halves,
// or failed.
func (w *consumer) adapt(b *batch, resp response, err error, v verdict, now time.Time) bool {
	if err != nil || w.limits == nil {
		return false
	}
	size := w.sender.plainSize // the body as encoded, before gzip
	estimate := w.limits.size(b, w.q.perEvent)
	switch {
	case v.outcome == outcomeDelivered:
		b.tooMany = 0
		w.limits.accepted(size, estimate, len(b.events))
	case resp.status == http.StatusRequestEntityTooLarge && len(b.events) > 1:
		b.tooMany = 0
		w.limits.refusedSize(size, estimate, len(b.events), w.search)
		w.log.Debug("batch answered 413: sending it again in pieces of the size being tried", // R51
			zap.Int("events", len(b.events)), zap.Int("bodyBytes", w.limits.bodyLimit()))
		// Instead of R3's halves, the batch waits, whole and due at once,
		// to be cut at the size the search tries next when it may be sent
		// (ready).
		b.rateLimited, b.retryPending, b.cut = false, false, false
		if !w.room.wait(b, now) {
			w.settle.handBack(b, nil)
		}
		return true
	case resp.status == http.StatusRequestEntityTooLarge:
		b.tooMany = 0
		w.limits.refusedOne(estimate) // a single event: it fails (R3)
	case resp.status == http.StatusBadRequest && v.outcome == outcomeFailed && len(b.events) > 1:
		b.tooMany = 0
		return w.isolate(b, now)
	case resp.status == http.StatusTooManyRequests && v.outcome == outcomeRetry:
		b.tooMany++
		if b.tooMany >= 2 && len(b.events) > 1 && w.limits.tooManyForServer(len(b.events)) {
			return w.splitTooMany(b, now)
		}
	default:
		b.tooMany = 0
	}
	return false
}

// isolate answers a 400 on a batch of several events (R66): the server
// refused the whole request for what may be one event, so the batch is
// halved, both halves due at once, until the events at fault fail alone,
// while the budget of the first refused batch lasts. Without budget the
// batch fails whole, as it would have without this rule.
func (w *consumer) isolate(b *batch, now time.Time) bool {
	if b.isolation == nil {
		b.isolation = newIsolation(b)
		w.log.Debug("batch answered 400: halving it until the events at fault are alone", zap.Int("events", len(b.events)))
	}
	if !b.isolation.take() {
		return false
	}
	w.settle.stats.isolations.Add(1)
	b.cut = true
	first, second := w.halve(b)
	w.park(first, second, now, now)
	return true
}

// splitTooMany answers the second 429 in a row without a usable
// Retry-After on a batch larger than any delivered since (R68): the batch
// is halved and the halves wait the first counted delay, each with its own
// jitter. This is the batch's counted retry: both halves carry it, and
// when a budget is spent the batch fails as R27 and R28 say.
func (w *consumer) splitTooMany(b *batch, now time.Time) bool {
	if b.firstFailure.IsZero() {
		b.firstFailure = now
	}
	if b.retries >= w.policy.maxRetries || now.Sub(b.firstFailure) >= w.policy.maxBackoffTotal {
		return false // retryLater fails it with the budget's reason
	}
	w.limits.refusedCount(len(b.events))
	_, _, line := w.room.failed(b, now) // a counted failure, for the server's health (R60, R61)
	first := b.retries
	b.retries++
	b.retryPending = true
	b.rateLimited = false
	if !b.cut { // one line per refused batch, not one per piece (R51)
		w.log.Debug("batch answered 429 twice without Retry-After: sending it again as two halves",
			zap.Int("events", len(b.events)))
	}
	b.cut = true
	h1, h2 := w.halve(b)
	w.park(h1, h2, now.Add(w.firstDelay(first)), now.Add(w.firstDelay(first)))
	w.outage.write(line) // R51
	return true
}

// firstDelay is the wait of a half after a split on repeated 429s (R68):
// the first counted delay (R26's d_1, its own jitter each call), or what
// the compatibility configuration sets for retry number retries.
func (w *consumer) firstDelay(retries int) time.Duration {
	if d, custom := w.policy.compatDelay(retries); custom {
		return d
	}
	return w.policy.delay(1)
}

// halve cuts b into two batches, the first half (len/2 events) staying in
// b; same events in the same order. The second carries on everything b
// carries: attempts (X-Retry-Count, R7), counted retries, first counted
// failure, failure streak (R61), flags, the last answer and the isolation
// budget.
// A split after an answer marks b cut first (R3, R66, R68); a cut before
// sending (fit) does not, so its halves are cut again if still too large.
func (w *consumer) halve(b *batch) (first, second *batch) {
	return w.cutAt(b, len(b.events)/2)
}

// cutAt cuts b into b.events[:mid], staying in b, and the rest, carried on
// as halve says.
func (w *consumer) cutAt(b *batch, mid int) (first, second *batch) {
	if b.isolation != nil {
		b.isolation.mu.Lock()
		b.isolation.pieces++
		b.isolation.mu.Unlock()
	}
	second = newBatch(len(b.events) - mid)
	second.events = append(second.events, b.events[mid:]...)
	clear(b.events[mid:])
	b.events = b.events[:mid]
	b.bytes = eventBytes(b.events)
	events := second.events
	*second = *b
	second.events, second.bytes = events, eventBytes(events)
	return b, second
}

// park puts the halves of a batch in the waiting room, first due at d1 and
// second at d2; a half that finds the room closed (Close handed everything
// back) is handed back.
func (w *consumer) park(first, second *batch, d1, d2 time.Time) {
	if !w.room.wait(first, d1) {
		w.settle.handBack(first, nil)
	}
	if !w.room.wait(second, d2) {
		w.settle.handBack(second, nil)
	}
}
