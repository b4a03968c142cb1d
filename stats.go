package analytics

import (
	"errors"
	"sync/atomic"

	"go.uber.org/zap"
)

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
}

// count counts the outcome of one enqueue call and returns err. An
// accepted call is counted where its event is queued or spilled instead
// (queue.accepted, durable.spilled), under a lock that call holds anyway.
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
// accepted events without a disposition, accepted the enqueue calls
// accepted (see count), bodyLimit and eventLimit the learned limits (0
// until learned); the durable fields are filled by durable.addStats. The
// counters are read one by one.
func (s *counters) snapshot(pending, accepted int64, bodyLimit, eventLimit int) Stats {
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

		Accepted:         accepted,
		RejectedInvalid:  s.rejectedInvalid.Load(),
		RejectedTooLarge: s.rejectedTooLarge.Load(),
		RejectedClosed:   s.rejectedClosed.Load(),
		RejectedDisk:     s.rejectedDisk.Load(),
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
