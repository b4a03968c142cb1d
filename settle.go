package analytics

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/relaykit/analytics-go/internal/guard"
)

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
		n := len(b.events) // settling b may recycle them
		s.failed(b, b.budgetError(ErrRateLimitDurationExceeded))
		s.q.places.release(n, true)
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
// it (guard.go).
func (s *settler) callback(running *atomic.Int64, n int64, f func()) {
	running.Add(n)
	defer running.Add(-n)
	defer guard.Contain(s.log, userCallback, nil)
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
