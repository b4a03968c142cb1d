package analytics

import (
	"context"
	"time"

	"github.com/relaykit/analytics-go/internal/httpbatch"
	"github.com/relaykit/analytics-go/internal/wire"
	"go.uber.org/zap"
)

// What one attempt of a batch is to the engine: the transport interface,
// the verdict it returns (outcome, attemptResult), and the HTTP transport
// (sender), which is internal/httpbatch behind an adapter to the public
// errors of errors.go.

// transport makes one attempt of a batch and judges the answer. The
// engine (consumer.go, ratelimit.go) acts on the judgement alone and
// never reads the protocol behind it: adding a transport is one type that
// implements attempt, with no change to the engine (transport_mem_test.go
// is one, plugged in through settings.newTransport).
//
// The contract of attempt:
//   - Concurrency: each consumer goroutine has its own transport value
//     and calls attempt on it once at a time; state shared between the
//     values of one client must be safe for concurrent use.
//   - b: attempt sends b.events as they are, and b.attempts is the number
//     of earlier attempts of b (0 for the first). It changes nothing of b
//     and keeps nothing of it after it returns.
//   - ctx bounds the attempt: the per-attempt timeout (WithHTTPTimeout)
//     and Close's interruption. Once ctx ends, attempt returns promptly;
//     without an answer, cause says why (the engine hands b back rather
//     than retry it when Close interrupted it, R40).
//   - bearer is the Authorization of an OAuth client (R50), "" without
//     OAuth; reauth reports that the answer refused it.
//   - It does not panic: a panic of the user's code it calls (an
//     http.Client, a response body) is the attempt's cause.
//   - The result: outcome says what happens to b next (each constant
//     says what it means to the engine), err is the error OnError gets if
//     b fails with it (nil when delivered), and status, sent and plainSize
//     are reported to the attempt hook and the logs, and teach the learned
//     limits (plainSize).
type transport interface {
	attempt(ctx context.Context, b *batch, bearer string) attemptResult
}

// outcome is the verdict on one attempt, in terms that do not depend on
// the protocol. A new way of handling an answer is a new outcome here, a
// verdict that yields it (for HTTP, internal/httpbatch's Judge) and a case
// in consumer.attempt; consumer.adapt may take a batch over before its
// outcome is acted on, for what the server's refusals teach (R66–R68).
type outcome int

const (
	outcomeDelivered   outcome = iota // the server took the batch (R9)
	outcomeRetry                      // a counted retry with backoff (R26)
	outcomeRateLimited                // the server asked to wait attemptResult.delay: re-queue and gate, not counted (R31, R32)
	outcomeTooLarge                   // the body was too large; nothing stored: several events are cut, one fails (R3, R67)
	outcomePoison                     // the request was refused as a whole: several events are isolated, one fails (R66)
	outcomeTooMany                    // too many requests without a wait: a counted retry; repeated, a batch is split (R68)
	outcomeFailed                     // not to be retried: OnError with err
)

// retried reports whether o retries the batch, counted or not.
func (o outcome) retried() bool {
	return o == outcomeRetry || o == outcomeRateLimited || o == outcomeTooMany
}

// attemptResult is one attempt's answer, judged: what a consumer acts on
// (see transport for what each field means to it).
type attemptResult struct {
	outcome
	delay     time.Duration // outcomeRateLimited: how long to wait, capped at MaxRetryAfter
	reauth    bool          // the attempt's bearer was refused: the token source drops it (R50)
	err       error         // *HTTPError or *TransportError, unless delivered
	cause     error         // no answer came: the transport error; nil when one came
	status    int           // the protocol's status, 0 without one: for AttemptInfo and the logs only
	sent      int           // the body's size as sent
	plainSize int           // and before compression
}

// sender is the HTTP transport: the body encoding of the client's batches
// and an internal/httpbatch Sender, whose verdict it maps onto the
// engine's outcomes and the public errors. Each consumer owns one.
type sender struct {
	http  *httpbatch.Sender
	frame wire.Frame  // the body around the events: write key, shared.Compat BodyFields, per-event sentAt
	log   *zap.Logger // for the warning about an invalid Retry-After
}

// newSender is a transport that posts batches to the endpoint of cfg, each
// body the events within frame; log gets its warnings.
func newSender(cfg httpbatch.Config, frame wire.Frame, log *zap.Logger) *sender {
	return &sender{http: httpbatch.New(cfg), frame: frame, log: log}
}

// attempt sends b through httpbatch and maps its verdict (fromHTTP).
func (s *sender) attempt(ctx context.Context, b *batch, bearer string) attemptResult {
	// The body: {"batch":[…],"sentAt":…,"writeKey":…}, sentAt being the time
	// of the attempt (R4), on every event too with WithEventSentAt (R59).
	body := func(buf []byte, sentAt time.Time) []byte { return s.frame.Encode(buf, b, sentAt) }
	r := s.http.Send(ctx, httpbatch.Attempt{Body: body, Retry: b.attempts, Bearer: bearer})
	if r.InvalidRetryAfter {
		s.log.Warn("unparseable Retry-After; retrying with backoff", // R25, R51
			zap.String("retryAfter", r.RetryAfter), zap.Int("status", r.Status))
	}
	return fromHTTP(r)
}

// outcomes maps httpbatch's outcomes onto the engine's.
var outcomes = [...]outcome{
	httpbatch.Delivered:   outcomeDelivered,
	httpbatch.Retry:       outcomeRetry,
	httpbatch.RateLimited: outcomeRateLimited,
	httpbatch.TooLarge:    outcomeTooLarge,
	httpbatch.Poison:      outcomePoison,
	httpbatch.TooMany:     outcomeTooMany,
	httpbatch.Failed:      outcomeFailed,
}

// fromHTTP maps an HTTP attempt's result onto the engine's terms and the
// public errors (httpAttemptError, errors.go).
func fromHTTP(r httpbatch.Result) attemptResult {
	a := attemptResult{outcome: outcomes[r.Outcome], delay: r.Delay, reauth: r.Reauth,
		cause: r.Err, status: r.Status, sent: r.Sent, plainSize: r.Plain}
	if r.Outcome != httpbatch.Delivered {
		a.err = httpAttemptError(r)
	}
	return a
}

// maxBodyFields is the most shared.Compat BodyFields may take of a batch:
// the rest still holds one event of MaxEventBytes.
const maxBodyFields = batchEventBytes - MaxEventBytes
