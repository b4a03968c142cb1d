package analytics

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/relaykit/analytics-go/internal/httpbatch"
	"github.com/relaykit/analytics-go/internal/shared"
	"github.com/relaykit/analytics-go/internal/wire"
	"go.uber.org/zap"
)

// Defaults of the configuration (docs/delivery.md §2). Each can be changed with the
// matching With… option; an unset option takes the default.
const (
	// DefaultEndpoint is the tracking API the client sends to.
	DefaultEndpoint = "https://api.segment.io"
	// DefaultFlushAt is the number of events that closes a batch.
	DefaultFlushAt = 250
	// DefaultFlushInterval is how long a batch may stay open after its first event.
	DefaultFlushInterval = 5 * time.Second
	// DefaultQueueCapacity is how many accepted events the client may hold
	// while they are not on the wire (see WithQueueCapacity). It is the
	// client's memory bound in an outage (about 23 MB of heap for 30 000
	// held events of ~300 bytes) and what keeps a flat-out producer moving
	// while batches wait for a retry; a backfill through EnqueueContext
	// holds far fewer (R71).
	DefaultQueueCapacity = 30_000
	// DefaultDurableQueueCapacity is the default QueueCapacity with
	// WithDiskBuffer. There it bounds only the events held in memory: the
	// disk holds what does not fit (R70), so memory needs only enough to
	// keep the consumers busy. Measured in a 30 s outage at 20 000 ev/s:
	// peak heap 17 MB at 10 000, 26 MB at 30 000, nothing rejected either
	// way and the backlog delivered as fast. WithQueueCapacity overrides it.
	DefaultDurableQueueCapacity = 10_000
	// DefaultConsumers is the number of upload goroutines. They send
	// batches concurrently; a batch waiting for a retry holds none of them
	// (R29).
	DefaultConsumers = 8
	// DefaultHTTPTimeout bounds one HTTP attempt.
	DefaultHTTPTimeout = 10 * time.Second
	// DefaultMaxRetries is the number of counted (backoff) retries of a batch.
	DefaultMaxRetries = 1000
	// DefaultMaxTotalBackoffDuration bounds the time from a batch's first
	// counted failure to its last counted retry decision.
	DefaultMaxTotalBackoffDuration = 12 * time.Hour
	// DefaultMaxRateLimitDuration bounds one rate-limit episode.
	DefaultMaxRateLimitDuration = 12 * time.Hour
	// DefaultCloseTimeout bounds Close when its context has no deadline
	// (see WithCloseTimeout).
	DefaultCloseTimeout = 30 * time.Second

	// MaxRetryAfter caps a server's Retry-After: longer values are waited as
	// this long (R24).
	MaxRetryAfter = 300 * time.Second
	// MaxEventBytes is the largest accepted event, as encoded JSON (R45).
	MaxEventBytes = 32 * 1024
	// MaxBatchBytes is the largest request body the client sends (R45).
	MaxBatchBytes = 500_000

	// batchEventBytes is where a batch closes: its events (with separators
	// and, with WithEventSentAt, their sentAt) and the shared.Compat
	// BodyFields never exceed it, leaving room in MaxBatchBytes for the
	// rest of the frame (wire.Frame.Size).
	batchEventBytes = 475_000
)

// Config is the effective configuration of a Client, as returned by
// Client.Config. It never contains the write key, and Endpoint has its user
// information (a password) replaced by xxxxx, so it is safe to log in any
// form or to attach to a support request.
type Config struct {
	Endpoint                string
	FlushAt                 int
	FlushInterval           time.Duration
	QueueCapacity           int
	Consumers               int
	HTTPTimeout             time.Duration
	MaxRetries              int
	MaxTotalBackoffDuration time.Duration
	MaxRateLimitDuration    time.Duration
	Gzip                    bool
	backoff                 backoffPolicy
	MaxEventBytes           int
	MaxBatchBytes           int
	// CustomHTTPClient reports whether WithHTTPClient was used.
	CustomHTTPClient bool
	// EventSentAt reports whether every event also carries the attempt's
	// sentAt (WithEventSentAt; default false).
	EventSentAt bool
	// CloseTimeout bounds a Close whose context has no deadline
	// (WithCloseTimeout); 0 means nothing does.
	CloseTimeout time.Duration
	// DiskBuffer is the directory of the disk buffer (WithDiskBuffer): not
	// empty exactly when the client is in durable mode.
	DiskBuffer string
	// DiskLimit is the most bytes the disk buffer's files may take
	// (WithDiskLimit); 0 when DiskBuffer is empty.
	DiskLimit int64
}

