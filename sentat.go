package analytics

// Per-event sentAt (R59): an option that also writes the attempt's sentAt
// into every event of the body. The events are encoded once, at enqueue;
// the field is spliced into that JSON while the body is written (package
// internal/wire), so no event is encoded again.

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
