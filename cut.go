package analytics

import (
	"time"

	"go.uber.org/zap"
)

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
		w.log.Debug("batch over the learned limit: sending it in pieces", zap.Int("events", len(b.events)), zap.Int("first", k))
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
		w.log.Debug("batch answered 400: halving it until the events at fault are alone", zap.Int("events", len(b.events)))
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
	if w.policy.spent(b, now) != nil {
		return false // retryLater fails it with the budget's reason
	}
	w.limits.refusedCount(len(b.events))
	_, _, line := w.room.failed(b, now) // a counted failure, for the server's health (R60, R61)
	first := b.retries
	b.scheduleRetry()
	if !b.cut { // one line per refused batch, not one per piece (R51)
		w.log.Debug("batch answered 429 twice without Retry-After: sending it again as two halves",
			zap.Int("events", len(b.events)))
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
