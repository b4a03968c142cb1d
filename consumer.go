package analytics

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
)

// consumer is one upload goroutine. It owns the batch it holds from the
// moment it takes it until its disposition: assembling, waiting at the
// gate, in flight, or waiting for a counted retry. Its loop checks
// shutdown first, then re-queued batches, then ordinary work.
type consumer struct {
	c      *Client
	sender *sender
}

func (w *consumer) run() {
	defer w.c.consumers.Done()
	for {
		b := w.next()
		if b == nil {
			return
		}
		w.deliver(b)
		w.c.reportDrops()
	}
}

// next returns the next batch to deliver, or nil when the client shuts down.
// Re-queued batches come before any new work (R32, R47). One consumer at a
// time assembles a batch from the queue (it holds assembleToken), so that
// idle consumers do not split a trickle of events into tiny batches.
func (w *consumer) next() *batch {
	c := w.c
	for {
		if c.stop.Err() != nil {
			return nil
		}
		if b := c.q.popRequeued(); b != nil {
			return b
		}
		select {
		case <-c.stop.Done():
			return nil
		case <-c.quit:
			return nil
		case <-c.q.requeueReady:
		case <-c.assembleToken:
			b := w.assemble()
			c.assembleToken <- struct{}{}
			if b != nil {
				return b
			}
		}
	}
}

// assemble builds a batch from the queue. It closes the batch at FlushAt
// events, before its events would pass the byte limit, FlushInterval after
// it took its first event, or at once when a Flush or Close is waiting
// (R45, R46). It returns nil, having taken nothing, when a re-queued batch
// needs a consumer or the client shuts down.
func (w *consumer) assemble() *batch {
	c := w.c
	b := newBatch(min(c.cfg.FlushAt, 512))
	var timer *time.Timer
	var expired <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		full, urgent := c.q.fill(b, c.cfg.FlushAt, batchEventBytes, false)
		if full || urgent {
			return b
		}
		var requeued chan struct{}
		if len(b.events) == 0 {
			requeued = c.q.requeueReady
		} else if timer == nil {
			timer = time.NewTimer(c.cfg.FlushInterval)
			expired = timer.C
		}
		select {
		case <-c.q.eventsReady:
		case <-expired:
			c.q.fill(b, c.cfg.FlushAt, batchEventBytes, true) // what arrived since the last wake
			return b
		case <-requeued:
			return nil
		case <-c.quit:
			return orNil(b)
		case <-c.stop.Done():
			return orNil(b) // deliver hands it back
		}
	}
}

func orNil(b *batch) *batch {
	if len(b.events) == 0 {
		return nil
	}
	return b
}

