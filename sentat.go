package analytics

// Per-event sentAt (R59): an option that also writes the attempt's sentAt
// into every event of the body. The events are encoded once, at enqueue;
// the field is spliced into that JSON while the body is written, so no
// event is encoded again.

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

// eventSentAtBytes is the most the splice adds to one event:
// `,"sentAt":"…"` with the longest timestamp appendTimestamp writes for a
// year in 0–9999.
const eventSentAtBytes = len(`,"sentAt":""`) + maxTimestampBytes

// maxTimestampBytes is the longest timestamp appendTimestamp writes for a
// year in 0–9999.
const maxTimestampBytes = len("2006-01-02T15:04:05.999999999Z")

// eventSentAtExtra is the room per event the option needs in a body: 0
// when it is off.
func eventSentAtExtra(enabled bool) int {
	if enabled {
		return eventSentAtBytes
	}
	return 0
}

// appendEvents writes evs to buf as the members of the batch array, comma
// separated. With sentAt on, each event gets `,"sentAt":"<stamp>"` before
// its closing brace, stamp being the attempt's sentAt as the body's own
// field has it. The encoder writes every event as an object ending in '}' whose
// top-level keys are its own (type, messageId, timestamp, ids, names,
// properties or traits, context, integrations) and never sentAt: the
// caller's maps are nested under properties, traits, context and
// integrations, so the spliced key is never a duplicate. An event that does
// not end in '}' is written unchanged.
func appendEvents(buf []byte, evs []event, sentAt bool, stamp []byte) []byte {
	var text [96]byte
	tail := append(append(append(text[:0], `,"sentAt":"`...), stamp...), '"', '}')
	for i := range evs {
		if i > 0 {
			buf = append(buf, ',')
		}
		d := evs[i].data
		if !sentAt || len(d) == 0 || d[len(d)-1] != '}' {
			buf = append(buf, d...)
			continue
		}
		buf = append(buf, d[:len(d)-1]...)
		buf = append(buf, tail...)
	}
	return buf
}
