package analytics

import (
	"cmp"
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go/internal/diskbuf"
	"github.com/relaykit/analytics-go/internal/wire"
)

// The queue and the batches it makes: the queue of accepted events with
// its ledger and its capacity (the room producers wait for), then what a
// consumer takes from it: the event, the batch and its bookkeeping through
// retries and waits, the pool of batches, the weight of an event in a
// body, and the isolation budget of a batch cut apart to find a poison
// event.

// queue is where accepted events wait until a consumer takes them as a
// batch: a bounded FIFO ring, and the ledger that Flush and Close wait on.
// One mutex guards both; producers never send on a channel that Close
// closes. The events of the batch being assembled stay in the ring until
// the batch closes, so a consumer that is needed elsewhere (a due batch in
// the waiting room) holds none of them.
type queue struct {
	mu      sync.Mutex
	ring    []event // events not yet taken into a batch, oldest at head
	head, n int
	// stale is how many slots right before head still hold events taken
	// into batches (at most the free slots). Performance: take leaves them
	// as they are rather than clear them, so that the producer's next
	// writes to those slots do not first fetch the lines the consumer
	// wrote; they are overwritten by later events, or cleared once the
	// queue runs empty (clearStale), so the ring keeps no taken event
	// while the client is idle.
	stale    int
	bytes    int       // encoded size of the queued events, a separator each
	openedAt time.Time // when the batch of the oldest queued event opened (R46)
	closed   bool      // Close was called: enqueue returns ErrClosed
	ledger   ledger
	// accepted counts the events queued by enqueue calls (Stats.Accepted,
	// with durable mode's spilled events). Performance: counted here,
	// under the mutex the call holds anyway, rather than with an atomic
	// step of its own per call.
	accepted int64
	// summed is the weight (see weight, without perEvent) of every event
	// queued since New, modulo 2³², and each queued event's upTo what it
	// was once that event was queued: what k queued events weigh is one
	// subtraction (fitting). A batch's events weigh less than 2³² bytes
	// (MaxFlushAt events of at most MaxEventBytes), so it is exact.
	summed uint32

	places   *capacity // shared with the waiting room (R43, R44)
	flushAt  int
	maxBytes int
	perEvent int // bytes the body adds to each event beyond its JSON (R59)
	interval time.Duration
	maxRing  int

	// The high-water mark in bytes (R71): EnqueueContext waits while the
	// queued events weigh more than markBatches full batches (maxBytes each);
	// overMark says they do, mirrored in places.bytesAtMark for the line
	// of blocked producers. markBatches is 0 without a mark.
	markBatches int
	overMark    bool

	ready chan struct{} // cap 1: a batch may be ready, or its interval must be timed
	// due signals ready when the open batch's FlushInterval ends (R46).
	// Performance: it times the open batch, so that no consumer is woken
	// only to time it (a wake and a sleep per batch); consumers still
	// time what take tells them.
	due *time.Timer

	onTake func() // durable mode: runs when a batch is taken (durable.beforeBatch, which syncs only with FsyncEveryBatch); nil in memory mode
}

func newQueue(places *capacity, flushAt, maxBytes int, interval time.Duration) *queue {
	maxRing := int(min(places.limit, int64(maxInt)))
	q := &queue{
		ring:     make([]event, min(64, maxRing)),
		ledger:   newLedger(),
		places:   places,
		flushAt:  flushAt,
		maxBytes: maxBytes,
		interval: interval,
		maxRing:  maxRing,
		ready:    make(chan struct{}, 1),
	}
	q.due = time.AfterFunc(time.Hour, func() { signal(q.ready) })
	q.due.Stop()
	return q
}

// queueOptions are what a client's queue and its capacity are made of;
// config.go derives them from the settings.
type queueOptions struct {
	capacity    int           // QueueCapacity (R43)
	flushAt     int           // events that close a batch
	interval    time.Duration // FlushInterval (R46)
	maxBytes    int           // bytes of events that close a batch (R45)
	perEvent    int           // bytes the body adds to each event beyond its JSON (R59)
	markBatches int           // the high-water mark, in full batches (R71)
}