// String renders the configuration on one line for logs; user information
// in the endpoint URL (a password) is shown as xxxxx.
func (c Config) String() string {
	disk := "diskBuffer=off"
	if c.DiskBuffer != "" {
		disk = fmt.Sprintf("diskBuffer=%q diskLimit=%d", c.DiskBuffer, c.DiskLimit)
	}
	return fmt.Sprintf("endpoint=%s flushAt=%d flushInterval=%s queueCapacity=%d consumers=%d httpTimeout=%s "+
		"maxRetries=%d maxTotalBackoffDuration=%s maxRateLimitDuration=%s gzip=%t eventSentAt=%t closeTimeout=%s %s",
		redactURL(c.Endpoint), c.FlushAt, c.FlushInterval, c.QueueCapacity, c.Consumers, c.HTTPTimeout,
		c.MaxRetries, c.MaxTotalBackoffDuration, c.MaxRateLimitDuration, c.Gzip, c.EventSentAt, c.CloseTimeout, disk)
}

// ConfigError reports an invalid option given to New. Field names the
// setting (for example "MaxRetries").
type ConfigError struct {
	Field  string
	Value  any
	Reason string
}

// Error names the field, its value and the reason. User information in a
// URL value (a password) is shown as xxxxx.
func (e *ConfigError) Error() string {
	v := e.Value
	if u, ok := v.(string); ok {
		v = redactURL(u)
	}
	return fmt.Sprintf("analytics: invalid %s (%v): %s", e.Field, v, e.Reason)
}

// settings is everything New needs; options write into it.
type settings struct {
	Config
	writeKey   string
	httpClient *http.Client
	// httpClientNil: the last WithHTTPClient was given nil (checked by validate).
	httpClientNil bool
	logger        *zap.Logger
	onSuccess     func(events []Message)
	onError       func(err error, events []Message)
	oauth         *oauthSettings // WithOAuth; nil: Basic auth with the write key
	disk          *diskSettings  // WithDiskBuffer; nil in memory mode
	capacitySet   bool           // WithQueueCapacity was given (else durable mode takes DefaultDurableQueueCapacity)
	rampOff       bool           // tests only: R67's ramp is over from the start (batches close at the configured sizes)
	errs          []error

	defaultContext, defaultProperties map[string]any    // see defaults.go
	attemptHook                       func(AttemptInfo) // WithAttemptHook
	compat                            shared.Compat     // the segmentv3 seams (see the init below)
	// newTransport, when set (by tests), makes each consumer's transport
	// instead of the HTTP one (request.go).
	newTransport func() transport
}

// Option configures a Client in New. Options are applied in order; a later
// option overrides an earlier one, and only the final values are validated
// (WithFlushAt(0), WithFlushAt(10) is valid).
type Option interface {
	apply(*settings)
}

type optionFunc func(*settings)

func (f optionFunc) apply(s *settings) { f(s) }

func invalid(field string, value any, reason string) *ConfigError {
	return &ConfigError{Field: field, Value: value, Reason: reason}
}

// WithEndpoint sets the base URL of the tracking API (default
// DefaultEndpoint). The client posts to Endpoint + "/v1/batch"; one trailing
// slash is removed (R1). It must be an absolute http or https base URL,
// such as "https://api.segment.io", without /v1/batch or /v1, a second
// trailing slash, a query or a fragment; otherwise New returns a
// *ConfigError that says so.
func WithEndpoint(endpoint string) Option {
	return optionFunc(func(s *settings) { s.Endpoint = endpoint })
}

// WithFlushAt sets how many events close a batch (default 250; from 1 to
// MaxFlushAt).
func WithFlushAt(n int) Option {
	return optionFunc(func(s *settings) { s.FlushAt = n })
}

