package analytics

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
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
	ledger    *queue   // discharged once per event
	capacity  int      // QueueCapacity, for the drop warning
	disk      *durable // durable mode: outcomes are acknowledged on disk; nil otherwise

	stats counters

	dropMu    sync.Mutex
	dropsSeen int64     // drops already reported
	dropLast  time.Time // last aggregated drop warning
}

// delivered, failed and handBack end a batch: the caller must not use b
// after.

func (s *settler) delivered(b *batch) {
	s.stats.batches.Add(1)
	s.events(b.events, nil)
	recycle(b)
}

func (s *settler) failed(b *batch, err error) {
	s.events(b.events, err)
	recycle(b)
}

// handBack returns a batch at shutdown (R38): waiting, assembled, or
// cancelled in flight (then cause is the cancellation, R40).
func (s *settler) handBack(b *batch, cause error) {
	last := b.lastErr
	if cause != nil {
		last = cause
	}
	s.events(b.events, s.handBackError(last, b.attempts))
	recycle(b)
}

// handBackError is the error every handed-back event gets (R38): in durable
// mode the event stays on disk for the next start (Kept).
func (s *settler) handBackError(last error, attempts int) *DeliveryError {
	return &DeliveryError{Reason: ErrShutdownInterrupted, Last: last, Attempts: attempts, Kept: s.disk != nil}
}

// rateLimitExceeded fails batches whose rate-limit episode ran out (R35).
func (s *settler) rateLimitExceeded(bs []*batch) {
	if len(bs) == 0 {
		return
	}
	s.log.Debug("rate-limit episode exceeded MaxRateLimitDuration")
	for _, b := range bs {
		s.failed(b, &DeliveryError{Reason: ErrRateLimitDurationExceeded, Last: b.lastErr, Attempts: b.attempts})
	}
}

// events settles evs with err (nil: delivered). Counters move before the
// callback runs, so Close can count hand-backs whose callbacks are slow. In
// durable mode delivered and failed events are acknowledged on disk before
// the ledger is discharged; handed-back events stay on disk.
func (s *settler) events(evs []event, err error) {
	n := int64(len(evs))
	handedBack := errors.Is(err, ErrShutdownInterrupted)
	if s.disk != nil && !handedBack {
		s.disk.ack(evs)
	}
	switch {
	case err == nil:
		s.stats.delivered.Add(n)
		if s.onSuccess != nil {
			s.callback(func() { s.onSuccess(s.messages(evs)) })
		}
	default:
		if handedBack {
			s.stats.handedBack.Add(n)
			s.log.Error("events handed back at shutdown", zap.Int64("events", n), zap.Error(err))
		} else {
			s.stats.failed.Add(n)
			s.log.Error("events not delivered", zap.Int64("events", n), zap.Error(err))
		}
		if s.onError != nil {
			s.callback(func() { s.onError(err, s.messages(evs)) })
		}
	}
	s.ledger.discharge(evs)
	releaseEvents(evs)
}

// callback runs a user callback; a panic is logged, not propagated, so a
// consumer survives it.
func (s *settler) callback(f func()) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("analytics callback panicked", zap.Any("panic", r))
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
		m := evs[i].msg
		if m == nil {
			var err error
			if m, err = rebuildMessage(evs[i].data); err != nil {
				s.log.Error("cannot rebuild an event's message for a callback", zap.Error(err))
				continue
			}
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// dropReportInterval is the minimum time between two aggregated warnings
// about events rejected with ErrQueueFull.
const dropReportInterval = 10 * time.Second

// reportDrops logs one warning for the drops since the last one, at most
// once per dropReportInterval unless final; it runs on consumers and in
// Close, never on the caller's goroutine.
func (s *settler) reportDrops(final bool) {
	total := s.stats.dropped.Load()
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	if total == s.dropsSeen || (!final && !s.dropLast.IsZero() && time.Since(s.dropLast) < dropReportInterval) {
		return
	}
	s.log.Warn("events rejected because the queue was full",
		zap.Int64("events", total-s.dropsSeen), zap.Int("queueCapacity", s.capacity))
	s.dropsSeen, s.dropLast = total, time.Now()
}

// Stats are cumulative counters of a Client, in events unless named
// otherwise. Read them with Client.Stats; safe for concurrent use.
type Stats struct {
	Delivered      int64 // events answered 2xx
	Failed         int64 // events reported to OnError as failed
	HandedBack     int64 // events handed back at shutdown (ErrShutdownInterrupted)
	Dropped        int64 // enqueue calls rejected with ErrQueueFull
	Pending        int64 // accepted events without a disposition yet
	Batches        int64 // batches delivered
	Requests       int64 // HTTP attempts made
	Retries        int64 // counted retries sent (a retry cut off by Close is not counted)
	RateLimited    int64 // responses with a usable Retry-After
	RateLimitWaits int64 // waits of a consumer at the closed rate-limit gate

	// Enqueue calls by outcome: each returns nil (Accepted) or exactly one
	// error, counted by reason (ErrQueueFull is Dropped, above).
	Accepted         int64 // enqueue calls that returned nil
	RejectedInvalid  int64 // enqueue calls rejected with a *MessageError (ErrInvalidMessage)
	RejectedTooLarge int64 // enqueue calls rejected with ErrEventTooLarge
	RejectedClosed   int64 // enqueue calls rejected with ErrClosed
	RejectedDisk     int64 // enqueue calls rejected with a *DiskError (durable mode)

	// Durable mode only (WithDiskBuffer), all set at New:
	Replayed    int64 // events an earlier client left in the disk buffer, sent first
	DiskTorn    int64 // torn records (a write cut short by a crash) skipped at New
	DiskCorrupt int64 // corrupt regions before valid records, and records that were not events, skipped at New
}

type counters struct {
	delivered, failed, handedBack, dropped atomic.Int64
	batches, requests, retries             atomic.Int64
	rateLimited, rateLimitWaits            atomic.Int64

	accepted, rejectedInvalid, rejectedTooLarge, rejectedClosed atomic.Int64
	rejectedDisk                                                atomic.Int64
}

// count counts the outcome of one enqueue call and returns err.
func (s *counters) count(err error) error {
	switch {
	case err == nil:
		s.accepted.Add(1)
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

// Stats returns a snapshot of the client's counters. Safe for concurrent
// use; the counters are read one by one, not as one atomic snapshot.
func (c *Client) Stats() Stats {
	s := &c.settle.stats
	st := Stats{
		Delivered:      s.delivered.Load(),
		Failed:         s.failed.Load(),
		HandedBack:     s.handedBack.Load(),
		Dropped:        s.dropped.Load(),
		Pending:        int64(c.q.outstanding()),
		Batches:        s.batches.Load(),
		Requests:       s.requests.Load(),
		Retries:        s.retries.Load(),
		RateLimited:    s.rateLimited.Load(),
		RateLimitWaits: s.rateLimitWaits.Load(),

		Accepted:         s.accepted.Load(),
		RejectedInvalid:  s.rejectedInvalid.Load(),
		RejectedTooLarge: s.rejectedTooLarge.Load(),
		RejectedClosed:   s.rejectedClosed.Load(),
		RejectedDisk:     s.rejectedDisk.Load(),
	}
	if d := c.disk; d != nil {
		st.Replayed = d.replayed.Load()
		ds := d.log.Stats()
		st.DiskTorn, st.DiskCorrupt = int64(ds.Torn), int64(ds.Corrupt)+d.skipped.Load()
	}
	return st
}
