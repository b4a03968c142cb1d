package analytics

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/relaykit/analytics-go/internal/httpbatch"
	"github.com/relaykit/analytics-go/internal/shared"
	"github.com/relaykit/analytics-go/internal/wire"
	"go.uber.org/zap"
)

// Defaults of the configuration (docs/delivery.md §2). Each can be changed with the
// matching With… option; an unset option takes the default.
const (
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

	defaultContext, defaultProperties map[string]any    // WithDefaultContext, WithDefaultProperties (see defaults)
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

// WithAttemptHook registers f, called once after every HTTP attempt with
// its description, for metrics such as request duration and batch size
// (package analyticsotel uses it). Default: none, and then attempts are
// not timed at all.
//
// f runs on the consumer goroutine that made the attempt, before the
// attempt's outcome is settled (so before OnSuccess or OnError for that
// batch); calls from different consumers may run concurrently. It must
// return quickly and must not call the client's Flush or Close. A panic in
// f is recovered and logged. AttemptInfo never contains the write key or
// event payloads.
func WithAttemptHook(f func(AttemptInfo)) Option {
	return optionFunc(func(s *settings) { s.attemptHook = f })
}

// WithSlog sends the client's logs to l, a log/slog logger, instead of a
// zap logger (default: silent). Levels map one to one (zap's Debug, Info,
// Warn and Error to slog's; the levels above Error, which the client does
// not use, to Error); fields become attributes, an error as the "error"
// attribute with its text. l's handler decides what is kept (its
// Enabled method is asked first) and is called on the client's
// goroutines, so it must be safe for concurrent use, as slog handlers are;
// a handler that panics loses that line, and the client goes on.
// The client never logs the write key or event payloads. WithSlog and
// WithLogger replace each other: the later option wins. A nil logger fails
// New with a *ConfigError.
func WithSlog(l *slog.Logger) Option {
	return optionFunc(func(s *settings) {
		if l == nil {
			s.errs = append(s.errs, invalid("Logger", l, "must not be nil"))
			return
		}
		s.logger = slogLogger(l.Handler())
	})
}

// WithDefaultContext sets context entries that every event carries (for
// example "app", "os" or "device"), merged into the event's Context when it
// is enqueued. The merge is by top-level key: a key the event's own Context
// has wins, whatever its value (nil included), and nested maps are not
// merged. A "library" entry here replaces the one the client adds. Default:
// none.
//
// The top level of ctx is copied when New runs; nested maps and slices are
// shared and must not be changed afterwards. The values must be encodable
// as JSON: New returns a *ConfigError (field "DefaultContext") otherwise.
// Callbacks receive the merged Context, as it was sent. A nil or empty map
// removes the defaults, and enqueue calls stay as cheap as without the
// option. With it, the entries are encoded once, by New, and each enqueue
// call copies their JSON into the event (no allocation unless OnSuccess is
// registered); a value with its own MarshalJSON is therefore called once.
func WithDefaultContext(fields map[string]any) Option {
	return optionFunc(func(s *settings) {
		if err := checkDefaults(fields); err != nil {
			s.errs = append(s.errs, invalid("DefaultContext", fmt.Sprintf("%d keys", len(fields)), err.Error()))
		}
		s.defaultContext = cloneMap(fields)
	})
}

// WithDefaultProperties sets properties that every Track, Page and Screen
// event carries, merged into the event's Properties as WithDefaultContext
// merges the context: by top-level key, the event's own keys winning,
// nested maps not merged. Identify and Group traits and Alias events are
// not changed. Copying, encoding errors (field "DefaultProperties"),
// callbacks and cost are as for WithDefaultContext. Default: none.
func WithDefaultProperties(props map[string]any) Option {
	return optionFunc(func(s *settings) {
		if err := checkDefaults(props); err != nil {
			s.errs = append(s.errs, invalid("DefaultProperties", fmt.Sprintf("%d keys", len(props)), err.Error()))
		}
		s.defaultProperties = cloneMap(props)
	})
}

// WithDiskBuffer turns on durable mode: every accepted event's JSON is
// appended to a log in dir (created with mode 0700 if missing) and written
// to the operating system before the enqueue call returns, so it survives
// the process dying at any instant; the fsync policy (WithFsync) bounds
// what a power loss can lose. Delivered and failed events are
// acknowledged in the log (after their callback: a crash between the two
// repeats the callback at the next start, never loses it) and their space
// reclaimed a segment at a time; events without an outcome at Close stay
// on disk and get no callback then (see Client.Close). So a callback, in
// whichever client it runs, is each event's final outcome: an OnError
// that writes a dead-letter file sees each failed event once, and never
// an event that is only waiting on disk. New sends the events an earlier
// client left in dir before
// any new one, with the same messageIds; callbacks receive them as
// messages decoded from the stored JSON. One client at a time may use dir:
// New fails with ErrDiskBufferLocked otherwise. dir must be private to the
// process's user: New refuses (with a *DiskError saying why) a directory
// writable by group or others or owned by another user. New opens a
// directory on a full disk (enqueue calls then return a *DiskError until
// delivered events free space).
//
// The disk is the buffer: QueueCapacity bounds the events held in memory,
// and WithDiskLimit what is accepted. An event that finds memory full is
// kept on disk only (Stats.Spilled) and read back, oldest first, by a
// goroutine of the client's as batches leave; events are sent in the order
// they were accepted, replayed ones first; their callbacks get messages
// decoded from the stored JSON. New does not load the replayed events
// either: they are read back the same way. Flush and Close wait for
// events on disk only like any other, and Close keeps them there like
// the events in memory: Close's error says how many it kept, and they are
// counted in Stats.HandedBack and Stats.OnDisk.
//
// The directory must be left to the client: events whose records another
// process removes, cuts short or replaces before they are read back are
// failed without a callback and counted in Stats.DiskLost (one error log
// line names how many); docs/durable.md lists each such case.
//
// An enqueue call then costs one append to the log more; it returns an
// error matching ErrQueueFull past the disk limit (WithDiskLimit; the
// non-blocking calls at once, EnqueueContext once its context ends, as it
// waits for delivered events to free space) and a *DiskError when the
// write fails. Without this option nothing touches the disk. The files and
// the capacity model are described in docs/durable.md.
func WithDiskBuffer(dir string, opts ...DiskOption) Option {
	return optionFunc(func(s *settings) {
		if dir == "" {
			s.errs = append(s.errs, invalid("DiskBuffer", `""`, "directory must not be empty"))
		}
		d, errs := newDiskSettings(dir, opts)
		s.errs = append(s.errs, errs...)
		s.disk = d
	})
}

// WithOAuth makes every upload carry an OAuth 2.0 access token
// ("Authorization: Bearer <token>") instead of the write key's Basic
// credentials (R50). The write key still goes in the body. Default: off.
//
// New validates c: an empty ClientID or KeyID, a PrivateKey that is not an
// RSA private key in PEM form, or an AuthServer that is not an absolute
// http or https URL make New return a *ConfigError whose Field names the
// setting ("OAuth.ClientID", "OAuth.KeyID", "OAuth.PrivateKey",
// "OAuth.AuthServer"). New starts one goroutine that fetches a token at
// once and refreshes it when half its lifetime has passed; Close stops it.
//
// Batches wait, holding no consumer, while no token is available. A token
// request that fails transiently (a 5xx, a 429, which is waited out as its
// Retry-After or X-RateLimit-Reset header says, or a transport error) is
// retried with backoff meanwhile; Close interrupts that wait like any other
// and hands the batches back. A token request that fails for good (400,
// 401, 403 or 415 from the auth server, such as invalid_client) fails the
// waiting batches through OnError with an *OAuthError (matching ErrOAuth)
// that says what to check; the token source tries again a minute later.
// A 400, 401, 403 or 511 from the tracking API drops the token; a 511 is
// then retried as a counted retry with a fresh token, the others fail as
// usual. Neither the private key nor a token is ever logged or put in an
// error.
func WithOAuth(c OAuthConfig) Option {
	return optionFunc(func(s *settings) {
		o, err := newOAuthSettings(c)
		if err != nil {
			s.errs = append(s.errs, err)
			return
		}
		s.oauth = o
	})
}

// WithEventSentAt also puts "sentAt" on every event of a request body
// (default false). Its value is the body's own sentAt: the instant of that
// attempt, new on every retry (R4, R59). Turn it on for servers that keep
// only the body's batch array and read sentAt from each event, such as
// RudderStack; Segment's tracking API reads the batch-level sentAt and
// needs no per-event copy. It costs up to 42 bytes of JSON per event and
// per attempt; the batch size limit (MaxBatchBytes) accounts for them, so
// a batch closes a little earlier when the option is on.
//
// The option only stores sentAt; it corrects no clock skew. Every event
// carries timestamp (the caller's, or the instant of the enqueue call) and
// no originalTimestamp, as Segment's server libraries send; Segment and
// RudderStack both keep such a timestamp as sent and apply their
// correction receivedAt − (sentAt − originalTimestamp) only to events sent
// with originalTimestamp instead. The stored time is therefore the clock
// of the host that called Track (docs/delivery.md R59, D29).
func WithEventSentAt(enabled bool) Option {
	return optionFunc(func(s *settings) { s.EventSentAt = enabled })
}

// checkDefaults encodes m once, so that a value that is not JSON fails New
// instead of every enqueue call.
func checkDefaults(m map[string]any) error {
	_, err := wire.EncodeMembers(m)
	return err
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

// effective is the Config a client reports (Client.Config): Endpoint
// without its user information, safe in every form (%+v, JSON, slog,
// zap.Any), and the disk buffer's directory and limit.
func (s *settings) effective() Config {
	cfg := s.Config
	cfg.Endpoint = redactURL(cfg.Endpoint)
	if s.disk != nil {
		cfg.DiskBuffer, cfg.DiskLimit = s.disk.dir, s.disk.limit
	}
	return cfg
}

// queueOptions derives the queue's shape from the settings: batches close
// at FlushAt events or when their events (with the per-event sentAt of
// WithEventSentAt, R59) reach what the body leaves them beside the
// compatibility BodyFields (R45); the high-water mark is a batch for every
// other consumer (R71).
func (s *settings) queueOptions() queueOptions {
	return queueOptions{
		capacity:    s.QueueCapacity,
		flushAt:     s.FlushAt,
		interval:    s.FlushInterval,
		maxBytes:    batchEventBytes - len(s.compat.BodyFields),
		perEvent:    wire.PerEvent(s.EventSentAt),
		markBatches: markBatches(s.Consumers),
	}
}

// frame is the request body around the events: the write key, the
// compatibility BodyFields and, with WithEventSentAt, the per-event sentAt.
func (s *settings) frame() wire.Frame {
	return wire.NewFrame(s.writeKey, s.compat.BodyFields, s.EventSentAt)
}

// uploadClient is the http.Client of the client's uploads (and, by
// default, of its token requests): WithHTTPClient's or its own, with the
// redirect policy of internal/httpbatch.
func (s *settings) uploadClient() *http.Client { return httpbatch.NewClient(s.httpClient, s.Consumers) }

// retryPolicy is the counted-retry policy of the settings (R26–R28);
// noRetry, set when Close begins, ends retries (shared.Compat FastClose;
// nil without).
func (s *settings) retryPolicy(noRetry *atomic.Bool) retryPolicy {
	return retryPolicy{
		maxRetries:      s.MaxRetries,
		maxBackoffTotal: s.MaxTotalBackoffDuration,
		httpTimeout:     s.HTTPTimeout,
		delay:           s.backoff.delay,
		retryDelay:      s.compat.RetryDelay,
		noRetry:         noRetry,
	}
}

// withCompat applies the compatibility configuration of segmentv3 and
// analyticstest (shared.CompatOption); BodyFields that are not JSON object
// members, or too long, are a *ConfigError.
func withCompat(c shared.Compat) Option {
	return optionFunc(func(s *settings) {
		if len(c.BodyFields) > 0 && !wire.ValidExtra(c.BodyFields, maxBodyFields) {
			s.errs = append(s.errs, invalid("BodyFields", len(c.BodyFields), "must be at most shared.MaxBodyFields bytes of JSON object members"))
		}
		s.compat = c
	})
}

// noRetries is the flag Close sets to end retries with shared.Compat
// FastClose (see Client.endRetries); nil without it.
func (s *settings) noRetries() *atomic.Bool {
	if !s.compat.FastClose {
		return nil
	}
	return new(atomic.Bool)
}

// waitingRoom is the client's waiting room, with places for the queue's
// batches (R71): rate-limit episodes last MaxRateLimitDuration at most
// (R35), and without shared.Compat NoRetryAllowance retries are paced
// (R63).
func (s *settings) waitingRoom(places *capacity) *waitingRoom {
	room := newWaitingRoom(s.MaxRateLimitDuration, places, s.backoff)
	if s.compat.NoRetryAllowance {
		room.unpace()
	}
	return room
}

// settler is the client's settler for the events of q, with the
// registered callbacks.
func (s *settings) settler(q *queue) *settler {
	return newSettler(s.logger, s.onSuccess, s.onError, q, s.QueueCapacity)
}

// keepMessages reports whether an event keeps a copy of its message from
// enqueue on, for OnSuccess (see settler.messages).
func (s *settings) keepMessages() bool { return s.onSuccess != nil }

// messageDefaults are the WithDefaultContext and WithDefaultProperties
// values merged into every message.
func (s *settings) messageDefaults() *defaults {
	return newDefaults(s.defaultContext, s.defaultProperties)
}

// learnedLimits are the limits the client learns from the server's
// refusals for the batches of q (R67, R68), without their ramp when it
// is turned off.
func (s *settings) learnedLimits(q *queue) *learnedLimits {
	o := s.queueOptions()
	l := newLearnedLimits(q, s.frame(), o.flushAt, o.maxBytes, o.perEvent)
	if s.rampOff {
		l.endRamp()
	}
	return l
}

// openDisk opens the disk buffer in durable mode (WithDiskBuffer) and
// returns it with the number of events found there to replay; nil without
// durable mode.
func (s *settings) openDisk() (*durable, int, error) {
	if s.disk == nil {
		return nil, 0, nil
	}
	return openDurable(s.disk, s.logger)
}

// ownTransport is the transport of httpClient when the client built it,
// whose idle connections Close closes; nil with WithHTTPClient's.
func (s *settings) ownTransport(httpClient *http.Client) *http.Transport {
	if s.CustomHTTPClient {
		return nil
	}
	t, _ := httpClient.Transport.(*http.Transport)
	return t
}

// tokenSource is the OAuth token source of the uploads (R50), whose
// token requests go through httpClient and wait in room as batches do;
// nil without OAuth.
func (s *settings) tokenSource(httpClient *http.Client, room *waitingRoom) *tokenSource {
	if s.oauth == nil {
		return nil
	}
	return newTokenSource(s.oauth, httpClient, s.HTTPTimeout, s.backoff, s.logger, room)
}

// batchEndpoint is the batch API the uploads post to through httpClient:
// the endpoint's /v1/batch, with the write key, which the logs never show
// in any of its forms.
func (s *settings) batchEndpoint(httpClient *http.Client) httpbatch.Config {
	key := wire.AppendString(nil, s.writeKey)
	return httpbatch.Config{
		Client:    httpClient,
		URL:       s.Endpoint + "/v1/batch",
		WriteKey:  s.writeKey,
		Secrets:   httpbatch.WriteKeyForms(s.writeKey, string(key[1:len(key)-1])),
		UserAgent: LibraryName + "/" + Version,
		Gzip:      s.Gzip,
		Log:       s.logger,
	}
}

// transport is a consumer's transport: its request sender on httpClient,
// or the one a test installs.
func (s *settings) transport(httpClient *http.Client) transport {
	if s.newTransport != nil {
		return s.newTransport()
	}
	return newSender(s.batchEndpoint(httpClient), s.frame(), s.logger)
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
