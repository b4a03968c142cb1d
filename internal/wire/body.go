package wire

import (
	"bytes"
	"encoding/json"
	"time"
)

// A request body is {"batch":[…],"sentAt":…,"writeKey":…}: the events'
// JSON as encoded at acceptance, comma separated, then the caller's extra
// members, the attempt's sentAt and the write key. With the per-event
// sentAt on, the attempt's sentAt is also spliced into every event, so no
// event is encoded again.

// maxTimestampBytes is the longest timestamp appendTimestamp writes for a
// year in 0–9999.
const maxTimestampBytes = len("2006-01-02T15:04:05.999999999Z")

// eventSentAtBytes is the most the per-event sentAt adds to one event:
// `,"sentAt":"…"` with the longest timestamp.
const eventSentAtBytes = len(`,"sentAt":""`) + maxTimestampBytes

// PerEvent is what a body adds to each event beyond its JSON and a comma:
// eventSentAtBytes with the per-event sentAt on, 0 with it off.
func PerEvent(eventSentAt bool) int {
	if eventSentAt {
		return eventSentAtBytes
	}
	return 0
}

// Events are the events of one body, in order.
type Events interface {
	Len() int          // how many
	JSON(i int) []byte // the JSON of event i, as encoded at acceptance
	Bytes() int        // their JSON and the commas between them
}

// A Frame is what a body has around its events. The zero value is not
// useful; see NewFrame.
type Frame struct {
	writeKey    []byte // as a JSON string
	extra       []byte // members written after the batch array
	eventSentAt bool   // sentAt on every event too
}

// NewFrame returns the frame of bodies with the write key writeKey, the
// extra members extra (JSON object members without braces, or nil; see
// ValidExtra) and, with eventSentAt, the attempt's sentAt on every event.
func NewFrame(writeKey string, extra []byte, eventSentAt bool) Frame {
	return Frame{writeKey: AppendString(nil, writeKey), extra: extra, eventSentAt: eventSentAt}
}

// Size is the most a body adds around its events (their JSON and the
// commas between them): the envelope, the longest sentAt, the write key
// and the extra members, as Encode writes them. It is the one formula for
// the frame: Encode sizes its buffer with it, and a body limit less Size is
// what the events may take.
func (f *Frame) Size() int {
	n := len(`{"batch":[],"sentAt":"","writeKey":}`) + maxTimestampBytes + len(f.writeKey)
	if len(f.extra) > 0 {
		n += 1 + len(f.extra) // the comma before the members
	}
	return n
}

// BodySize is the most the body of evs takes: Size, their JSON and commas,
// and what the per-event sentAt adds to each.
func (f *Frame) BodySize(evs Events) int {
	return evs.Bytes() + evs.Len()*PerEvent(f.eventSentAt) + f.Size()
}

// Encode writes the body of evs into buf (reused when large enough);
// sentAt is the time of the attempt, written in UTC.
func (f *Frame) Encode(buf []byte, evs Events, sentAt time.Time) []byte {
	var text [64]byte
	stamp := appendTimestamp(text[:0], sentAt.UTC(), nil)
	// The size is known: allocate once rather than grow by doubling, with
	// an eighth to spare, so that a reused buffer (the bodies of one
	// client's full batches differ by a few bytes) rarely has to be
	// allocated again.
	if need := f.BodySize(evs); cap(buf) < need {
		buf = make([]byte, 0, need+need/8)
	}
	buf = append(buf[:0], `{"batch":[`...)
	buf = appendEvents(buf, evs, f.eventSentAt, stamp)
	buf = append(buf, ']')
	if len(f.extra) > 0 {
		buf = append(append(buf, ','), f.extra...)
	}
	buf = append(buf, `,"sentAt":"`...)
	buf = append(buf, stamp...)
	buf = append(buf, `","writeKey":`...)
	buf = append(buf, f.writeKey...)
	return append(buf, '}')
}

// appendEvents writes evs to buf as the members of the batch array, comma
// separated. With sentAt on, each event gets `,"sentAt":"<stamp>"` before
// its closing brace, stamp being the attempt's sentAt as the body's own
// field has it. The Encoder writes every event as an object ending in '}'
// whose top-level keys are its own (type, messageId, timestamp, ids,
// names, properties or traits, context, integrations) and never sentAt:
// the caller's maps are nested under properties, traits, context and
// integrations, so the spliced key is never a duplicate. An event that
// does not end in '}' is written unchanged.
func appendEvents(buf []byte, evs Events, sentAt bool, stamp []byte) []byte {
	var text [96]byte
	tail := append(append(append(text[:0], `,"sentAt":"`...), stamp...), '"', '}')
	for i := range evs.Len() {
		if i > 0 {
			buf = append(buf, ',')
		}
		d := evs.JSON(i)
		if !sentAt || len(d) == 0 || d[len(d)-1] != '}' {
			buf = append(buf, d...)
			continue
		}
		buf = append(buf, d[:len(d)-1]...)
		buf = append(buf, tail...)
	}
	return buf
}

// ValidExtra reports whether members are JSON object members, at most
// limit bytes, that take none of the body's own keys (batch, sentAt,
// writeKey).
func ValidExtra(members []byte, limit int) bool {
	if len(members) > limit {
		return false
	}
	obj := append(append([]byte{'{'}, members...), '}')
	var m map[string]json.RawMessage
	if bytes.HasPrefix(bytes.TrimSpace(members), []byte{','}) || json.Unmarshal(obj, &m) != nil {
		return false
	}
	_, batch := m["batch"]
	_, sentAt := m["sentAt"]
	_, key := m["writeKey"]
	return !batch && !sentAt && !key
}
