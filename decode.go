package analytics

import (
	"fmt"

	"github.com/relaykit/analytics-go/internal/wire"
)

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

// messageOf is the message s was encoded from.
func messageOf(s *wire.Stored) (Message, error) {
	s.Timestamp = s.Timestamp.UTC() // as the client stamps (an offset from elsewhere is normalised)
	switch s.Type {
	case "track":
		return Track{MessageID: s.MessageID, UserID: s.UserID, AnonymousID: s.AnonymousID, Event: s.Event,
			Timestamp: s.Timestamp, Properties: s.Properties, Context: s.Context, Integrations: s.Integrations}, nil
	case "identify":
		return Identify{MessageID: s.MessageID, UserID: s.UserID, AnonymousID: s.AnonymousID,
			Timestamp: s.Timestamp, Traits: s.Traits, Context: s.Context, Integrations: s.Integrations}, nil
	case "group":
		return Group{MessageID: s.MessageID, UserID: s.UserID, AnonymousID: s.AnonymousID, GroupID: s.GroupID,
			Timestamp: s.Timestamp, Traits: s.Traits, Context: s.Context, Integrations: s.Integrations}, nil
	case "page":
		return Page{MessageID: s.MessageID, UserID: s.UserID, AnonymousID: s.AnonymousID, Name: s.Name,
			Category: s.Category, Timestamp: s.Timestamp, Properties: s.Properties, Context: s.Context,
			Integrations: s.Integrations}, nil
	case "screen":
		return Screen{MessageID: s.MessageID, UserID: s.UserID, AnonymousID: s.AnonymousID, Name: s.Name,
			Category: s.Category, Timestamp: s.Timestamp, Properties: s.Properties, Context: s.Context,
			Integrations: s.Integrations}, nil
	case "alias":
		return Alias{MessageID: s.MessageID, UserID: s.UserID, AnonymousID: s.AnonymousID, PreviousID: s.PreviousID,
			Timestamp: s.Timestamp, Context: s.Context, Integrations: s.Integrations}, nil
	}
	return nil, fmt.Errorf("unknown message type %q", s.Type)
}
