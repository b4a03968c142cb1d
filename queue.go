package analytics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// event is one accepted message with its JSON, encoded once at enqueue.
type event struct {
	msg   Message
	data  []byte
	slab  *slab  // where data lives, released at the disposition; nil if data is its own
	epoch uint64 // ledger epoch at acceptance (see ledger)
}

// batch is the unit of upload. Its events are fixed at its first attempt
// and travel intact through retries and re-queues (R3).
type batch struct {
	events []event
	bytes  int // encoded events plus separators (R45)

	attempts     int                         // attempts made; X-Retry-Count of the next one (R7)
	retries      int                         // counted retries used (R27)
	backoff      *backoff.ExponentialBackOff // created at the first counted failure (R26)
	firstFailure time.Time                   // first counted failure, monotonic (R28)
	lastErr      error                       // last *HTTPError or *TransportError
	lastStatus   int                         // last HTTP status received, 0 if none
	// episode is the rate-limit episode under which the batch was re-queued;
	// 0 once it has been re-sent. See rateLimitGate.doomed.
	episode uint64
}

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

// queue is the one structure shared by Track and the consumers: a bounded
// FIFO of accepted events, the re-queued batches that go before it, and the
// ledger that Flush and Close wait on. One mutex guards it all; producers
// never send on a channel that Close closes.
type queue struct {
	mu       sync.Mutex
	ring     []event // FIFO of events not yet taken into a batch
	head, n  int
	capacity int
	maxRing  int // capacity + FlushAt: the most events the ring can hold
	// openRoom is how many more events the batch being assembled can take
	// (0 while no consumer assembles). Those events are as good as taken by
	// a consumer, so they do not count against capacity (R43).
	openRoom int
	requeued []*batch // rate-limited batches; taken before any event (R32, R47)
	closed   bool     // Close was called: enqueue returns ErrClosed
	dead     bool     // Close handed everything back: nothing may enter any more
	// wake: the assembler waits for events. A push wakes it only when the
	// open batch could now be closed (wakeN events or more than wakeBytes
	// bytes waiting) or is empty (its interval starts with its first
	// event), not for every event.
	wake        bool
	wakeN       int
	wakeBytes   int
	queuedBytes int // encoded size of the waiting events, a comma each
	ledger      ledger

	spaceFreed   chan struct{} // closed and replaced when events leave the queue and someone waits for room
	spaceWaiters int

	eventsReady  chan struct{} // cap 1: an event arrived or a flush was asked for
	requeueReady chan struct{} // cap 1: a batch was re-queued
}

func newQueue(capacity, flushAt int) *queue {
	initial := 64
	if capacity+flushAt < initial {
		initial = capacity + flushAt
	}
	return &queue{
		ring:         make([]event, initial),
		capacity:     capacity,
		maxRing:      capacity + flushAt,
		openRoom:     flushAt, // the first consumer starts assembling at once
		ledger:       newLedger(),
		eventsReady:  make(chan struct{}, 1),
		requeueReady: make(chan struct{}, 1),
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// push accepts ev or returns ErrClosed / ErrQueueFull (R43). It never blocks
// on anything but the mutex.
func (q *queue) push(ev event) error {
	q.mu.Lock()
	return q.pushLocked(ev)
}

// pushWait is push that waits for room until ctx ends (the blocking mode
// of EnqueueContext).
func (q *queue) pushWait(ctx context.Context, ev event) error {
	for {
		q.mu.Lock()
		if q.closed || !q.fullLocked() {
			return q.pushLocked(ev)
		}
		if q.spaceFreed == nil {
			q.spaceFreed = make(chan struct{})
		}
		freed := q.spaceFreed
		q.spaceWaiters++
		q.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
		}
		q.mu.Lock()
		q.spaceWaiters--
		q.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrQueueFull, err)
		}
	}
}

// pushLocked is called with q.mu held and releases it.
func (q *queue) pushLocked(ev event) error {
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	if q.fullLocked() {
		q.mu.Unlock()
		return ErrQueueFull
	}
	if q.n == len(q.ring) {
		q.grow()
	}
	ev.epoch = q.ledger.add(1)
	q.ring[(q.head+q.n)%len(q.ring)] = ev
	q.n++
	q.queuedBytes += len(ev.data) + 1
	wake := q.wake && (q.n >= q.wakeN || q.queuedBytes > q.wakeBytes)
	if wake {
		q.wake = false
	}
	q.mu.Unlock()
	if wake {
		signal(q.eventsReady)
	}
	return nil
}

