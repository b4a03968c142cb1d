package analytics

import (
	"cmp"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go/internal/diskbuf"
	"github.com/relaykit/analytics-go/internal/wire"
)

const (
	// MaxBatchBytes is the largest request body the client sends (R45).
	MaxBatchBytes = 500_000

	// batchEventBytes is where a batch closes: its events (with separators
	// and, with WithEventSentAt, their sentAt) and the shared.Compat
	// BodyFields never exceed it, leaving room in MaxBatchBytes for the
	// rest of the frame (wire.Frame.Size).
	batchEventBytes = 475_000
)

// event is one accepted message with its JSON, encoded once at enqueue.
type event struct {
	msg   Message // the copy callbacks receive; nil unless OnSuccess is registered (see settler.messages)
	data  []byte
	slab  *wire.Slab // where data lives, released at the disposition; nil if data is its own
	epoch uint64     // ledger epoch at acceptance (see ledger)

	seg *diskbuf.Segment // durable mode: the record's segment (see durable.go); nil otherwise
	off uint32           // durable mode: the record's offset in seg
}

// message is the Message a callback gets for e: the copy made at enqueue,
// or, without one, a message rebuilt from e's JSON (see settler.messages).
func (e *event) message() (Message, error) {
	if e.msg != nil {
		return e.msg, nil
	}
	return rebuildMessage(e.data)
}

// batch is the unit of upload. Its events are fixed when it is taken from
// the queue and travel intact through every retry and every stay in the
// waiting room (R3).
type batch struct {
	events []event
	bytes  int // encoded events plus separators (R45)

	attempts     int        // attempts made; X-Retry-Count of the next one (R7)
	retries      int        // counted retries scheduled (R27)
	retryPending bool       // the next attempt is a counted retry (counted in Stats when sent)
	rateLimited  bool       // waits for a Retry-After deadline, not for its backoff (R35)
	awaitToken   bool       // waits for an OAuth access token (R50)
	streakFrom   uint64     // the server's 2xx count (health.successes) when the streak began (R61)
	streak       int        // counted failures since the server last answered 2xx (R61)
	firstFailure time.Time  // first counted failure, monotonic (R28)
	lastErr      error      // last *HTTPError or *TransportError
	tooMany      int        // 429s without a usable Retry-After in a row (R68)
	isolation    *isolation // request budget of a 400 being isolated (R66); nil if none
	cut          bool       // a half of a split (R3, R66, R68): sent as it is
}

// scheduleRetry counts a counted retry of b (R27), which it waits for in
// the waiting room: its next attempt is a retry (see sendingRetry), and it
// no longer waits for a Retry-After deadline.
func (b *batch) scheduleRetry() {
	b.retries++
	b.retryPending = true
	b.rateLimited = false
}

// sendingRetry reports whether the attempt about to be sent is a counted
// retry (to be counted in Stats.Retries), once.
func (b *batch) sendingRetry() bool {
	retry := b.retryPending
	b.retryPending = false
	return retry
}

// countedRetry reports whether b waits for a counted retry (its backoff),
// not for a Retry-After deadline.
func (b *batch) countedRetry() bool { return b.retryPending && !b.rateLimited }

// countFailure counts a counted failure of b and returns its streak, the
// counted failures since the server last answered 2xx to any batch (R61):
// successes is the server's 2xx count now, and a streak that began at
// another count starts again.
func (b *batch) countFailure(successes uint64) int {
	if b.streakFrom != successes {
		b.streakFrom, b.streak = successes, 0
	}
	b.streak++
	return b.streak
}

// attempted counts an attempt of b just made: X-Retry-Count of the next
// (R7), and a request of the isolation budget b is part of (R66).
func (b *batch) attempted() {
	b.attempts++
	if b.isolation != nil {
		b.isolation.requests.Add(1)
	}
}

// takeIsolation takes one request of the budget of b's isolation after a
// 400 (R66), starting the isolation (started) if b is not part of one yet;
// ok is false when the budget is spent.
func (b *batch) takeIsolation() (started, ok bool) {
	if b.isolation == nil {
		b.isolation, started = newIsolation(b), true
	}
	return started, b.isolation.take()
}

// halve cuts b into two batches, the first half (len/2 events) staying in
// b; same events in the same order. The second carries on everything b
// carries: attempts (X-Retry-Count, R7), counted retries, first counted
// failure, failure streak (R61), flags, the last answer and the isolation
// budget.
// A split after an answer marks b cut first (R3, R66, R68); a cut before
// sending (fit) does not, so its halves are cut again if still too large.
func halve(b *batch) (first, second *batch) {
	return cutAt(b, len(b.events)/2)
}