// newQueueWith returns the queue o describes and its capacity, which the
// waiting room shares (R43, R44).
func newQueueWith(o queueOptions) (*queue, *capacity) {
	places := newCapacity(o.capacity)
	places.wakeWhen(o.flushAt) // blocked producers wake when a batch fits
	places.markAt(o.markBatches * o.flushAt)
	q := newQueue(places, o.flushAt, o.maxBytes, o.interval)
	q.perEvent = o.perEvent
	q.markBytesFor(o.markBatches) // R71, in bytes
	return q, places
}

// onEachTake has f run whenever a batch is taken, after q.mu is released
// (durable mode: durable.beforeBatch). Call it before the queue is shared.
func (q *queue) onEachTake(f func()) { q.onTake = f }

const maxInt = int(^uint(0) >> 1)

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// push accepts ev or returns ErrClosed / ErrQueueFull (R43). It never blocks
// on anything but the mutex. It wakes a consumer only when a batch can
// close by count or bytes, not for every event; when a batch opens, q.due
// times its FlushInterval.
func (q *queue) push(ev event) error { return q.pushEvent(&ev) }

// pushEvent is push with ev passed by reference: the hot path hands its
// event down without copying it at every call (see Client.accept).
func (q *queue) pushEvent(ev *event) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	if !q.places.reserve() {
		q.mu.Unlock()
		return ErrQueueFull
	}
	return q.pushLocked(ev)
}

// pushBelowMark is push for EnqueueContext: it also refuses (ErrQueueFull)
// while the queued events are at the high-water mark (R71), though
// QueueCapacity may have room.
func (q *queue) pushBelowMark(ev *event) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	if q.overMark || !q.places.reserveBelowMark() {
		q.mu.Unlock()
		return ErrQueueFull
	}
	return q.pushLocked(ev)
}

// pushGranted is push with a place the capacity already gave this
// producer (see capacity.await); after Close the place is returned.
func (q *queue) pushGranted(ev *event) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.places.unqueue(1)
		q.places.release(1, true)
		return ErrClosed
	}
	return q.pushLocked(ev)
}

// pushLocked queues a copy of ev, which has its place; it unlocks q.mu.
func (q *queue) pushLocked(ev *event) error {
	if q.n == len(q.ring) {
		q.grow()
	}
	slot := &q.ring[q.ringIndex(q.n)]
	*slot = *ev
	slot.epoch = q.ledger.add()
	q.summed += uint32(weight(slot.data, 0))
	slot.upTo = q.summed
	q.accepted++
	q.n++
	q.stale = min(q.stale, len(q.ring)-q.n) // the slot may have been a stale one
	before := q.bytes
	q.bytes += weight(slot.data, q.perEvent)
	if q.n == 1 {
		q.openedAt = time.Now()
		q.due.Reset(q.interval)
	}
	reached := q.noteMark()
	wake := q.n == q.flushAt || (q.overBytes() && before-1 <= q.maxBytes) || q.places.full() || reached
	q.mu.Unlock()
	if wake {
		signal(q.ready)
	}
	return nil
}

// pushWait is push that waits for room until ctx ends (the blocking mode
// of EnqueueContext). A call that finds room costs what push costs. A call
// that finds none joins the line of blocked producers (see capacity): it is
// woken with a place of its own, in the order the producers came, once a
// batch's worth of places is free, or at Close. It waits while QueueCapacity
// is reached, and also while the queued events are at the high-water mark
// (R71): more queued events would not keep the consumers any busier.
func (q *queue) pushWait(ctx context.Context, ev *event) error {
	for {
		if !q.places.queued() { // no barging past blocked producers
			err := q.pushBelowMark(ev)
			if err != ErrQueueFull {
				return err
			}
		}
		w := q.places.await()
		select {
		case <-w.woken:
		case <-ctx.Done():
			q.places.leave(w)
		}
		if w.granted { // read after woken was closed, or under the lock in leave
			return q.pushGranted(ev)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrQueueFull, err)
		}
		// Woken without a place: Close was called (push returns ErrClosed).
	}
}

func (q *queue) grow() {
	q.resize(max(min(len(q.ring)*2, q.maxRing), q.n+1)) // more than maxRing only after a load
}

// resize moves the queued events to a ring of size places (≥ q.n).
func (q *queue) resize(size int) {
	ring := make([]event, size)
	for i := 0; i < q.n; i++ {
		ring[i] = q.ring[q.ringIndex(i)]
	}
	q.ring, q.head, q.stale = ring, 0, 0
}