// WithFlushInterval sets how long a batch may stay open after its first
// event was accepted (default 5 s; positive, at most MaxFlushInterval)
// (R46).
func WithFlushInterval(d time.Duration) Option {
	return optionFunc(func(s *settings) { s.FlushInterval = d })
}

// WithQueueCapacity sets how many accepted events the client may hold
// while they are not on the wire (default 30 000, DefaultQueueCapacity;
// with WithDiskBuffer 10 000 in memory, DefaultDurableQueueCapacity; from
// 1 to MaxQueueCapacity): queued, in an open batch, or in a batch waiting in
// the waiting room for a backoff or rate-limit retry. When that many are
// held, enqueue calls return ErrQueueFull (EnqueueContext waits). Only
// events in a request in flight do not count (R43, R44). A batch that has
// to wait never causes ErrQueueFull itself, but it keeps its room, so
// during an outage new events are rejected instead of memory growing.
func WithQueueCapacity(n int) Option {
	return optionFunc(func(s *settings) { s.QueueCapacity, s.capacitySet = n, true })
}

// WithConsumers sets the number of upload goroutines (default 8; from 1 to
// MaxConsumers). All of them share one queue and one rate-limit gate.
func WithConsumers(n int) Option {
	return optionFunc(func(s *settings) { s.Consumers = n })
}

// WithHTTPTimeout bounds each HTTP attempt (default 10 s; positive, at most
// MaxHTTPTimeout). A timed-out attempt is a retryable transport error (R8,
// R14).
func WithHTTPTimeout(d time.Duration) Option {
	return optionFunc(func(s *settings) { s.HTTPTimeout = d })
}

// WithMaxRetries sets how many counted (backoff) retries a batch may make
// (default 1000; from 0 to MaxRetriesBound). 0 means one attempt and no counted
// retry. Retries asked for by a usable Retry-After never count (R27, R30).
// With the default, MaxTotalBackoffDuration is the bound that matters.
func WithMaxRetries(n int) Option {
	return optionFunc(func(s *settings) { s.MaxRetries = n })
}

// WithMaxTotalBackoffDuration bounds the time from a batch's first counted
// failure to a counted retry decision (default 12 h): when at least this much
// has elapsed, the batch fails with ErrBackoffDurationExceeded. 0 means no
// counted retry; negative values and values above MaxTotalBackoffDurationBound
// fail New (R28). With the default MaxRetries (1000) this is the bound that
// ends a long outage: waits during a failure streak reach about 60 s, so a
// thousand retries take more than 16 h.
func WithMaxTotalBackoffDuration(d time.Duration) Option {
	return optionFunc(func(s *settings) { s.MaxTotalBackoffDuration = d })
}

// WithMaxRateLimitDuration bounds a rate-limit episode (default 12 h): when
// the server has kept answering with a usable Retry-After for this long,
// every batch waiting to be re-sent fails with ErrRateLimitDurationExceeded
// and sending resumes. 0 fails a batch at its first usable Retry-After;
// negative values and values above MaxRateLimitDurationBound fail New (R35).
func WithMaxRateLimitDuration(d time.Duration) Option {
	return optionFunc(func(s *settings) { s.MaxRateLimitDuration = d })
}

// WithCloseTimeout bounds a Close whose context has no deadline (default
// DefaultCloseTimeout, 30 s; from 0 to MaxCloseTimeout): such a Close is
// interrupted CloseTimeout after it was called, or when its context is
// cancelled if that comes first, and returns within 0.5 s of that (R39).
// So Close(context.Background()) cannot run for hours against a dead
// endpoint. A context with a deadline is bounded by its deadline alone,
// whether it is shorter or longer than CloseTimeout. 0 leaves a Close
// without a deadline unbounded.
func WithCloseTimeout(d time.Duration) Option {
	return optionFunc(func(s *settings) { s.CloseTimeout = d })
}

// WithGzip compresses request bodies and sets Content-Encoding: gzip
// (default off).
func WithGzip(enabled bool) Option {
	return optionFunc(func(s *settings) { s.Gzip = enabled })
}

