// Package shared carries code of package analytics to package
// analyticstest without exporting it, so that the test fake runs the
// client's own validation, stamping and id code instead of a copy of it.
// Package analytics sets the variables in its init function; importing
// package analytics (as analyticstest does) guarantees they are set.
package shared

import "time"

// Prepare runs the client's enqueue preparation on m, which must be an
// analytics.Message (or nil): the same type switch (pointers become
// values; nil and unknown types are rejected), validation, stamping (an
// empty MessageID from newID, or the client's generator when newID is nil;
// a zero Timestamp from now, or time.Now, converted to UTC) and JSON
// encoding, including the size limit. It returns the copy of the message
// that the client's callbacks would get, or the error the client's enqueue
// call would return (ErrClosed and ErrQueueFull excepted: they depend on a
// client's state). Safe for concurrent use.
var Prepare func(m any, now func() time.Time, newID func() string) (any, error)

// Decode turns one event's JSON, as the client encodes it, back into the
// analytics.Message it was encoded from (numbers as float64, nested
// objects as map[string]any). Safe for concurrent use.
var Decode func(raw []byte) (any, error)

// Compat is what package segmentv3, the segment v3 compatibility layer,
// changes in the engine to behave as v3 did. The zero value changes
// nothing.
type Compat struct {
	// BodyFields are extra members of every request body's top-level
	// object, as JSON text without braces (`"context":{…}`), written after
	// the batch array. Their bytes count in the body size limit, so at most
	// MaxBodyFields bytes are accepted (a largest event still fits beside
	// them). They must not repeat the keys batch, sentAt and writeKey.
	BodyFields []byte

	// NoLibrary leaves context.library out of events (unless the event's
	// own context has one) and an empty context object out entirely.
	NoLibrary bool

	// RetryDelay, when set, is the wait before a batch's counted retry
	// number k+1 (k counts from 0), in place of the engine's backoff. The
	// engine clamps it to [0, MaxTotalBackoffDuration]; its retry budgets
	// apply unchanged.
	RetryDelay func(k int) time.Duration

	// FastClose makes Close wait for no retry: batches waiting in the
	// waiting room are due at once, the rate-limit gate opens, and a
	// retryable outcome during Close fails the batch with its last error.
	FastClose bool

	// NoRetryAllowance lets every counted retry go when its wait is over,
	// as each of segment v3's batches retried on its own: the client-wide
	// retry allowance (docs/delivery.md R63) does not pace them, and a 2xx
	// does not bring them forward either (R62): each waits its RetryDelay.
	NoRetryAllowance bool

	// AnyWriteKey accepts any write key, as segment v3 did: empty, or with
	// leading or trailing white space. It is sent as given.
	AnyWriteKey bool

	// AnyEndpoint accepts any endpoint, as segment v3 did: requests go to
	// Endpoint + "/v1/batch" (one trailing slash of Endpoint removed)
	// without the checks of WithEndpoint. An endpoint that does not parse
	// or is not http(s) fails each attempt with net/http's *url.Error.
	AnyEndpoint bool

	// SuccessName and ErrorName are what Close's error calls the OnSuccess
	// and OnError callbacks when one had not returned (default "OnSuccess",
	// "OnError").
	SuccessName, ErrorName string
}

// MaxBodyFields is the largest Compat.BodyFields accepted, in bytes: what a
// batch can spare beside one event of MaxEventBytes.
var MaxBodyFields int

// CheckEndpoint returns the *analytics.ConfigError WithEndpoint's checks
// give for endpoint (after one trailing slash is removed), nil when they
// accept it.
var CheckEndpoint func(endpoint string) error

// CompatOption returns the analytics.Option (as any) that applies c. It
// fails New with a *ConfigError when BodyFields is not valid JSON members
// or longer than MaxEventBytes.
var CompatOption func(c Compat) any