// ringIndex is the ring slot of the i-th queued event (0 ≤ i < len(ring)):
// the head plus i, wrapped once. A compare instead of a modulo, which would
// divide on every push and pop of the hot path.
func (q *queue) ringIndex(i int) int {
	if i += q.head; i >= len(q.ring) {
		i -= len(q.ring)
	}
	return i
}

// overBytes reports whether the queued events are more than one batch can
// carry (R45).
func (q *queue) overBytes() bool { return q.bytes-1 > q.maxBytes }

// markBytesFor sets the high-water mark in bytes to batches full batches
// (R71); q.mu must be held, or the queue not yet shared.
func (q *queue) markBytesFor(batches int) {
	q.markBatches = batches
	q.noteMark()
}

// noteMark updates overMark after the queued bytes changed; q.mu is held.
// It reports whether the mark was just reached.
func (q *queue) noteMark() bool {
	over := q.markBatches > 0 && q.bytes-1 > q.markBatches*q.maxBytes // more than that many full batches carry, as overBytes
	if over == q.overMark {
		return false
	}
	q.overMark = over
	q.places.bytesAtMark.Store(over)
	return over
}

// take returns the next batch if one is ready: FlushAt events are queued,
// or more bytes than a batch may carry, or FlushInterval has passed since
// the batch opened, or a Flush or Close was asked for after its first event
// was accepted (R45, R46), or the client is full (QueueCapacity is reached,
// so no more events can join the batch). Otherwise it returns nil and how long until the
// open batch's interval ends, or -1 when nothing is queued.
func (q *queue) take(now time.Time) (*batch, time.Duration) {
	q.mu.Lock()
	if q.n == 0 {
		q.mu.Unlock()
		return nil, -1
	}
	due := q.openedAt.Add(q.interval)
	// (At the high-water mark in bytes the queue is over a batch's bytes too.)
	ready := q.n >= q.flushAt || q.overBytes() || q.closed || q.places.full() ||
		q.ledger.flushedSince(q.ring[q.head].epoch) || !now.Before(due)
	if !ready {
		q.mu.Unlock()
		return nil, due.Sub(now)
	}
	k, bytes := q.fitting()
	b := newBatch(k) // sized to what it takes: a batch may wait long in the room
	q.takeHead(b, k, bytes)
	q.noteMark()
	more := q.n > 0
	if more {
		q.openedAt = now // the rest opens the next batch
	}
	if more && !q.closed {
		q.due.Reset(q.interval)
	} else {
		q.due.Stop()
	}
	low := q.n < q.flushAt // too few left for another batch: blocked producers are needed now
	// Another consumer takes the rest at once if it is a batch already;
	// otherwise q.due times it.
	again := more && (q.n >= q.flushAt || q.overBytes() || q.closed || q.places.full() ||
		q.ledger.flushedSince(q.ring[q.head].epoch))
	q.mu.Unlock()
	q.places.taken(len(b.events), low) // in a consumer's hands now, not held (R43)
	if again {
		signal(q.ready)
	}
	if q.onTake != nil {
		q.onTake()
	}
	return b, 0
}

// takeHead moves the k oldest events, which take bytes in a body (see
// fitting), into b: one copy of each of the ring's (at most two) runs,
// rather than a dropHead per event. q.mu is held.
func (q *queue) takeHead(b *batch, k, bytes int) {
	b.events = b.events[:k]
	run := q.ring[q.head:min(q.head+k, len(q.ring))]
	copy(b.events, run)
	if rest := k - len(run); rest > 0 { // the ring wrapped
		copy(b.events[len(run):], q.ring[:rest])
	}
	q.head = q.ringIndex(k)
	q.n -= k
	q.stale = min(q.stale+k, len(q.ring)-q.n) // the slots are not cleared (see stale)
	if q.n == 0 {
		q.clearStale()
	}
	q.bytes -= bytes + 1 + k*q.perEvent // their weights: the first's comma and each one's extra too
	b.bytes = bytes
}

// clearStale clears the stale slots (see stale); q.mu is held.
func (q *queue) clearStale() {
	start := q.head - q.stale
	if start < 0 { // the stale slots wrap: the ring's end, then its start
		clear(q.ring[start+len(q.ring):])
		start = 0
	}
	clear(q.ring[start:q.head])
	q.stale = 0
}

