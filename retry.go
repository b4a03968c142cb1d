package analytics

import (
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// The counted-retry policy (docs/delivery.md R26–R28): the budgets a
// consumer checks, and the delay before each counted retry.

// MaxRetryAfter caps a server's Retry-After: longer values are waited as
// this long (R24).
const MaxRetryAfter = 300 * time.Second

// retryPolicy is what the consumer needs of the configuration.
type retryPolicy struct {
	maxRetries      int
	maxBackoffTotal time.Duration
	httpTimeout     time.Duration
	// delay is the wait before the k-th counted retry of a streak (k ≥ 1,
	// R26, R61): the configured backoffPolicy's delay. A shared.Compat
	// RetryDelay does not replace it; it is retryDelay, which compatDelay
	// prefers.
	delay      func(k int) time.Duration
	retryDelay func(k int) time.Duration // shared.Compat RetryDelay; nil: delay
	noRetry    *atomic.Bool              // shared.Compat FastClose: no retry once set; nil without
}

// spent is the counted-retry budget a batch has used up, or nil while it
// may be retried: ErrRetriesExhausted after maxRetries counted retries
// (R27), ErrBackoffDurationExceeded once maxBackoffTotal has passed since
// its first counted failure (R28, D15); retries and failing are the
// batch's (batch.retries, batch.failingFor).
func (p retryPolicy) spent(retries int, failing time.Duration) error {
	if retries >= p.maxRetries {
		return ErrRetriesExhausted
	}
	if failing >= p.maxBackoffTotal {
		return ErrBackoffDurationExceeded
	}
	return nil
}

// compatDelay is the counted-retry delay a shared.Compat RetryDelay sets,
// clamped to the engine's budget; ok is false without one.
func (p retryPolicy) compatDelay(k int) (d time.Duration, ok bool) {
	if p.retryDelay == nil {
		return 0, false
	}
	return min(max(p.retryDelay(k), 0), p.maxBackoffTotal), true
}

// retryWait is the wait of a batch before its counted retry after the
// k-th counted failure in a row of the server (R61): what the
// compatibility configuration sets for retry number retries, the short
// wait d_h while the server is healthy (R61, R63), or else d_k (R26).
func (p retryPolicy) retryWait(retries, k int, healthy bool) time.Duration {
	if d, custom := p.compatDelay(retries); custom {
		return d
	}
	if healthy {
		return healthyWait()
	}
	return p.delay(k)
}

// firstDelay is the wait of a half after a split on repeated 429s (R68):
// the first counted delay (R26's d_1, its own jitter each call), or what
// the compatibility configuration sets for retry number retries.
func (p retryPolicy) firstDelay(retries int) time.Duration {
	if d, custom := p.compatDelay(retries); custom {
		return d
	}
	return p.delay(1)
}

// retriesEnded reports whether retries have ended: Close began on a
// client with shared.Compat FastClose.
func (p retryPolicy) retriesEnded() bool {
	return p.noRetry != nil && p.noRetry.Load()
}

// backoffPolicy describes the counted-retry delays (R26). The client uses
// the values of defaultBackoffPolicy; no option changes them.
type backoffPolicy struct {
	InitialInterval     time.Duration
	Multiplier          float64
	MaxInterval         time.Duration
	RandomizationFactor float64
	// MaxElapsedTime is 0: the library's own limit is disabled because the
	// client enforces MaxRetries and MaxTotalBackoffDuration itself.
	MaxElapsedTime time.Duration
}

// defaultBackoffPolicy returns the backoff of docs/delivery.md §2 (R26): 500 ms × 2 up to
// 60 s, ±10 % jitter, no elapsed-time limit.
func defaultBackoffPolicy() backoffPolicy {
	return backoffPolicy{
		InitialInterval:     500 * time.Millisecond,
		Multiplier:          2,
		MaxInterval:         60 * time.Second,
		RandomizationFactor: 0.1,
		MaxElapsedTime:      0,
	}
}

// delay is the wait before the k-th counted retry of a streak (k ≥ 1; R26,
// R61): the k-th NextBackOff of a fresh ExponentialBackOff of p, a uniform
// draw from [1 − RandomizationFactor, 1 + RandomizationFactor] ×
// min(MaxInterval, InitialInterval × Multiplier^(k−1)). A batch keeps no
// backoff of its own, so k may restart at any time. Past maxBackoffSteps
// the interval is MaxInterval (the policy is fixed: 500 ms × 2 reaches
// 60 s at the 8th step), so no more steps are taken.
func (p backoffPolicy) delay(k int) time.Duration {
	bo := newBackoff(p)
	d := bo.NextBackOff()
	for i := 1; i < min(k, maxBackoffSteps); i++ {
		d = bo.NextBackOff()
	}
	return d
}

// maxBackoffSteps bounds the NextBackOff calls delay makes.
const maxBackoffSteps = 64

// firstWait is the first counted wait d_1 (k = 1, R26), which the release
// of the backlog after a 2xx uses (R62): its nominal value
// (InitialInterval) and the longest draw delay makes of it
// (InitialInterval × (1 + RandomizationFactor)).
func (p backoffPolicy) firstWait() (nominal, longest time.Duration) {
	return p.InitialInterval, p.InitialInterval + time.Duration(float64(p.InitialInterval)*p.RandomizationFactor)
}

// newBackoff is the ExponentialBackOff of p: counted-retry delays and the
// OAuth token source's.
func newBackoff(p backoffPolicy) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.InitialInterval),
		backoff.WithMultiplier(p.Multiplier),
		backoff.WithMaxInterval(p.MaxInterval),
		backoff.WithRandomizationFactor(p.RandomizationFactor),
		backoff.WithMaxElapsedTime(p.MaxElapsedTime),
	)
}
