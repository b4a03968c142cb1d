package analytics

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	native "github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/internal/shared"
	"go.uber.org/zap"
)

// Version is the version of the v3 API this package reproduces: the value
// gopkg.in/segmentio/analytics-go.v3 v3.1.0 itself reports. The engine's
// version, which the client sends in context.library and User-Agent, is
// github.com/relaykit/analytics-go's Version.
const Version = "3.0.0"

// DefaultEndpoint is the tracking API a client sends to when
// Config.Endpoint is empty.
const DefaultEndpoint = "https://api.segment.io"

// DefaultInterval is the flush interval when Config.Interval is zero.
const DefaultInterval = 5 * time.Second

// DefaultBatchSize is the number of messages in a full batch when
// Config.BatchSize is zero.
const DefaultBatchSize = 250

// DefaultCloseTimeout bounds Client.Close when Config.CloseTimeout is zero:
// Close delivers what is queued for at most this long, reports what is
// left to Callback.Failure and returns within this plus half a second.
const DefaultCloseTimeout = 10 * time.Second

// Config is the configuration of NewWithConfig. A zero field takes its
// default. The fields of v3 keep their names and meaning; where the engine
// does a thing differently the field says what happens.
type Config struct {
	// Endpoint is the base URL of the tracking API (default
	// DefaultEndpoint); messages are posted to Endpoint + "/v1/batch" (one
	// trailing slash of Endpoint removed). Any value is accepted, as in v3:
	// one that is not an absolute http or https base URL is logged once as
	// a warning, and requests still go to Endpoint + "/v1/batch", where they
	// fail as v3's did (Callback.Failure gets the *url.Error).
	Endpoint string

	// Interval is how long a batch may wait for more messages after its
	// first one before it is sent (default DefaultInterval). v3 sent on a
	// fixed ticker instead; the longest wait is the same. Negative values
	// fail NewWithConfig, as in v3; values over 24 h are logged and used as
	// 24 h.
	Interval time.Duration

	// Transport makes the HTTP requests (default: the engine's own
	// transport, a clone of http.DefaultTransport). Each attempt is bounded
	// by 10 s, as in v3. A Transport that panics or returns a nil response
	// fails that attempt, which is retried; a body that is nil, has a nil
	// reader or panics leaves the status to decide. Nothing of it crashes
	// the program; each panic is logged at ERROR with its stack.
	Transport http.RoundTripper

	// Logger receives the client's log lines. The default (nil) is silent,
	// unless Verbose is set: then the lines go to standard error, as v3's
	// default logger wrote them (StdLogger(log.New(os.Stderr, "segment ",
	// log.LstdFlags))). The write key and message payloads are never
	// logged.
	Logger Logger

	// Callback receives the outcome of every accepted message (default:
	// none).
	Callback Callback

	// BatchSize is the number of messages that closes a batch (default
	// DefaultBatchSize). A batch is also closed before it reaches 500 000
	// bytes. Negative values fail NewWithConfig, as in v3; values over
	// 10 000 are logged and used as 10 000.
	BatchSize int

	// Verbose sends debug lines to Logger.Logf too. Without a Logger it
	// logs to standard error (see Logger).
	Verbose bool

	// DefaultContext is sent once per request, as v3 did: it is the
	// request body's top-level "context" object, with Library replaced by
	// this client's name and version (in a copy: the value is not
	// modified). Events carry only their own Context. A DefaultContext
	// that cannot be encoded as JSON makes every message fail: Enqueue
	// returns nil and Callback.Failure receives the *json.MarshalerError.
	// It counts in every request's 500 000 bytes: one so large that no
	// message of 32 KiB would fit beside it (about 440 KB of JSON) is
	// logged once, and every message fails the same way.
	DefaultContext *Context

	// RetryAfter, when set, is the wait before each counted retry: the
	// k-th retry of a batch waits RetryAfter(k-1), as in v3. Negative
	// values count as 0, values above 12 h as 12 h. The default (nil) is
	// v3's: 100 ms × 2^(k-1), capped at 10 s, without jitter, so a batch
	// that never gets through fails after 42.7 s of waits, as in v3.
	// Either way a batch makes at most 10 counted retries (see
	// NativeOptions to change that), a usable Retry-After from the server
	// is waited instead and counts as no retry (v3 ignored it; see the
	// migration guide for how that changes the time to Failure), and
	// responses that cannot succeed (most 4xx) are not retried. A
	// RetryAfter that panics is logged at ERROR with its stack, and that
	// retry waits v3's default instead.
	RetryAfter func(int) time.Duration

	// DrainOnClose makes Close deliver the way the engine does: it retries
	// failed batches with the normal policy until every message has its
	// outcome or CloseTimeout ends. By default (false) Close behaves as
	// v3's: it sends what is queued once, waits for no retry, and reports
	// every message not delivered to Callback.Failure at once. Not in v3.
	DrainOnClose bool

	// CloseTimeout bounds Client.Close (default DefaultCloseTimeout): Close
	// returns within CloseTimeout plus 0.5 s, reporting every message it
	// could not deliver by then to Callback.Failure. Without DrainOnClose it
	// only matters when a request hangs or a Callback method does not
	// return. Negative values fail NewWithConfig. Not in v3.
	CloseTimeout time.Duration

	// NativeOptions are options of the engine
	// (github.com/relaykit/analytics-go), applied after those derived from
	// the fields above, so they win: for example
	// analytics.WithQueueCapacity, WithMaxRetries, WithGzip. Do not pass
	// WithOnSuccess or WithOnError here: they would replace the Callback
	// plumbing. Not in v3.
	NativeOptions []native.Option

	// The seams v3's own tests set: the message id and clock that stamp
	// messages (default: random UUIDs, time.Now), and the number of
	// requests in flight at once (default: the engine's 8 upload
	// goroutines).
	uid                   func() string
	now                   func() time.Time
	maxConcurrentRequests int
}