// WithHTTPClient sets the HTTP client used for uploads (default: a client
// with a clone of http.DefaultTransport, or with http.DefaultTransport
// itself when a program replaced it by a RoundTripper that is not an
// *http.Transport, as httpmock.Activate does). The client is copied, not changed:
// the copy gets the SDK's redirect policy (307/308 followed within the
// origin only, every other 3xx reported as a failure, R11). Per-attempt timeouts come from
// WithHTTPTimeout; the client's own Timeout, if set, also applies. A nil
// client fails New. A RoundTripper that panics or returns a nil response
// fails that attempt as a retryable *TransportError, and a response body
// that is nil, has a nil reader or panics leaves the status to decide; the
// panic is logged at ERROR with its stack (docs/delivery.md R56).
func WithHTTPClient(c *http.Client) Option {
	return optionFunc(func(s *settings) {
		s.httpClient, s.httpClientNil = c, c == nil
	})
}

// WithLogger sets the logger (default zap.NewNop: silent). The client never
// logs the write key or event payloads. A nil logger fails New. A logger
// whose core panics loses that line; the client goes on.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(s *settings) {
		s.logger = l
	})
}

// WithOnSuccess registers the callback for delivered events: it is called
// once per batch answered 2xx, with that batch's events. See Callbacks for
// the threading contract.
func WithOnSuccess(f func(events []Message)) Option {
	return optionFunc(func(s *settings) { s.onSuccess = f })
}

// WithOnError registers the callback for events that were not delivered:
// failed (any error but ErrShutdownInterrupted) or handed back at shutdown
// (errors.Is(err, ErrShutdownInterrupted)). Each accepted event that is not
// delivered appears in exactly one call. In durable mode (WithDiskBuffer)
// an event Close keeps on disk is not handed back through OnError: it is
// sent by the next client, whose callback is its outcome, so a dead-letter
// writer sees each event that truly failed once, whatever the restarts.
// See Callbacks for the threading contract.
//
// With OnError alone, the client keeps no copy of the message at enqueue
// (enqueue then costs what it costs without callbacks, and a held event is
// no larger): the messages are rebuilt from the event's JSON when the
// failure or hand-back happens. A rebuilt message has the type that was
// sent (Track, Identify, … as a value, also for a pointer), every field
// the caller set, the stamped MessageID and Timestamp (in UTC), and its
// maps hold the values as they were sent, with these differences from the
// caller's original:
//   - a number without a fraction or exponent in the JSON is an int (a
//     float64 such as 2.0 included), every other number a float64;
//   - nested objects are map[string]any and arrays []any; a time.Time, a
//     json.Number, a json.RawMessage or a value with its own MarshalJSON
//     comes back as what its JSON decodes to (a string, a number, a map …);
//   - Context includes the "library" entry the client added, and, like
//     Properties, the default entries (WithDefaultContext,
//     WithDefaultProperties);
//   - a map that was empty stays an empty map, a nil one stays nil (except
//     Context, which always has "library").
//
// Rebuilding decodes the JSON (tens of microseconds and about 50
// allocations per event), paid only for events that fail or are handed
// back; a Close that hands back a long queue spends that time before the
// last OnError call returns. With WithOnSuccess registered as well, every
// event carries a copy made at enqueue instead (see Message), and OnError
// gets those copies.
//
// To keep undelivered events and send them again later, write each with
// json.Marshal (the wire format, one JSON object per line) and read it
// back with UnmarshalMessage: it keeps MessageID and Timestamp, so the API
// drops a repeat (see ExampleUnmarshalMessage).
func WithOnError(f func(err error, events []Message)) Option {
	return optionFunc(func(s *settings) { s.onError = f })
}

func defaultSettings(writeKey string) settings {
	return settings{
		Config: Config{
			Endpoint:                DefaultEndpoint,
			FlushAt:                 DefaultFlushAt,
			FlushInterval:           DefaultFlushInterval,
			QueueCapacity:           DefaultQueueCapacity,
			Consumers:               DefaultConsumers,
			HTTPTimeout:             DefaultHTTPTimeout,
			MaxRetries:              DefaultMaxRetries,
			MaxTotalBackoffDuration: DefaultMaxTotalBackoffDuration,
			MaxRateLimitDuration:    DefaultMaxRateLimitDuration,
			CloseTimeout:            DefaultCloseTimeout,
			backoff:                 defaultBackoffPolicy(),
			MaxEventBytes:           MaxEventBytes,
			MaxBatchBytes:           MaxBatchBytes,
		},
		writeKey: writeKey,
		logger:   zap.NewNop(),
	}
}

