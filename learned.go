package analytics

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/relaykit/analytics-go/internal/wire"
)

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
