package analytics

import (
	"encoding/json"
	"fmt"
	"time"
)

// storedMessage is every field the encoder writes, for decoding an event's
// JSON back into its message: replayed events (durable.go) and the test
// server of package analyticstest (through internal/shared).
type storedMessage struct {
	Type         string         `json:"type"`
	MessageID    string         `json:"messageId"`
	Timestamp    time.Time      `json:"timestamp"`
	UserID       string         `json:"userId"`
	AnonymousID  string         `json:"anonymousId"`
	Event        string         `json:"event"`
	GroupID      string         `json:"groupId"`
	Name         string         `json:"name"`
	Category     string         `json:"category"`
	PreviousID   string         `json:"previousId"`
	Properties   map[string]any `json:"properties"`
	Traits       map[string]any `json:"traits"`
	Context      map[string]any `json:"context"`
	Integrations map[string]any `json:"integrations"`
}

// decodeMessage turns stored JSON back into the message type it was
// encoded from. Numbers come back as float64 and nested objects as
// map[string]any, as encoding/json decodes them; Context includes the
// "library" entry the client added.
func decodeMessage(data []byte) (Message, error) {
	var s storedMessage
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
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