// resolve applies the options and validates the result; the first error
// names its field.
func resolve(writeKey string, opts []Option) (settings, error) {
	s := defaultSettings(writeKey)
	for _, o := range opts {
		if o == nil {
			return s, invalid("Option", nil, "must not be nil")
		}
		o.apply(&s)
	}
	if s.disk != nil && !s.capacitySet {
		s.QueueCapacity = DefaultDurableQueueCapacity // the disk is the buffer (R70)
	}
	if err := s.validate(); err != nil { // final values only
		return s, err
	}
	if len(s.errs) > 0 {
		return s, s.errs[0]
	}
	if strings.TrimSpace(writeKey) == "" && !s.compat.AnyWriteKey {
		return s, invalid("WriteKey", `""`, "must not be empty")
	}
	// Refused, not trimmed: a key read from a secret file with its newline
	// would otherwise get a 401 on every request, and trimming silently
	// would hide a secret that is broken where it is stored.
	if strings.TrimSpace(writeKey) != writeKey && !s.compat.AnyWriteKey {
		return s, invalid("WriteKey", "redacted", "has leading or trailing whitespace (a newline from a secret file?); "+
			"trim it before calling New, e.g. strings.TrimSpace")
	}
	s.Endpoint = strings.TrimSuffix(s.Endpoint, "/") // R1
	if err := checkEndpoint(s.Endpoint); err != nil && !s.compat.AnyEndpoint {
		return s, err
	}
	s.CustomHTTPClient = s.httpClient != nil
	s.logger = guardLogger(s.logger) // a logger that panics loses a line, nothing else (guard.go)
	return s, nil
}

// Upper bounds of the numeric options. New returns a *ConfigError naming
// the field for a value above its bound (or below its lower bound, given
// with each option). The bounds keep every size and count the client
// derives from an option far from overflow, on 32-bit platforms too, and
// are far above any useful setting.
const (
	// MaxFlushAt bounds WithFlushAt (events per batch).
	MaxFlushAt = 10_000
	// MaxQueueCapacity bounds WithQueueCapacity (events waiting for a consumer).
	MaxQueueCapacity = 1_000_000
	// MaxConsumers bounds WithConsumers (upload goroutines).
	MaxConsumers = 1_000
	// MaxRetriesBound bounds WithMaxRetries (counted retries of a batch).
	MaxRetriesBound = 1_000
	// MaxFlushInterval bounds WithFlushInterval.
	MaxFlushInterval = 24 * time.Hour
	// MaxHTTPTimeout bounds WithHTTPTimeout (one attempt).
	MaxHTTPTimeout = time.Hour
	// MaxTotalBackoffDurationBound bounds WithMaxTotalBackoffDuration.
	MaxTotalBackoffDurationBound = 7 * 24 * time.Hour
	// MaxRateLimitDurationBound bounds WithMaxRateLimitDuration.
	MaxRateLimitDurationBound = 7 * 24 * time.Hour
	// MaxCloseTimeout bounds WithCloseTimeout.
	MaxCloseTimeout = 24 * time.Hour
)

