package analytics

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/relaykit/analytics-go/internal/wire"
)

// A message's JSON is the event as the tracking API receives it (the
// Segment wire format): "type", "messageId", "timestamp", "userId", …,
// "properties" or "traits", "context", "integrations". json.Marshal of a
// Track (or any message) writes it, and UnmarshalMessage reads it back, so
// an application can keep the events OnError reports, for example as one
// JSON object per line, and enqueue them again later with the same
// messageId and timestamp (the API drops repeats by messageId).

// MarshalJSON writes m as the tracking API receives it (see
// UnmarshalMessage). The event is written as it is: the client's defaults
// and its context.library entry are not added; an empty MessageID and a
// zero Timestamp are left out, so that enqueueing the read-back message
// stamps them. A value that is not JSON (NaN, a channel, …) is a
// *MessageError naming its path. Safe for concurrent use if m's maps are
// not being changed.
func (m Track) MarshalJSON() ([]byte, error) { return marshalMessage(m) }

// MarshalJSON writes m as the tracking API receives it (see Track.MarshalJSON).
func (m Identify) MarshalJSON() ([]byte, error) { return marshalMessage(m) }

// MarshalJSON writes m as the tracking API receives it (see Track.MarshalJSON).
func (m Group) MarshalJSON() ([]byte, error) { return marshalMessage(m) }

// MarshalJSON writes m as the tracking API receives it (see Track.MarshalJSON).
func (m Page) MarshalJSON() ([]byte, error) { return marshalMessage(m) }

// MarshalJSON writes m as the tracking API receives it (see Track.MarshalJSON).
func (m Screen) MarshalJSON() ([]byte, error) { return marshalMessage(m) }

// MarshalJSON writes m as the tracking API receives it (see Track.MarshalJSON).
func (m Alias) MarshalJSON() ([]byte, error) { return marshalMessage(m) }

// UnmarshalJSON reads a track event's JSON, as UnmarshalMessage does. JSON
// whose "type" is another message type is an error; a missing "type" is
// taken to be "track".
func (m *Track) UnmarshalJSON(data []byte) error { return unmarshalInto(data, "track", m) }

// UnmarshalJSON reads an identify event's JSON (see Track.UnmarshalJSON).
func (m *Identify) UnmarshalJSON(data []byte) error { return unmarshalInto(data, "identify", m) }

// UnmarshalJSON reads a group event's JSON (see Track.UnmarshalJSON).
func (m *Group) UnmarshalJSON(data []byte) error { return unmarshalInto(data, "group", m) }

// UnmarshalJSON reads a page event's JSON (see Track.UnmarshalJSON).
func (m *Page) UnmarshalJSON(data []byte) error { return unmarshalInto(data, "page", m) }

// UnmarshalJSON reads a screen event's JSON (see Track.UnmarshalJSON).
func (m *Screen) UnmarshalJSON(data []byte) error { return unmarshalInto(data, "screen", m) }

// UnmarshalJSON reads an alias event's JSON (see Track.UnmarshalJSON).
func (m *Alias) UnmarshalJSON(data []byte) error { return unmarshalInto(data, "alias", m) }

// UnmarshalMessage reads one event's JSON, as MarshalJSON writes it or the
// tracking API receives it, into the message type its "type" names
// (Track, Identify, Group, Page, Screen or Alias, as a value), ready to be
// enqueued again: MessageID and Timestamp (in UTC) are kept, and an
// enqueue keeps them too. Numbers in Properties, Traits, Context and
// Integrations, nested ones included, come back as json.Number, so a
// re-enqueued event carries the same digits (an int64 beyond 2⁵³ keeps
// its precision); use its Int64 or Float64 method to read one. Context
// keeps the "library" entry the client added when the event was first
// sent, so the client does not add its own. Fields the message types do
// not have (such as "sentAt") are ignored. The error says when data is
// not one JSON object or its "type" is missing or unknown.
func UnmarshalMessage(data []byte) (Message, error) {
	s, err := decodeStored(data, "UnmarshalMessage")
	if err != nil {
		return nil, err
	}
	if s.Type == "" {
		return nil, errors.New(`analytics: UnmarshalMessage: the JSON has no "type" (track, identify, group, page, screen or alias)`)
	}
	m, err := messageOf(s)
	if err != nil {
		return nil, fmt.Errorf("analytics: UnmarshalMessage: %w", err)
	}
	return m, nil
}

