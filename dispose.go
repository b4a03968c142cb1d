package analytics

import (
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Every accepted event ends here exactly once (R42): delivered, failed or
// handed back. The callback runs first and the ledger is discharged after
// it, so a Flush that returns has seen the callbacks of its events.

// succeed, fail and handBack end a batch: the caller must not use b after.

func (c *Client) succeed(b *batch) {
	c.stats.batches.Add(1)
	c.settle(b.events, nil)
	recycle(b)
}

func (c *Client) fail(b *batch, err error) {
	c.settle(b.events, err)
	recycle(b)
}

// handBack returns a batch at shutdown (R38): waiting, re-queued, assembled
// or cancelled in flight (then cause is the cancellation).
func (c *Client) handBack(b *batch, cause error) {
	last := b.lastErr
	if cause != nil {
		last = cause
	}
	c.settle(b.events, &DeliveryError{Reason: ErrShutdownInterrupted, Last: last, Attempts: b.attempts})
	recycle(b)
}

func (c *Client) rateLimitErr(b *batch) error {
	return &DeliveryError{Reason: ErrRateLimitDurationExceeded, Last: b.lastErr, Attempts: b.attempts}
}

func (c *Client) settle(evs []event, err error) {
	n := int64(len(evs))
	switch {
	case err == nil:
		c.stats.delivered.Add(n)
		if c.onSuccess != nil {
			c.callback(func() { c.onSuccess(messages(evs)) })
		}
	default:
		if errors.Is(err, ErrShutdownInterrupted) {
			c.stats.handedBack.Add(n)
			c.log.Error("events handed back at shutdown", zap.Int64("events", n), zap.Error(err))
		} else {
			c.stats.failed.Add(n)
			c.log.Error("events not delivered", zap.Int64("events", n), zap.Error(err))
		}
		if c.onError != nil {
			c.callback(func() { c.onError(err, messages(evs)) })
		}
	}
	c.q.settle(evs)
	releaseEvents(evs)
}

// callback runs a user callback; a panic is logged, not propagated, so a
// consumer survives it.
func (c *Client) callback(f func()) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("analytics callback panicked", zap.Any("panic", r))
		}
	}()
	f()
}

func messages(evs []event) []Message {
	msgs := make([]Message, len(evs))
	for i := range evs {
		msgs[i] = evs[i].msg
	}
	return msgs
}

// dropReportInterval is the minimum time between two aggregated warnings
// about events rejected with ErrQueueFull.
const dropReportInterval = 10 * time.Second

// reportDrops logs one warning for the drops since the last one, at most
// once per dropReportInterval; it runs on consumers and in Close, never on
// the caller's goroutine.
func (c *Client) reportDrops() {
	total := c.stats.dropped.Load()
	c.dropMu.Lock()
	defer c.dropMu.Unlock()
	if total == c.dropsSeen || (!c.dropLast.IsZero() && time.Since(c.dropLast) < dropReportInterval && !c.closed.Load()) {
		return
	}
	c.log.Warn("events rejected because the queue was full",
		zap.Int64("events", total-c.dropsSeen), zap.Int("queueCapacity", c.cfg.QueueCapacity))
	c.dropsSeen, c.dropLast = total, time.Now()
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
	Retries        int64 // counted retries scheduled
	RateLimited    int64 // responses with a usable Retry-After
	RateLimitWaits int64 // waits at the shared rate-limit gate
}

type counters struct {
	delivered, failed, handedBack, dropped atomic.Int64
	batches, requests, retries             atomic.Int64
	rateLimited, rateLimitWaits            atomic.Int64
}

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		Delivered:      c.stats.delivered.Load(),
		Failed:         c.stats.failed.Load(),
		HandedBack:     c.stats.handedBack.Load(),
		Dropped:        c.stats.dropped.Load(),
		Pending:        int64(c.q.outstanding()),
		Batches:        c.stats.batches.Load(),
		Requests:       c.stats.requests.Load(),
		Retries:        c.stats.retries.Load(),
		RateLimited:    c.stats.rateLimited.Load(),
		RateLimitWaits: c.stats.rateLimitWaits.Load(),
	}
}
