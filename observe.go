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