func (q *queue) grow() {
	size := len(q.ring) * 2
	if size > q.maxRing {
		size = q.maxRing
	}
	ring := make([]event, size)
	for i := 0; i < q.n; i++ {
		ring[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.ring, q.head = ring, 0
}

// fill moves waiting events into b until it holds flushAt events or the next
// event would take it past maxBytes (R45, R46). It reports whether b is
// full, and whether b must close without waiting for its interval: a Flush
// or Close was asked for after its first event was accepted. When it
// returns neither, the caller waits on eventsReady. With closing, the
// caller closes b whatever fill returns (its interval ended): fill then
// only takes what arrived since the last wake.
func (q *queue) fill(b *batch, flushAt, maxBytes int, closing bool) (full, urgent bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.n > 0 && len(b.events) < flushAt {
		size := len(q.ring[q.head].data)
		if len(b.events) > 0 {
			size++ // comma
		}
		if b.bytes+size > maxBytes {
			full = true
			break
		}
		b.events = append(b.events, q.popLocked())
		b.bytes += size
	}
	if q.spaceWaiters > 0 {
		q.releaseSpaceLocked()
	}
	if len(b.events) >= flushAt || closing {
		full = true
	}
	urgent = len(b.events) > 0 && (q.closed || q.ledger.flushedSince(b.events[0].epoch))
	if full || urgent {
		q.openRoom = 0
	} else {
		q.openRoom = flushAt - len(b.events)
		q.wake = true
		if len(b.events) == 0 {
			q.wakeN, q.wakeBytes = 1, 0
		} else {
			q.wakeN, q.wakeBytes = q.openRoom, maxBytes-b.bytes
		}
	}
	return full, urgent
}

// popRequeued takes the oldest re-queued batch, if any.
func (q *queue) popRequeued() *batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.requeued) == 0 {
		return nil
	}
	b := q.requeued[0]
	q.requeued[0] = nil
	q.requeued = q.requeued[1:]
	if len(q.requeued) > 0 {
		signal(q.requeueReady)
	}
	return b
}

// requeue puts a rate-limited batch back in front of every waiting event,
// however full the queue is (R32, R44). It returns false when Close has
// already handed everything back; the caller then hands b back itself.
func (q *queue) requeue(b *batch) bool {
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return false
	}
	q.requeued = append(q.requeued, b)
	q.mu.Unlock()
	signal(q.requeueReady)
	return true
}

// takeRequeued removes every re-queued batch (R35: they fail together).
func (q *queue) takeRequeued() []*batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	bs := q.requeued
	q.requeued = nil
	return bs
}

// close stops new events; it reports false if already closed.
func (q *queue) close() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.closed = true
	q.wake = false
	q.releaseSpaceLocked() // blocked EnqueueContext calls return ErrClosed
	signal(q.eventsReady)
	return true
}

// drain empties the queue for a final hand-back and makes later re-queues
// fail, so nothing can be left behind.
func (q *queue) drain() []event {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dead = true
	var evs []event
	for _, b := range q.requeued {
		evs = append(evs, b.events...)
	}
	q.requeued = nil
	for q.n > 0 {
		evs = append(evs, q.popLocked())
	}
	return evs
}

// popLocked removes the oldest waiting event; q.n must be > 0.
func (q *queue) popLocked() event {
	ev := q.ring[q.head]
	q.ring[q.head] = event{}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	q.queuedBytes -= len(ev.data) + 1
	return ev
}

// fullLocked reports whether a new event must be refused (R43).
func (q *queue) fullLocked() bool { return q.n >= q.capacity+q.openRoom }

// releaseSpaceLocked wakes every EnqueueContext call waiting for room.
func (q *queue) releaseSpaceLocked() {
	if q.spaceFreed != nil {
		close(q.spaceFreed)
		q.spaceFreed = nil
	}
}

// settle records the final disposition of evs (R41): the only place the
// ledger is discharged.
func (q *queue) settle(evs []event) {
	q.mu.Lock()
	for i := range evs {
		q.ledger.done(evs[i].epoch)
	}
	q.mu.Unlock()
}

// mark returns a channel closed once every event accepted so far has its
// disposition, or nil if none is outstanding. It also wakes the assembler
// so that an open batch closes at once.
func (q *queue) mark() <-chan struct{} {
	q.mu.Lock()
	ch := q.ledger.mark()
	q.mu.Unlock()
	if ch != nil {
		signal(q.eventsReady)
	}
	return ch
}

// outstanding is the number of accepted events without a disposition.
func (q *queue) outstanding() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ledger.total
}

// ledger counts accepted events until their final disposition (R41). Events
// are counted in epochs; each Flush or Close starts a new epoch and waits
// for the older ones, so Flush waits exactly for the events accepted before
// it, whatever order their batches finish in. Guarded by queue.mu.
type ledger struct {
	epochs []epochCount // oldest first; the last one is current
	base   uint64       // number of epochs[0]
	total  int
}

type epochCount struct {
	pending int
	done    chan struct{} // made by mark, closed when the epoch is retired
}

func newLedger() ledger {
	return ledger{epochs: []epochCount{{}}, base: 1}
}

func (l *ledger) current() uint64 { return l.base + uint64(len(l.epochs)) - 1 }

func (l *ledger) add(n int) uint64 {
	l.epochs[len(l.epochs)-1].pending += n
	l.total += n
	return l.current()
}

func (l *ledger) done(epoch uint64) {
	l.epochs[epoch-l.base].pending--
	l.total--
	// Retire finished epochs from the front; the current one stays.
	for len(l.epochs) > 1 && l.epochs[0].pending == 0 {
		if l.epochs[0].done != nil {
			close(l.epochs[0].done)
		}
		l.epochs[0] = epochCount{}
		l.epochs = l.epochs[1:]
		l.base++
	}
}

func (l *ledger) mark() <-chan struct{} {
	if l.total == 0 {
		return nil
	}
	cur := &l.epochs[len(l.epochs)-1]
	if cur.done == nil {
		cur.done = make(chan struct{})
	}
	ch := cur.done
	l.epochs = append(l.epochs, epochCount{})
	return ch
}

// flushedSince reports whether a Flush was asked for after epoch began.
func (l *ledger) flushedSince(epoch uint64) bool { return epoch < l.current() }
