package analytics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// storedMessage is every field the encoder writes, for decoding an event's
// JSON back into its message: for the client's callbacks (rebuildMessage,
// from settler.messages; replayed events among them) and for the test
// server of package analyticstest (decodeMessage, through internal/shared).
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
	return s.message()
}

// rebuildMessage is decodeMessage for the client's callbacks: the messages
// of events that kept no copy (see WithOnError) and of replayed events. A
// number written without a fraction or an exponent that fits in an int
// comes back as an int, as the caller most likely gave it; every other
// number is a float64.
func rebuildMessage(data []byte) (Message, error) {
	var s storedMessage
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&s); err != nil {
		return nil, err
	}
	for _, m := range []map[string]any{s.Properties, s.Traits, s.Context, s.Integrations} {
		for k, v := range m {
			m[k] = numbers(v)
		}
	}
	return s.message()
}

// numbers replaces the json.Numbers in v (a decoded JSON value) by ints or
// float64s, as rebuildMessage describes.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil && i >= math.MinInt && i <= math.MaxInt {
				return int(i)
			}
		}
		f, _ := strconv.ParseFloat(s, 64) // the encoder wrote only numbers a float64 holds
		return f
	case map[string]any:
		for k, item := range x {
			x[k] = numbers(item)
		}
	case []any:
		for i, item := range x {
			x[i] = numbers(item)
		}
	}
	return v
}

func (s *storedMessage) message() (Message, error) {
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