// validate checks the final settings, after every option was applied, so
// a later option overrides an earlier invalid one. The first error names
// its field.
func (s *settings) validate() error {
	ints := []struct {
		field   string
		v, lo   int
		hi      int
		maxName string
	}{
		{"FlushAt", s.FlushAt, 1, MaxFlushAt, "MaxFlushAt"},
		{"QueueCapacity", s.QueueCapacity, 1, MaxQueueCapacity, "MaxQueueCapacity"},
		{"Consumers", s.Consumers, 1, MaxConsumers, "MaxConsumers"},
		{"MaxRetries", s.MaxRetries, 0, MaxRetriesBound, "MaxRetriesBound"},
	}
	for _, c := range ints {
		switch {
		case c.v < c.lo && c.lo == 0:
			return invalid(c.field, c.v, "must not be negative")
		case c.v < c.lo:
			return invalid(c.field, c.v, fmt.Sprintf("must be at least %d", c.lo))
		case c.v > c.hi:
			return invalid(c.field, c.v, fmt.Sprintf("must be at most %d (%s)", c.hi, c.maxName))
		}
	}
	durations := []struct {
		field    string
		v        time.Duration
		positive bool // else 0 is allowed
		hi       time.Duration
		maxName  string
	}{
		{"FlushInterval", s.FlushInterval, true, MaxFlushInterval, "MaxFlushInterval"},
		{"HTTPTimeout", s.HTTPTimeout, true, MaxHTTPTimeout, "MaxHTTPTimeout"},
		{"MaxTotalBackoffDuration", s.MaxTotalBackoffDuration, false, MaxTotalBackoffDurationBound, "MaxTotalBackoffDurationBound"},
		{"MaxRateLimitDuration", s.MaxRateLimitDuration, false, MaxRateLimitDurationBound, "MaxRateLimitDurationBound"},
		{"CloseTimeout", s.CloseTimeout, false, MaxCloseTimeout, "MaxCloseTimeout"},
	}
	for _, c := range durations {
		switch {
		case c.positive && c.v <= 0:
			return invalid(c.field, c.v, "must be positive")
		case c.v < 0:
			return invalid(c.field, c.v, "must not be negative")
		case c.v > c.hi:
			return invalid(c.field, c.v, fmt.Sprintf("must be at most %v (%s)", c.hi, c.maxName))
		}
	}
	if s.httpClientNil {
		return invalid("HTTPClient", nil, "must not be nil")
	}
	if s.logger == nil {
		return invalid("Logger", nil, "must not be nil")
	}
	return nil
}

// checkEndpoint validates the endpoint (one trailing slash already
// removed): an absolute http or https base URL, without the /v1/batch path
// the client appends (or its /v1), a second trailing slash, a query or a
// fragment.
func checkEndpoint(endpoint string) error {
	shown := redactURL(endpoint)
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid("Endpoint", shown, "must be an absolute http or https URL, such as "+DefaultEndpoint)
	}
	if strings.HasSuffix(strings.ToLower(u.Path), "/v1/batch") {
		return invalid("Endpoint", shown, "must be the base URL of the API, such as "+DefaultEndpoint+
			", without /v1/batch (the client appends it)")
	}
	if strings.HasSuffix(strings.ToLower(u.Path), "/v1") {
		return invalid("Endpoint", shown, "must be the base URL of the API, such as "+DefaultEndpoint+
			", without /v1 (the client appends /v1/batch)")
	}
	if strings.HasSuffix(endpoint, "/") {
		return invalid("Endpoint", shown, "must not end in // (the client would post to //v1/batch); "+
			"give the base URL, such as "+DefaultEndpoint)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(endpoint, "#") {
		return invalid("Endpoint", shown, "must be the base URL of the API, such as "+DefaultEndpoint+
			", without a query or fragment")
	}
	return nil
}

// redactURL hides the user information (user name and password) of a URL,
// parseable or not, so that it can be logged.
func redactURL(raw string) string { return httpbatch.RedactURL(raw) }

// Seams for the segment v3 compatibility package (segmentv3) and for
// analyticstest's Fake. They are reached through internal/shared, so they
// are not part of this package's API; see shared.Compat for what each
// compatibility setting does.

func init() {
	shared.CompatOption = func(c shared.Compat) any {
		return optionFunc(func(s *settings) {
			if len(c.BodyFields) > 0 && !wire.ValidExtra(c.BodyFields, maxBodyFields) {
				s.errs = append(s.errs, invalid("BodyFields", len(c.BodyFields), "must be at most shared.MaxBodyFields bytes of JSON object members"))
			}
			s.compat = c
		})
	}
	shared.MaxBodyFields = maxBodyFields
	shared.CheckEndpoint = func(endpoint string) error {
		return checkEndpoint(strings.TrimSuffix(endpoint, "/"))
	}
	shared.Prepare = func(m any, now func() time.Time, newID func() string) (any, error) {
		msg, _ := m.(Message) // nil or not a Message: rejected as unknown below
		return prepareDetached(msg, now, newID)
	}
	shared.Decode = func(raw []byte) (any, error) { return decodeMessage(raw) }
}
