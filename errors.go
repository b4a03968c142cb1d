package analytics

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/relaykit/analytics-go/internal/httpbatch"
	"github.com/relaykit/analytics-go/internal/wire"
)

// Errors returned synchronously by the enqueue calls (Track, Identify, …),
// Flush and Close. The event of a call that returned an error is never sent
// and gets no callback.
var (
	// ErrQueueFull: the client already holds QueueCapacity events that are
	// not on the wire: queued, in an open batch or waiting to be retried
	// (R43). In durable mode (WithDiskBuffer): the disk buffer reached its
	// size limit (R70); a full memory does not cause it there.
	ErrQueueFull = errors.New("analytics: queue full")
	// ErrClosed: the client was closed; also returned by a second Close and
	// by Flush after Close.
	ErrClosed = errors.New("analytics: client closed")
	// ErrEventTooLarge: the event encodes to more than MaxEventBytes (R45).
	ErrEventTooLarge = errors.New("analytics: event too large")
	// ErrInvalidMessage: the event failed its own validation or could not be
	// encoded as JSON. The returned error is a *MessageError.
	ErrInvalidMessage = errors.New("analytics: invalid message")
)

// Errors passed to OnError. The error given to OnError wraps one of these
// (check with errors.Is) and, where a response was received, the last
// *HTTPError (check with errors.As).
var (
	// ErrRetriesExhausted: the batch needed more than MaxRetries counted retries (R27).
	ErrRetriesExhausted = errors.New("analytics: retries exhausted")
	// ErrBackoffDurationExceeded: MaxTotalBackoffDuration elapsed since the
	// batch's first counted failure (R28).
	ErrBackoffDurationExceeded = errors.New("analytics: total backoff duration exceeded")
	// ErrRateLimitDurationExceeded: the server kept rate limiting for
	// MaxRateLimitDuration (R35).
	ErrRateLimitDurationExceeded = errors.New("analytics: rate limit duration exceeded")
	// ErrShutdownInterrupted: Close's context ended before the events got a
	// disposition; they were handed back, not failed. A request that was
	// in flight may still have been recorded by the server (R40).
	ErrShutdownInterrupted = errors.New("analytics: shutdown interrupted")
)

// MessageError is returned by an enqueue call for an event that fails
// validation or cannot be encoded, and for a nil message. It matches
// ErrInvalidMessage with errors.Is.
type MessageError struct {
	Type string // message type, e.g. "track"; "" when there is no message
	// Field is the offending field of the message type, as named in Go:
	// "Event", "UserID or AnonymousID", "Message", or for a value that
	// cannot be encoded the map holding it: "Properties", "Traits",
	// "Context" or "Integrations".
	Field string
	// Path is the key path of a value that cannot be encoded, from the
	// JSON key of its map: "properties.revenue", "context.device.ids[2]",
	// `properties["a.b"]`. It is "" for the other errors.
	Path   string
	Reason string
	Err    error // underlying encoding error, if any
}

// invalidMessage is the error of an enqueue call whose message of type typ
// ("" when there is none) is refused for field and reason.
func invalidMessage(typ, field, reason string) *MessageError {
	return &MessageError{Type: typ, Field: field, Reason: reason}
}