// fitting is how many of the queued events, oldest first, the next batch
// takes: at most flushAt, and as many as its body has room for (R45), at
// least one; and what they take in a body before the per-event extra
// (batch.bytes). q.mu is held.
func (q *queue) fitting() (n, bytes int) {
	if k := min(q.n, q.flushAt); k > 0 {
		// Performance: the common batch, every event up to flushAt, is
		// weighed in one step (see summed) rather than event by event
		// under the lock the producer waits for.
		first := &q.ring[q.head]
		all := int(q.ring[q.ringIndex(k-1)].upTo-first.upTo) + weight(first.data, 0) - 1 // the first has no comma
		if k == 1 || all+k*q.perEvent <= q.maxBytes {
			return k, all
		}
	}
	for n < q.n && n < q.flushAt {
		size := weight(q.ring[q.ringIndex(n)].data, 0) // its JSON and the comma before it
		if n == 0 {
			size-- // the first has none
		}
		if n > 0 && bytes+n*q.perEvent+size+q.perEvent > q.maxBytes {
			break
		}
		bytes += size
		n++
	}
	return n, bytes
}

// setBudget changes where batches close (R67, R68): at maxBytes of events
// (with separators and per-event sentAt) and at flushAt events. A consumer
// is woken, since the queued events may already make a batch.
func (q *queue) setBudget(maxBytes, flushAt int) {
	q.mu.Lock()
	q.maxBytes, q.flushAt = maxBytes, flushAt
	q.noteMark()
	q.mu.Unlock()
	q.places.release(0, false) // a higher mark may let blocked producers go on
	signal(q.ready)
}

// load queues events read back from the disk buffer (durable mode, see
// durable.go): accepted already and counted in the ledger (their epoch is
// set), so they take their places whatever the limit, as a re-queued
// batch does (R44).
func (q *queue) load(evs []event) {
	if len(evs) == 0 {
		return
	}
	q.mu.Lock()
	if len(q.ring) < q.n+len(evs) {
		q.resize(max(min(len(q.ring)*2, q.maxRing), q.n+len(evs)))
	}
	if q.n == 0 {
		q.openedAt = time.Now()
		q.due.Reset(q.interval)
	}
	for i := range evs {
		slot := &q.ring[q.ringIndex(q.n)]
		*slot = evs[i]
		q.summed += uint32(weight(slot.data, 0))
		slot.upTo = q.summed
		q.n++
		q.bytes += weight(evs[i].data, q.perEvent) // as push counts it, so popping evens out
	}
	q.stale = min(q.stale, len(q.ring)-q.n)
	q.noteMark()
	q.mu.Unlock()
	q.places.enqueued(len(evs))
	q.places.hold(len(evs))
	signal(q.ready)
}

// account counts n accepted events that are not queued (durable mode: on
// disk only, see durable.go) in the ledger, so Flush and Close wait for
// them, and returns their epoch; ErrClosed after close.
func (q *queue) account(n int) (uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, ErrClosed
	}
	return q.ledger.addN(n), nil
}

// dischargeRuns counts off runs of events that were accounted but never
// queued (see account) and have their disposition.
func (q *queue) dischargeRuns(runs []epochRun) {
	if len(runs) == 0 {
		return
	}
	q.mu.Lock()
	for _, r := range runs {
		q.ledger.doneN(r.epoch, int(r.n))
	}
	q.mu.Unlock()
}

// popLocked removes the oldest queued event; q.n must be > 0.
func (q *queue) popLocked() event {
	ev := q.ring[q.head]
	q.dropHead(&q.ring[q.head])
	return ev
}

// dropHead removes the oldest queued event, head (the slot at q.head),
// after the caller copied it; q.n must be > 0.
func (q *queue) dropHead(head *event) {
	q.bytes -= weight(head.data, q.perEvent)
	*head = event{}
	if q.head++; q.head == len(q.ring) {
		q.head = 0
	}
	q.n--
	q.stale = min(q.stale+1, len(q.ring)-q.n) // still before head, and cleared already
	if q.n == 0 {
		q.clearStale()
	}
}

// close stops new events; it reports false if already closed.
func (q *queue) close() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.closed = true
	q.due.Stop()       // what is queued goes at once now
	q.places.wakeAll() // blocked EnqueueContext calls return ErrClosed
	signal(q.ready)
	return true
}

