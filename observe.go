package analytics

import (
	"time"
)

// AttemptInfo describes one HTTP attempt to upload a batch, as passed to
// the WithAttemptHook function.
type AttemptInfo struct {
	// Events is the number of events in the batch.
	Events int
	// Bytes is the size of the request body as sent: compressed when
	// WithGzip is on.
	Bytes int
	// Retry is the number of earlier attempts of the same batch (the
	// X-Retry-Count header of this attempt; 0 for the first).
	Retry int
	// Status is the HTTP status received, or 0 when no response arrived
	// (then Err is set).
	Status int
	// Duration is the time from the start of the request to the end of
	// reading the response (or to the error).
	Duration time.Duration
	// Err is the error of an attempt that received no status: a network
	// error, the per-attempt timeout (WithHTTPTimeout) or the cancellation
	// by Close. It is nil when Status is set, whatever the status.
	Err error
}