// cutAt cuts b into b.events[:mid], staying in b, and the rest, carried on
// as halve says.
func cutAt(b *batch, mid int) (first, second *batch) {
	if b.isolation != nil {
		b.isolation.addPiece()
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

// handBackError is the error of b's events when b is handed back at
// shutdown (R38): b's last error, or cause when the attempt in flight was
// cancelled (R40), with b's attempts.
func (b *batch) handBackError(cause error) *DeliveryError {
	return handBackError(cmp.Or(cause, b.lastErr), b.attempts)
}

// countTooMany counts a 429 without a usable Retry-After on b (tooMany),
// or ends the run of them on any other answer, and returns how many came
// in a row (R68).
func (b *batch) countTooMany(tooMany bool) int {
	if tooMany {
		b.tooMany++
	} else {
		b.tooMany = 0
	}
	return b.tooMany
}

// waitWhole readies b, refused as too large, to wait whole for its cut at
// the size tried next (R67): it is then neither a counted retry nor waiting
// for a Retry-After deadline, nor a piece to be sent as it is.
func (b *batch) waitWhole() {
	b.rateLimited, b.retryPending, b.cut = false, false, false
}

// failingFor is how long b has been failing at now: since its first
// counted failure (R28), which is now if it has none yet.
func (b *batch) failingFor(now time.Time) time.Duration {
	if b.firstFailure.IsZero() {
		b.firstFailure = now
	}
	return now.Sub(b.firstFailure)
}

// budgetError is the error of b's events when a budget ends its retries
// (R27, R28, R35): reason, with b's last error and attempts.
func (b *batch) budgetError(reason error) *DeliveryError {
	return deliveryError(reason, b.lastErr, b.attempts)
}

// awaitsToken picks the batches that wait for an OAuth token (R50).
func awaitsToken(b *batch) bool { return b.awaitToken }

// batches keeps ended batches for reuse: a batch's event slice (FlushAt
// entries) would otherwise be allocated again for every batch.
var batches sync.Pool

func newBatch(capacity int) *batch {
	if b, ok := batches.Get().(*batch); ok && cap(b.events) >= capacity {
		return b
	}
	return &batch{events: make([]event, 0, capacity)}
}

// recycle returns an ended batch (every event has its disposition) to the
// pool.
func recycle(b *batch) {
	clear(b.events) // drop the messages for the collector
	*b = batch{events: b.events[:0]}
	batches.Put(b)
}

// weight is what an event whose JSON is data takes in a body: its JSON,
// one comma and what the body adds to each event (perEvent: the per-event
// sentAt, R59). The events of a body take the sum of their weights less
// one comma; the queue's byte count (R45), batch.bytes (with perEvent 0),
// learnedLimits.size and fitting all count so.
func weight(data []byte, perEvent int) int { return len(data) + 1 + perEvent }

// within is how many of b's first events fit in room bytes of a body,
// with their commas and perEvent bytes each (see weight).
func (b *batch) within(room, perEvent int) int {
	k := 0
	for used := -1; k < len(b.events); k++ {
		used += weight(b.events[k].data, perEvent)
		if used > room {
			break
		}
	}
	return k
}

// eventBytes is what evs take in a body before the per-event extra: their
// JSON and the commas between them (batch.bytes).
func eventBytes(evs []event) int {
	n := 0
	for i := range evs {
		n += weight(evs[i].data, 0)
	}
	return max(n-1, 0)
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

// addPiece counts one more piece: a piece of the isolated batch was cut
// in two.
func (s *isolation) addPiece() {
	s.mu.Lock()
	s.pieces++
	s.mu.Unlock()
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

// Len, JSON and Bytes make b the wire.Events of its body.
func (b *batch) Len() int { return len(b.events) }

// JSON is the JSON of event i.
func (b *batch) JSON(i int) []byte { return b.events[i].data }

// Bytes is b.bytes: the events' JSON and the commas between them.
func (b *batch) Bytes() int { return b.bytes }

// releaseEvents gives back the slab holds of evs, one atomic step per run
// of events from the same slab. Their JSON must not be read after it.
func releaseEvents(evs []event) {
	var cur *wire.Slab
	var n int32
	for i := range evs {
		if sl := evs[i].slab; sl != cur {
			if cur != nil {
				cur.Release(n)
			}
			cur, n = sl, 0
		}
		n++
		evs[i].slab = nil
	}
	if cur != nil {
		cur.Release(n)
	}
}