// marshalMessage writes m with the client's encoder, as the event is sent
// minus what the client adds (defaults, context.library); see
// Track.MarshalJSON.
func marshalMessage(m Message) ([]byte, error) {
	var e wire.Encoder // adds nothing
	if err := m.appendJSON(&e); err != nil {
		return nil, err
	}
	b := e.Bytes()
	// The encoder always writes {"type":"…","messageId":"…","timestamp":"…"
	// first (header), with a fresh id for an empty one: cut what the
	// caller did not set.
	typeEnd := len(`{"type":"`) + len(m.Type()) + 1
	if m.ID() == "" {
		idLen := len(`,"messageId":"`) + 36 + 1
		b = append(b[:typeEnd], b[typeEnd+idLen:]...)
	}
	if zero := `,"timestamp":"0001-01-01T00:00:00Z"`; bytes.HasPrefix(b[typeEnd:], []byte(`,"messageId":`)) {
		// skip the id: a JSON string with no '"' inside but escaped ones
		i := typeEnd + len(`,"messageId":`) + 1
		for b[i] != '"' {
			if b[i] == '\\' {
				i++
			}
			i++
		}
		if i++; bytes.HasPrefix(b[i:], []byte(zero)) {
			b = append(b[:i], b[i+len(zero):]...)
		}
	} else if bytes.HasPrefix(b[typeEnd:], []byte(zero)) {
		b = append(b[:typeEnd], b[typeEnd+len(zero):]...)
	}
	return b, nil
}

// decodeMessage turns an event's JSON, as the client encodes it, back into
// the message type it was encoded from, for the test server of package
// analyticstest (through internal/shared). Numbers come back as float64
// and nested objects as map[string]any, as encoding/json decodes them;
// Context includes the "library" entry the client added.
func decodeMessage(data []byte) (Message, error) {
	s, err := wire.Decode(data, wire.Float64s)
	if err != nil {
		return nil, err
	}
	return messageOf(s)
}

// rebuildMessage is decodeMessage for the client's callbacks: the messages
// of events that kept no copy (see WithOnError) and of replayed events. A
// number written without a fraction or an exponent that fits in an int
// comes back as an int, as the caller most likely gave it; every other
// number is a float64.
func rebuildMessage(data []byte) (Message, error) {
	s, err := wire.Decode(data, wire.Ints)
	if err != nil {
		return nil, err
	}
	return messageOf(s)
}

// decodeStored reads exactly one JSON object, with numbers as
// json.Number; fn names the caller in errors.
func decodeStored(data []byte, fn string) (*wire.Stored, error) {
	s, err := wire.DecodeOne(data)
	if errors.Is(err, wire.ErrTrailing) {
		return nil, fmt.Errorf("analytics: %s: data after the JSON object (pass one event at a time)", fn)
	}
	if err != nil {
		return nil, fmt.Errorf("analytics: %s: %w", fn, err)
	}
	return s, nil
}

// unmarshalInto is UnmarshalJSON for the message type typ, stored in dst.
func unmarshalInto[M Message](data []byte, typ string, dst *M) error {
	if string(bytes.TrimSpace(data)) == "null" {
		return nil // as encoding/json leaves a value given null
	}
	s, err := decodeStored(data, typ+" UnmarshalJSON")
	if err != nil {
		return err
	}
	if s.Type == "" {
		s.Type = typ
	}
	if s.Type != typ {
		return fmt.Errorf("analytics: JSON of a %q event cannot be read into a %s (use UnmarshalMessage)", s.Type, typ)
	}
	m, err := messageOf(s)
	if err != nil {
		return err
	}
	*dst = m.(M)
	return nil
}