// drain empties the queue for the final hand-back at Close; the drained
// events give their places back.
func (q *queue) drain() []event {
	q.mu.Lock()
	evs := make([]event, 0, q.n)
	for q.n > 0 {
		evs = append(evs, q.popLocked())
	}
	q.noteMark()
	q.mu.Unlock()
	q.places.taken(len(evs), true)
	return evs
}

// discharge counts off evs in the ledger, which have their disposition
// (R41).
func (q *queue) discharge(evs []event) {
	q.mu.Lock()
	for i := 0; i < len(evs); {
		// A batch's events almost always share one epoch: one step per run.
		epoch, j := evs[i].epoch, i+1
		for j < len(evs) && evs[j].epoch == epoch {
			j++
		}
		q.ledger.doneN(epoch, j-i)
		i = j
	}
	q.mu.Unlock()
}

// mark returns a channel closed once every event accepted so far has its
// disposition, or nil if none is outstanding. It wakes a consumer so that
// an open batch closes at once.
func (q *queue) mark() <-chan struct{} {
	q.mu.Lock()
	ch := q.ledger.mark()
	q.mu.Unlock()
	if ch != nil {
		signal(q.ready)
	}
	return ch
}

// releasePlaces gives back the places of n events held outside the queue
// until their outcome (the batches of an expired rate-limit episode, see
// settler.rateLimitExceeded), and wakes the line of blocked producers.
func (q *queue) releasePlaces(n int) { q.places.release(n, true) }

// outstanding is the number of accepted events without a disposition.
func (q *queue) outstanding() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ledger.total
}

// counts are outstanding and the events queued by enqueue calls so far
// (see accepted), read together.
func (q *queue) counts() (outstanding int, accepted int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ledger.total, q.accepted
}

// ledger counts accepted events until their final disposition (R41):
// dequeueing, batching and waiting discharge nothing, so Flush and Close
// never return early and never hang because a path skipped the discharge.
//
// Events are counted in epochs. A Flush or Close that finds events in the
// current epoch starts a new one and waits for the older ones to retire, so
// it waits exactly for the events accepted before it, whatever order their
// batches finish in. A Flush that finds the current epoch empty waits on
// the previous epoch instead of starting another, so the ledger holds at
// most one epoch per outstanding event, however often Flush is called.
// Guarded by queue.mu.
type ledger struct {
	epochs []epochCount // oldest first; the last one is current
	base   uint64       // number of epochs[0]
	total  int
}

type epochCount struct {
	pending int
	done    chan struct{} // made by mark, closed when the epoch retires
}

func newLedger() ledger {
	return ledger{epochs: []epochCount{{}}, base: 1}
}

func (l *ledger) current() uint64 { return l.base + uint64(len(l.epochs)) - 1 }

// add counts one accepted event and returns its epoch.
func (l *ledger) add() uint64 {
	l.epochs[len(l.epochs)-1].pending++
	l.total++
	return l.current()
}

// addN counts n accepted events and returns their epoch.
func (l *ledger) addN(n int) uint64 {
	l.epochs[len(l.epochs)-1].pending += n
	l.total += n
	return l.current()
}