// ConfigError is returned by NewWithConfig when a field of Config has an
// impossible value.
type ConfigError struct {
	// Reason explains why the value is invalid.
	Reason string

	// Field names the Config field, for example "Interval". An empty write
	// key is reported with Field "WriteKey".
	Field string

	// Value is the invalid value.
	Value interface{}
}

// Error names the field, its value and the reason.
func (e ConfigError) Error() string {
	return fmt.Sprintf("analytics.NewWithConfig: %s (analytics.Config.%s: %#v)", e.Reason, e.Field, e.Value)
}

var (
	// ErrClosed is returned by Client.Enqueue after Close was called (also
	// to a call that was waiting for room in the queue when Close began),
	// and by a second Close.
	ErrClosed = errors.New("the client was already closed")

	// ErrTooManyRequests is kept for compatibility: v3 reported it when
	// 1000 requests were in flight. This client has a fixed number of
	// upload goroutines and never reports it.
	ErrTooManyRequests = errors.New("too many requests are already in-flight")

	// ErrMessageTooBig is returned by Client.Enqueue, and passed to
	// Callback.Failure, for a message larger than 32 KiB of JSON. The
	// returned error wraps it together with the engine's ErrEventTooLarge.
	ErrMessageTooBig = errors.New("the message exceeds the maximum allowed size")
)

// v3MaxRetries is the number of counted retries of a batch, as in v3 (10
// attempts in all there; 10 retries after the first attempt here), whatever
// the engine's default. NativeOptions can change it.
const v3MaxRetries = 10

// v3RetryAfter is v3's wait before retry k+1 (k from 0) when
// Config.RetryAfter is nil: its backoff's default, 100 ms × 2^k capped at
// 10 s, without jitter. v3 also waited that long after its last attempt, so
// over its 10 attempts a batch that never got through failed after 42.7 s;
// the 10 retries here wait the same 10 waits.
func v3RetryAfter(k int) time.Duration {
	if k >= 7 { // 12.8 s and up: capped (and no shift overflows)
		return 10 * time.Second
	}
	return min(100*time.Millisecond<<k, 10*time.Second)
}

// options translates c into the engine's options; c has passed validate
// and accept. log is the client's logger (see logger), cl the client that
// receives the outcomes and batchFields the request body's extra top-level
// members (see bodyFields).
func (c Config) options(log *zap.Logger, cl *client, batchFields []byte) []native.Option {
	closeTimeout := c.CloseTimeout
	if closeTimeout == 0 {
		closeTimeout = DefaultCloseTimeout
	}
	compat := shared.Compat{
		BodyFields:  batchFields,
		NoLibrary:   true,
		FastClose:   !c.DrainOnClose,
		AnyWriteKey: true,
		AnyEndpoint: true,
		RetryDelay:  v3RetryAfter,
		// v3 retried each batch on its own schedule: a burst of failing
		// batches must not wait longer than with v3 for its Failure calls.
		NoRetryAllowance: true,
		SuccessName:      "Callback.Success",
		ErrorName:        "Callback.Failure",
	}
	if c.RetryAfter != nil {
		compat.RetryDelay = cl.retryDelay(c.RetryAfter)
	}
	opts := []native.Option{
		native.WithLogger(log),
		shared.CompatOption(compat).(native.Option),
		native.WithMaxRetries(v3MaxRetries),
		native.WithCloseTimeout(closeTimeout),
	}
	if c.Endpoint != "" {
		opts = append(opts, native.WithEndpoint(c.Endpoint))
	}
	if c.Interval > 0 {
		opts = append(opts, native.WithFlushInterval(c.Interval))
	}
	if c.BatchSize > 0 {
		opts = append(opts, native.WithFlushAt(c.BatchSize))
	}
	if c.Transport != nil {
		opts = append(opts, native.WithHTTPClient(&http.Client{Transport: c.Transport}))
	}
	if c.Callback != nil {
		opts = append(opts, native.WithOnSuccess(cl.delivered), native.WithOnError(cl.failed))
	}
	if c.maxConcurrentRequests > 0 {
		opts = append(opts, native.WithConsumers(min(c.maxConcurrentRequests, native.MaxConsumers)))
	}
	return append(opts, c.NativeOptions...)
}