// Error describes the type, field, reason and key path, e.g. "analytics:
// invalid track message: Event is required", "analytics: invalid track
// message: Properties cannot be encoded: properties.revenue: unsupported
// value NaN" or "analytics: invalid message: Message is nil (…)".
func (e *MessageError) Error() string {
	typ := ""
	if e.Type != "" {
		typ = e.Type + " "
	}
	s := fmt.Sprintf("analytics: invalid %smessage: %s %s", typ, e.Field, e.Reason)
	if e.Path != "" {
		s += ": " + e.Path
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports ErrInvalidMessage.
func (e *MessageError) Is(target error) bool { return target == ErrInvalidMessage }

// Unwrap returns the encoding error, if any.
func (e *MessageError) Unwrap() error { return e.Err }

// fieldNames are the message fields of the JSON keys that hold maps, for
// MessageError.Field: the same name for the same field in every message
// type.
var fieldNames = map[string]string{
	"properties": "Properties", "traits": "Traits", "context": "Context", "integrations": "Integrations",
}

// messageErrorOf is the *MessageError of a map the encoder could not
// encode (nil for none): Field is the message field ("Properties"), Path
// the key path of the value, from the JSON key.
func messageErrorOf(fe *wire.FieldError) error {
	if fe == nil {
		return nil
	}
	return &MessageError{Type: fe.Type, Field: fieldNames[fe.Key], Path: fe.Path, Reason: "cannot be encoded", Err: fe.Err}
}

// ErrorKind classifies an *HTTPError.
type ErrorKind string

// Kinds of *HTTPError.
const (
	// KindNonRetryable: a status that is never retried (most 4xx, 501, 505,
	// 511 without OAuth, statuses outside 200–599, among them a 101 Switching
	// Protocols).
	KindNonRetryable ErrorKind = "non-retryable"
	// KindRedirect: a 3xx reached the client; nothing was uploaded (R10).
	// This includes a 307 or 308 to another origin, which is not followed
	// so that the write key never leaves the configured origin (R11).
	KindRedirect ErrorKind = "redirect"
	// KindRetryable: a retryable status whose retries ran out; found wrapped
	// in ErrRetriesExhausted, ErrBackoffDurationExceeded or
	// ErrRateLimitDurationExceeded.
	KindRetryable ErrorKind = "retryable"
)

// HTTPError is a response that did not deliver a batch. Message is a
// bounded excerpt of the server's text: the "message" field of a JSON
// error body when there is one, otherwise the start of the body (R18),
// with the write key replaced by "[redacted]" wherever the server echoed
// it. A 1xx status (101 Switching Protocols) has no Message: its body is
// never read (R15).
type HTTPError struct {
	StatusCode int
	Kind       ErrorKind
	Message    string
	// Location is the Location header of a redirect (KindRedirect),
	// resolved against the request URL, with user information and the write
	// key removed; "" for other kinds or when the server sent none.
	Location string
}

// Error describes kind, status and the server's excerpt, plus what to do
// for the statuses that usually mean a configuration mistake: 401 and 403
// (check the write key), 404 (the endpoint must be the base URL) and a
// redirect (its Location, and the WithEndpoint to use instead).
func (e *HTTPError) Error() string {
	text := http.StatusText(e.StatusCode)
	if text == "" {
		text = "status"
	}
	s := fmt.Sprintf("analytics: %s response %d %s", e.Kind, e.StatusCode, text)
	if e.Message != "" {
		s += ": " + e.Message
	}
	switch e.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		s += " (check the write key)"
	case http.StatusNotFound:
		s += " (the endpoint must be the API's base URL, such as " + DefaultEndpoint + ")"
	}
	if e.Kind == KindRedirect && e.Location != "" {
		s += fmt.Sprintf(" to %s (not followed, nothing was sent there; if that is the API, point WithEndpoint at it: WithEndpoint(%q))",
			e.Location, redirectBase(e.Location))
	}
	return s
}

// redirectBase is the endpoint to configure for a redirect's Location: the
// URL without the /v1/batch the client appends, a query or a fragment.
func redirectBase(location string) string {
	base, _, _ := strings.Cut(location, "#")
	base, _, _ = strings.Cut(base, "?")
	if strings.HasSuffix(strings.ToLower(base), "/v1/batch") {
		base = base[:len(base)-len("/v1/batch")]
	}
	return strings.TrimSuffix(base, "/")
}

// TransportError is a request that got no HTTP response: connection refused
// or reset, timeout, TLS failure. Its text never contains the write key. Retryable ones are retried with backoff
// and reach OnError wrapped in a budget error; deterministic ones (TLS
// certificate verification, bad URL) fail at once (R14).
type TransportError struct {
	Err       error
	Retryable bool
}

// Error describes the underlying error.
func (e *TransportError) Error() string { return "transport error: " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *TransportError) Unwrap() error { return e.Err }

// DeliveryError is the error OnError receives when a batch's retries were
// bounded by a budget or interrupted by shutdown: Reason is one of
// ErrRetriesExhausted, ErrBackoffDurationExceeded,
// ErrRateLimitDurationExceeded or ErrShutdownInterrupted, and Last is the
// last *HTTPError or *TransportError (nil if no attempt was made). Both are
// visible to errors.Is and errors.As.
//
// In durable mode (WithDiskBuffer) events that Close hands back stay in the
// disk buffer for the next client and reach no callback, so OnError sees
// ErrShutdownInterrupted only without a disk buffer (or when Close could
// not sync it).
type DeliveryError struct {
	Reason   error
	Last     error
	Attempts int
}

// httpAttemptError is the public error of an HTTP attempt that did not
// deliver: a *TransportError when no response came, an *HTTPError for any
// other answer.
func httpAttemptError(r httpbatch.Result) error {
	if r.Err != nil {
		return &TransportError{Err: r.Err, Retryable: r.Outcome != httpbatch.Failed}
	}
	kind := KindNonRetryable
	if r.Redirect {
		kind = KindRedirect
	} else if r.Outcome.Retried() {
		kind = KindRetryable
	}
	return &HTTPError{StatusCode: r.Status, Kind: kind, Message: r.Message, Location: r.Location}
}

// handBackError is the error every handed-back event gets (R38): last is
// the last error of its batch (or the cancellation of the attempt in
// flight, R40), attempts the attempts made.
func handBackError(last error, attempts int) *DeliveryError {
	return deliveryError(ErrShutdownInterrupted, last, attempts)
}

// deliveryError is the error of events whose batch ended for reason (a
// budget, R27, R28, R35, or Close, R38) after attempts attempts, the last
// of which failed with last.
func deliveryError(reason, last error, attempts int) *DeliveryError {
	return &DeliveryError{Reason: reason, Last: last, Attempts: attempts}
}

// Error describes reason, attempts and the last error.
func (e *DeliveryError) Error() string {
	s := fmt.Sprintf("%s after %d attempt(s)", e.Reason.Error(), e.Attempts)
	if e.Last != nil {
		s += ": " + strings.TrimPrefix(e.Last.Error(), "analytics: ")
	}
	return s
}

// Unwrap returns Reason and Last.
func (e *DeliveryError) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Last}
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

// invalid is the *ConfigError of field's value.
func invalid(field string, value any, reason string) *ConfigError {
	return &ConfigError{Field: field, Value: value, Reason: reason}
}

// redactURL hides the user information (user name and password) of a URL,
// parseable or not, so that it can be logged.
func redactURL(raw string) string { return httpbatch.RedactURL(raw) }