// deliver runs the retry loop of one batch until its disposition or until it
// is re-queued. The loop is ours; the backoff library only supplies delays.
func (w *consumer) deliver(b *batch) {
	c := w.c
	for {
		if !w.passGate(b) {
			return
		}
		b.episode = 0
		ctx, cancel := context.WithTimeout(c.stop, c.cfg.HTTPTimeout) // R8
		resp, err := w.sender.send(ctx, b)
		cancel()
		b.attempts++
		c.stats.requests.Add(1)
		now := time.Now()

		var v verdict
		if err != nil {
			if c.stop.Err() != nil {
				// Cancelled on the wire: the server may have it (R40).
				c.handBack(b, err)
				return
			}
			te := &TransportError{Err: err, Retryable: classifyTransportError(err)}
			b.lastErr = te
			if !te.Retryable {
				c.fail(b, te) // R14: deterministic on the client
				return
			}
			v = verdict{outcome: outcomeRetry}
		} else {
			b.lastStatus = resp.status
			v = classifyResponse(resp.status, resp.retryAfter, resp.hasRA, time.Now())
			if v.outcome != outcomeDelivered {
				b.lastErr = &HTTPError{StatusCode: resp.status, Kind: v.kind, Message: resp.text}
			}
			if v.retryAfter == retryAfterInvalid {
				c.log.Warn("unparseable Retry-After; retrying with backoff", // R25, R51
					zap.String("retryAfter", resp.retryAfter), zap.Int("status", resp.status))
			}
		}

		switch v.outcome {
		case outcomeDelivered:
			w.endEpisode()
			c.succeed(b)
			return
		case outcomeFailed:
			w.endEpisode()
			c.fail(b, b.lastErr)
			return
		case outcomeRateLimited:
			c.stats.rateLimited.Add(1)
			episode, opened, exceeded := c.gate.rateLimited(now, v.delay) // R31
			if opened {
				c.log.Debug("rate-limit episode started", zap.Int("status", resp.status), zap.Duration("retryAfter", v.delay)) // R51
			}
			if exceeded {
				w.failRateLimited(b) // R35
				return
			}
			b.episode = episode
			if !c.q.requeue(b) { // R32: front of the queue, intact
				c.handBack(b, nil)
			}
			return
		case outcomeRetry:
			if resp.status != 0 {
				w.endEpisode() // R34 (c); a transport error is no response
			}
			if b.firstFailure.IsZero() {
				b.firstFailure = now
			}
			if b.retries >= c.cfg.MaxRetries { // R27
				c.fail(b, &DeliveryError{Reason: ErrRetriesExhausted, Last: b.lastErr, Attempts: b.attempts})
				return
			}
			if time.Since(b.firstFailure) >= c.cfg.MaxTotalBackoffDuration { // R28, D15
				c.fail(b, &DeliveryError{Reason: ErrBackoffDurationExceeded, Last: b.lastErr, Attempts: b.attempts})
				return
			}
			if b.backoff == nil {
				b.backoff = newBackoff(c.cfg.Backoff)
			}
			d := b.backoff.NextBackOff() // R26: never Stop with MaxElapsedTime 0
			b.retries++
			c.stats.retries.Add(1)
			if !w.sleep(d) {
				c.handBack(b, nil)
				return
			}
		}
	}
}

// passGate waits until the shared gate is open (R32). It returns false when
// the batch got its disposition instead: handed back at shutdown or failed
// because its rate-limit episode ran out (R35).
func (w *consumer) passGate(b *batch) bool {
	c := w.c
	for {
		if c.stop.Err() != nil {
			c.handBack(b, nil)
			return false
		}
		d := c.gate.check(time.Now(), b)
		if d.justExpired {
			c.log.Debug("rate-limit episode exceeded MaxRateLimitDuration")
			w.failRequeued()
		}
		if d.doomed {
			c.fail(b, c.rateLimitErr(b))
			return false
		}
		if d.wait <= 0 {
			return true
		}
		c.stats.rateLimitWaits.Add(1)
		if !w.sleep(d.wait) { // R37
			c.handBack(b, nil)
			return false
		}
	}
}

func (w *consumer) failRateLimited(b *batch) {
	w.c.log.Debug("rate-limit episode exceeded MaxRateLimitDuration")
	w.c.fail(b, w.c.rateLimitErr(b))
	w.failRequeued()
}

// failRequeued fails every batch waiting in the queue to be re-sent (R35).
func (w *consumer) failRequeued() {
	for _, rb := range w.c.q.takeRequeued() {
		w.c.fail(rb, w.c.rateLimitErr(rb))
	}
}

func (w *consumer) endEpisode() {
	if w.c.gate.endEpisode() {
		w.c.log.Debug("rate-limit episode ended")
	}
}

// sleep waits d or until shutdown; it reports whether the wait completed
// (R37: every wait is interruptible, no bare sleeps).
func (w *consumer) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.c.stop.Done():
		return false
	}
}

func newBackoff(p BackoffPolicy) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.InitialInterval),
		backoff.WithMultiplier(p.Multiplier),
		backoff.WithMaxInterval(p.MaxInterval),
		backoff.WithRandomizationFactor(p.RandomizationFactor),
		backoff.WithMaxElapsedTime(p.MaxElapsedTime),
	)
}