// validate refuses what v3's NewWithConfig refused (a negative Interval or
// BatchSize) and a negative CloseTimeout, which v3 did not have.
func (c Config) validate() error {
	switch {
	case c.Interval < 0:
		return ConfigError{Reason: "negative time intervals are not supported", Field: "Interval", Value: c.Interval}
	case c.BatchSize < 0:
		return ConfigError{Reason: "negative batch sizes are not supported", Field: "BatchSize", Value: c.BatchSize}
	case c.CloseTimeout < 0:
		return ConfigError{Reason: "negative time intervals are not supported", Field: "CloseTimeout", Value: c.CloseTimeout}
	}
	return nil
}

// accept returns c with what v3 accepted and the engine cannot take
// brought into the engine's range, logging one warning for each value
// that is wrong or changed. An Endpoint that is not an API base URL is
// kept: requests go where v3 sent them, and fail there as they did.
func (c Config) accept(log *zap.Logger) Config {
	if c.Endpoint != "" {
		var ce *native.ConfigError
		if err := shared.CheckEndpoint(c.Endpoint); errors.As(err, &ce) {
			log.Warn("analytics: Config.Endpoint "+ce.Reason+"; messages are posted to it + /v1/batch as v3 did, "+
				"and each one that is not delivered there goes to Callback.Failure", zap.Any("endpoint", ce.Value))
		}
	}
	if c.Interval > native.MaxFlushInterval {
		log.Warn("analytics: Config.Interval is longer than the engine allows; using its maximum",
			zap.Duration("interval", c.Interval), zap.Duration("used", native.MaxFlushInterval))
		c.Interval = native.MaxFlushInterval
	}
	if c.BatchSize > native.MaxFlushAt {
		log.Warn("analytics: Config.BatchSize is larger than the engine allows; using its maximum "+
			"(a batch also closes before 500 000 bytes, as in v3)",
			zap.Int("batchSize", c.BatchSize), zap.Int("used", native.MaxFlushAt))
		c.BatchSize = native.MaxFlushAt
	}
	return c
}

// logger is the client's logger: Logger, with debug lines when Verbose,
// or standard error when Verbose is set without one (see zapLogger).
func (c Config) logger() *zap.Logger { return zapLogger(c.Logger, c.Verbose) }

// bodyFields returns the request body's extra top-level members: the
// "context" member with DefaultContext (see requestContext). When
// DefaultContext cannot be encoded, or leaves no room for a message in a
// request (which is logged once at WARN), it returns instead the error
// every message fails with.
func (c Config) bodyFields(log *zap.Logger) ([]byte, error) {
	fields, err := requestContext(c.DefaultContext)
	switch {
	case err != nil:
		return nil, err
	case len(fields)+len(`"context":`) > shared.MaxBodyFields:
		// v3 sent it, and the API refused every request larger than it takes.
		err = fmt.Errorf("analytics: Config.DefaultContext encodes to %d bytes of JSON, "+
			"more than a request can carry beside a message (%d)", len(fields), shared.MaxBodyFields-len(`"context":`))
		log.Warn(err.Error() + "; every message goes to Callback.Failure")
		return nil, err
	}
	return append([]byte(`"context":`), fields...), nil
}

// describe is the debug line NewWithConfig logs: how the client waits
// before a retry and how Close ends.
func (c Config) describe() string {
	retries := "v3's, 100ms doubling up to 10s"
	if c.RetryAfter != nil {
		retries = "Config.RetryAfter"
	}
	closing := "waits for no retry"
	if c.DrainOnClose {
		closing = "retries until every message has its outcome"
	}
	return "segment v3 compatibility: waits before a retry are " + retries + "; Close " + closing
}

// refused is the ConfigError NewWithConfig returns for the engine's ce.
func (c Config) refused(ce *native.ConfigError) ConfigError {
	return ConfigError{Reason: ce.Reason, Field: ce.Field, Value: c.value(ce)}
}

// value is the value a ConfigError of the engine reports, taken from c
// (the engine's own Value may be a description of it).
func (c Config) value(ce *native.ConfigError) interface{} {
	switch ce.Field {
	case "Endpoint":
		return c.Endpoint
	case "Interval", "FlushInterval":
		return c.Interval
	case "BatchSize", "FlushAt":
		return c.BatchSize
	}
	return ce.Value
}
