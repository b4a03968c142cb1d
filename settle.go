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