// doneN discharges n events of epoch.
func (l *ledger) doneN(epoch uint64, n int) {
	l.epochs[epoch-l.base].pending -= n
	l.total -= n
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

// mark returns a channel closed when every event counted so far has been
// discharged, or nil when none is outstanding.
func (l *ledger) mark() <-chan struct{} {
	if l.total == 0 {
		return nil
	}
	last := len(l.epochs) - 1
	if l.epochs[last].pending == 0 {
		// Nothing since the last mark: wait with it (last >= 1 here,
		// since total > 0 and the current epoch is empty).
		last--
	} else {
		l.epochs = append(l.epochs, epochCount{})
	}
	e := &l.epochs[last]
	if e.done == nil {
		e.done = make(chan struct{})
	}
	return e.done
}

// flushedSince reports whether a Flush or Close was asked for after epoch
// began.
func (l *ledger) flushedSince(epoch uint64) bool { return epoch < l.current() }

// epochRun is a run of events accepted in the same ledger epoch that
// were counted without being queued (durable mode: on disk only, see
// queue.account).
type epochRun struct {
	epoch uint64
	n     int64
}

// capacity counts the accepted events that are held and not in flight:
// queued, or waiting in the waiting room (R43, R44). Events in a request
// (or in a consumer's hands on the way to one) do not count, so memory is
// bounded by QueueCapacity + Consumers × FlushAt events. A producer
// reserves a place with one atomic step; the queue and the waiting room
// return places.
//
// EnqueueContext calls that find no room wait in a line, first come first
// served. They also wait while the events queued and not yet taken into a
// batch are at the high-water mark (R71), though places are free. They are
// woken only when there is room for a useful amount of work, wakeAt places
// (a batch), or when the queue is about to run dry (a forced release), not
// once per place: each woken producer is given its place (granted) as it
// is woken, in line order, so none can be starved by the others and none
// wakes for nothing.
type capacity struct {
	// counts holds two counts in one word (see pack), so that a
	// producer's reservation is one atomic step: held, the places taken,
	// and untaken, the events queued and not yet taken into a batch plus
	// the places granted to blocked producers that have not queued their
	// event yet.
	counts  atomic.Int64
	limit   int64
	wakeAt  int64        // free places that wake the line (≥ 1)
	waiters atomic.Int32 // len(line)

	// highWater is where EnqueueContext stops (R71): at that many untaken
	// events.
	highWater int64
	// bytesAtMark: the queued events weigh the high-water mark in bytes
	// (see queue.noteMark); nobody in line is granted a place meanwhile.
	bytesAtMark atomic.Bool

	mu   sync.Mutex
	line []*blockedProducer // blocked producers, oldest first

	freed chan struct{} // durable mode: signalled when places are released (the disk reader waits on it); nil otherwise
}

// blockedProducer is one producer waiting for room. woken is closed when
// it leaves the line; granted (written under capacity.mu before woken is
// closed) says it was given a place.
type blockedProducer struct {
	woken   chan struct{}
	granted bool
}

func newCapacity(limit int) *capacity {
	return &capacity{limit: int64(limit), wakeAt: 1, highWater: int64(limit)}
}

// wakeWhen sets the number of free places that wakes blocked producers.
func (c *capacity) wakeWhen(places int) { c.wakeAt = max(1, min(int64(places), c.limit)) }

// markAt sets the high-water mark of queued events for EnqueueContext
// (R71), at least wakeAt and at most the limit.
func (c *capacity) markAt(events int) {
	c.highWater = max(c.wakeAt, min(int64(events), c.limit))
}

// markBatches is how many full batches the high-water mark holds (R71): a
// batch ready for every other consumer, and at least one (bounded by
// QueueCapacity, see markAt).
func markBatches(consumers int) int { return max(1, consumers/2) }

// pack is the word of capacity.counts: held in the low 32 bits and
// untaken above them, each a signed count (both stay far inside 32 bits:
// MaxQueueCapacity and the in-flight batches bound them). Adding the words
// of two pairs adds the pairs, a borrow included, so each change is one
// atomic add of a packed delta.
func pack(held, untaken int64) int64 { return untaken<<32 + held }

// split is the pair a word of capacity.counts packs.
func split(w int64) (held, untaken int64) {
	held = int64(int32(w))
	return held, (w - held) >> 32
}

// held is how many places are taken.
func (c *capacity) held() int64 {
	h, _ := split(c.counts.Load())
	return h
}

// reserve takes one place if the limit allows it, for an event that is
// queued next (Track and Enqueue).
func (c *capacity) reserve() bool {
	for {
		w := c.counts.Load()
		if h, _ := split(w); h >= c.limit {
			return false
		}
		if c.counts.CompareAndSwap(w, w+pack(1, 1)) {
			return true
		}
	}
}

// reserveBelowMark is reserve for EnqueueContext: it also fails while the
// untaken events are at the high-water mark (R71).
func (c *capacity) reserveBelowMark() bool {
	for {
		w := c.counts.Load()
		if h, u := split(w); h >= c.limit || u >= c.highWater {
			return false
		}
		if c.counts.CompareAndSwap(w, w+pack(1, 1)) {
			return true
		}
	}
}

// enqueued counts n events queued without a reservation (preload).
func (c *capacity) enqueued(n int) { c.counts.Add(pack(0, int64(n))) }

// unqueue counts off n granted places that were not used (Close came
// first); release follows.
func (c *capacity) unqueue(n int) { c.counts.Add(pack(0, -int64(n))) }

// taken is release for n events taken from the queue: they leave the
// untaken count too, in the same atomic step.
func (c *capacity) taken(n int, force bool) {
	c.counts.Add(pack(-int64(n), -int64(n)))
	c.released(force)
}

// grantable is how many more events blocked producers may queue now: free
// places, and no more than the high-water mark allows.
func (c *capacity) grantable() int64 {
	if c.bytesAtMark.Load() {
		return 0
	}
	h, u := split(c.counts.Load())
	return min(c.limit-h, c.highWater-u)
}

// free is how many places are free (negative when more are held than the
// limit, after a batch came back to the waiting room).
func (c *capacity) free() int64 { return c.limit - c.held() }

// batch is the number of free places that wakes blocked producers: a
// batch's worth (see wakeWhen).
func (c *capacity) batch() int64 { return c.wakeAt }

// onRelease has ch signalled whenever places are released (durable mode:
// the disk reader waits on it). Call it before the capacity is shared.
func (c *capacity) onRelease(ch chan struct{}) { c.freed = ch }

// full reports whether the limit is reached.
func (c *capacity) full() bool { return c.held() >= c.limit }

// queued reports whether producers wait in line.
func (c *capacity) queued() bool { return c.waiters.Load() > 0 }

// hold takes n places whatever the limit: a batch returning to the waiting
// room was accepted long ago and is never refused (R44).
func (c *capacity) hold(n int) { c.counts.Add(pack(int64(n), 0)) }

// holdBatch holds the places of b, a batch that enters the waiting room
// (see hold).
func (c *capacity) holdBatch(b *batch) { c.hold(len(b.events)) }

// releaseBatches returns the places of bs, batches that leave the waiting
// room (to be sent, failed or handed back), and wakes the line whatever
// their number (R43).
func (c *capacity) releaseBatches(bs ...*batch) {
	n := 0
	for _, b := range bs {
		n += len(b.events)
	}
	c.release(n, true)
}

// release returns n places and wakes the line if wakeAt places are free or
// force is set (the queue runs dry: any room is useful).
func (c *capacity) release(n int, force bool) {
	c.counts.Add(pack(-int64(n), 0))
	c.released(force)
}

// released tells the disk reader and the line that places were released.
func (c *capacity) released(force bool) {
	if c.freed != nil {
		signal(c.freed)
	}
	if c.waiters.Load() > 0 {
		c.mu.Lock()
		c.grantLocked(force)
		c.mu.Unlock()
	}
}

// grantLocked gives free places to the line, oldest first, one each.
func (c *capacity) grantLocked(force bool) {
	if len(c.line) == 0 || (!force && c.grantable() < c.wakeAt) {
		return
	}
	n := 0
	for n < len(c.line) && !c.bytesAtMark.Load() && c.reserveBelowMark() {
		w := c.line[n]
		w.granted = true
		close(w.woken)
		n++
	}
	if n > 0 {
		rest := copy(c.line, c.line[n:])
		clear(c.line[rest:])
		c.line = c.line[:rest]
		c.waiters.Store(int32(rest))
	}
}

// await puts the caller at the end of the line and returns its blockedProducer. If
// room was released since the caller found none, the caller may be granted
// at once (then woken is already closed).
func (c *capacity) await() *blockedProducer {
	w := &blockedProducer{woken: make(chan struct{})}
	c.mu.Lock()
	c.line = append(c.line, w)
	c.waiters.Store(int32(len(c.line)))
	// Room released since the caller found none goes to the line now,
	// oldest first: a producer sleeps only while the client is full or
	// the queue at its high-water mark.
	c.grantLocked(c.grantable() > 0)
	c.mu.Unlock()
	return w
}

// leave takes w out of the line when its caller stops waiting. If w was
// granted meanwhile, it keeps its place (w.granted tells).
func (c *capacity) leave(w *blockedProducer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.line, w); i >= 0 {
		c.line = slices.Delete(c.line, i, i+1)
		c.waiters.Store(int32(len(c.line)))
	}
}

// wakeAll wakes every blocked producer without a place (Close).
func (c *capacity) wakeAll() {
	c.mu.Lock()
	for _, w := range c.line {
		close(w.woken)
	}
	clear(c.line)
	c.line = c.line[:0]
	c.waiters.Store(0)
	c.mu.Unlock()
}

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
	// upTo is, while the event is in the queue's ring, the weight (see
	// weight, without perEvent) of every event queued since New up to
	// this one, modulo 2³² (queue.summed). It takes the padding after off.
	upTo uint32
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
