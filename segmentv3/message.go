package analytics

import (
	"fmt"
	"time"

	native "github.com/relaykit/analytics-go"
)

// Callback receives the outcome of every message a Client accepted. Set it
// in Config.Callback.
//
// Each accepted message gets exactly one call: Success once the API answered
// its batch with a 2xx status, or Failure with the reason it was not
// delivered (a non-retryable response, retries or budgets exhausted, or
// Close's deadline; errors wrap the engine's errors, see the package
// github.com/relaykit/analytics-go). The message passed is the one that was
// enqueued, dereferenced if it was a pointer, with Type, MessageId and
// Timestamp filled in.
//
// Methods are called from the client's goroutines, possibly concurrently
// for different batches, and must return quickly: the goroutine that calls
// them does no other work meanwhile. A panic in a method is recovered and
// logged.
type Callback interface {
	// Success is called for each message the API accepted.
	Success(Message)

	// Failure is called for each message that was not delivered and will
	// not be retried, with the reason.
	Failure(Message, error)
}

// Message is what Client.Enqueue takes: one of Alias, Group, Identify,
// Page, Screen or Track, as a value or a pointer. As in v3.3.0 the
// interface has only Validate, so other types satisfy it too; Enqueue
// calls their Validate and then refuses them ("messages with custom types
// cannot be enqueued"), as v3 did. A type that embeds one of the six is
// such a type: enqueue the embedded message itself.
type Message interface {
	// Validate returns nil when the required fields are set, or a
	// FieldError naming the first missing one.
	Validate() error
}

// FieldError is returned by Validate (and so by Client.Enqueue) when a
// required field of a message is empty.
type FieldError struct {
	// Type names the message type, for example "analytics.Track".
	Type string

	// Name is the name of the missing field, for example "UserId".
	Name string

	// Value is the field's value.
	Value interface{}
}

// Error names the type, the field and its value.
func (e FieldError) Error() string {
	return fmt.Sprintf("%s.%s: invalid field value: %#v", e.Type, e.Name, e.Value)
}

func missing(typ, name, value string) error {
	return FieldError{Type: "analytics." + typ, Name: name, Value: value}
}

// identity reports a FieldError for UserId when both ids are empty.
func identity(typ, userID, anonymousID string) error {
	if userID == "" && anonymousID == "" {
		return missing(typ, "UserId", userID)
	}
	return nil
}

var (
	_ Message = (*Alias)(nil)
	_ Message = (*Group)(nil)
	_ Message = (*Identify)(nil)
	_ Message = (*Page)(nil)
	_ Message = (*Screen)(nil)
	_ Message = (*Track)(nil)
)

// Alias links a user's previous id to their new UserId
// (https://segment.com/docs/spec/alias/). UserId and PreviousId are required.
type Alias struct {
	// Type is set by the client to "alias"; a value set by the application
	// is overwritten.
	Type string `json:"type,omitempty"`

	MessageId    string       `json:"messageId,omitempty"`
	PreviousId   string       `json:"previousId"`
	UserId       string       `json:"userId"`
	Timestamp    time.Time    `json:"timestamp,omitempty"`
	Context      *Context     `json:"context,omitempty"`
	Integrations Integrations `json:"integrations,omitempty"`
}

// Validate requires UserId, then PreviousId.
func (msg Alias) Validate() error {
	if msg.UserId == "" {
		return missing("Alias", "UserId", msg.UserId)
	}
	if msg.PreviousId == "" {
		return missing("Alias", "PreviousId", msg.PreviousId)
	}
	return nil
}

// Group associates a user with a group (https://segment.com/docs/spec/group/).
// GroupId and one of UserId or AnonymousId are required.
type Group struct {
	// Type is set by the client to "group"; a value set by the application
	// is overwritten.
	Type string `json:"type,omitempty"`

	MessageId    string       `json:"messageId,omitempty"`
	AnonymousId  string       `json:"anonymousId,omitempty"`
	UserId       string       `json:"userId,omitempty"`
	GroupId      string       `json:"groupId"`
	Timestamp    time.Time    `json:"timestamp,omitempty"`
	Context      *Context     `json:"context,omitempty"`
	Traits       Traits       `json:"traits,omitempty"`
	Integrations Integrations `json:"integrations,omitempty"`
}

// Validate requires GroupId, then UserId or AnonymousId.
func (msg Group) Validate() error {
	if msg.GroupId == "" {
		return missing("Group", "GroupId", msg.GroupId)
	}
	return identity("Group", msg.UserId, msg.AnonymousId)
}

// Identify ties a user to their traits
// (https://segment.com/docs/spec/identify/). UserId or AnonymousId is
// required.
type Identify struct {
	// Type is set by the client to "identify"; a value set by the
	// application is overwritten.
	Type string `json:"type,omitempty"`

	MessageId    string       `json:"messageId,omitempty"`
	AnonymousId  string       `json:"anonymousId,omitempty"`
	UserId       string       `json:"userId,omitempty"`
	Timestamp    time.Time    `json:"timestamp,omitempty"`
	Context      *Context     `json:"context,omitempty"`
	Traits       Traits       `json:"traits,omitempty"`
	Integrations Integrations `json:"integrations,omitempty"`
}

// Validate requires UserId or AnonymousId.
func (msg Identify) Validate() error {
	return identity("Identify", msg.UserId, msg.AnonymousId)
}

// Page records a page view (https://segment.com/docs/spec/page/). UserId or
// AnonymousId is required.
type Page struct {
	// Type is set by the client to "page"; a value set by the application
	// is overwritten.
	Type string `json:"type,omitempty"`

	MessageId    string       `json:"messageId,omitempty"`
	AnonymousId  string       `json:"anonymousId,omitempty"`
	UserId       string       `json:"userId,omitempty"`
	Name         string       `json:"name,omitempty"`
	Timestamp    time.Time    `json:"timestamp,omitempty"`
	Context      *Context     `json:"context,omitempty"`
	Properties   Properties   `json:"properties,omitempty"`
	Integrations Integrations `json:"integrations,omitempty"`
}

// Validate requires UserId or AnonymousId.
func (msg Page) Validate() error {
	return identity("Page", msg.UserId, msg.AnonymousId)
}

// Screen records a mobile screen view
// (https://segment.com/docs/spec/screen/). UserId or AnonymousId is
// required.
type Screen struct {
	// Type is set by the client to "screen"; a value set by the
	// application is overwritten.
	Type string `json:"type,omitempty"`

	MessageId    string       `json:"messageId,omitempty"`
	AnonymousId  string       `json:"anonymousId,omitempty"`
	UserId       string       `json:"userId,omitempty"`
	Name         string       `json:"name,omitempty"`
	Timestamp    time.Time    `json:"timestamp,omitempty"`
	Context      *Context     `json:"context,omitempty"`
	Properties   Properties   `json:"properties,omitempty"`
	Integrations Integrations `json:"integrations,omitempty"`
}

// Validate requires UserId or AnonymousId.
func (msg Screen) Validate() error {
	return identity("Screen", msg.UserId, msg.AnonymousId)
}

// Track records an action a user performed
// (https://segment.com/docs/spec/track/). Event and one of UserId or
// AnonymousId are required.
type Track struct {
	// Type is set by the client to "track"; a value set by the application
	// is overwritten.
	Type string `json:"type,omitempty"`

	MessageId    string       `json:"messageId,omitempty"`
	AnonymousId  string       `json:"anonymousId,omitempty"`
	UserId       string       `json:"userId,omitempty"`
	Event        string       `json:"event"`
	Timestamp    time.Time    `json:"timestamp,omitempty"`
	Context      *Context     `json:"context,omitempty"`
	Properties   Properties   `json:"properties,omitempty"`
	Integrations Integrations `json:"integrations,omitempty"`
}

// Validate requires Event, then UserId or AnonymousId.
func (msg Track) Validate() error {
	if msg.Event == "" {
		return missing("Track", "Event", msg.Event)
	}
	return identity("Track", msg.UserId, msg.AnonymousId)
}

// engineMessage returns msg, one of the six message types (not a pointer),
// as the callbacks receive it (with Type set, and MessageId and Timestamp
// filled by stamp when empty), and the engine's message for it. ok is
// false for any other type.
func engineMessage(msg Message, stamp func(id string, ts time.Time) (string, time.Time)) (keep Message, send native.Message, ok bool) {
	switch m := msg.(type) {
	case Track:
		m.Type = "track"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Track{MessageID: m.MessageId, UserID: m.UserId, AnonymousID: m.AnonymousId,
			Event: m.Event, Timestamp: m.Timestamp, Properties: nonEmpty(m.Properties),
			Context: contextOf(m.Context), Integrations: nonEmpty(m.Integrations)}
	case Identify:
		m.Type = "identify"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Identify{MessageID: m.MessageId, UserID: m.UserId, AnonymousID: m.AnonymousId,
			Timestamp: m.Timestamp, Traits: nonEmpty(m.Traits),
			Context: contextOf(m.Context), Integrations: nonEmpty(m.Integrations)}
	case Group:
		m.Type = "group"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Group{MessageID: m.MessageId, UserID: m.UserId, AnonymousID: m.AnonymousId,
			GroupID: m.GroupId, Timestamp: m.Timestamp, Traits: nonEmpty(m.Traits),
			Context: contextOf(m.Context), Integrations: nonEmpty(m.Integrations)}
	case Page:
		m.Type = "page"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Page{MessageID: m.MessageId, UserID: m.UserId, AnonymousID: m.AnonymousId,
			Name: m.Name, Timestamp: m.Timestamp, Properties: nonEmpty(m.Properties),
			Context: contextOf(m.Context), Integrations: nonEmpty(m.Integrations)}
	case Screen:
		m.Type = "screen"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Screen{MessageID: m.MessageId, UserID: m.UserId, AnonymousID: m.AnonymousId,
			Name: m.Name, Timestamp: m.Timestamp, Properties: nonEmpty(m.Properties),
			Context: contextOf(m.Context), Integrations: nonEmpty(m.Integrations)}
	case Alias:
		m.Type = "alias"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Alias{MessageID: m.MessageId, UserID: m.UserId, PreviousID: m.PreviousId,
			Timestamp: m.Timestamp, Context: contextOf(m.Context), Integrations: nonEmpty(m.Integrations)}
	default:
		return nil, nil, false
	}
	return keep, send, true
}

// nonEmpty returns m as the engine's map type, nil when empty: v3 left
// empty maps out of the JSON, the engine writes any non-nil map.
func nonEmpty[M ~map[string]interface{}](m M) map[string]interface{} {
	if len(m) == 0 {
		return nil
	}
	return m
}

// FieldGetter is a message held as a generic object, such as a decoded
// JSON map, that ValidateFields can check (v3.3.0).
type FieldGetter interface {
	// GetField returns the value of the JSON field named field ("type",
	// "userId", "event", …) and whether it is set.
	GetField(field string) (interface{}, bool)
}

// ValidateFields checks msg as the Validate method of its type would: the
// field "type" ("alias", "group", "identify", "page", "screen" or
// "track") picks the type, and the fields that type requires must be
// non-empty strings. It returns nil, or the FieldError that Validate
// would return. Without a known type it returns a FieldError for
// analytics.Event's Type with the type's value. From v3.3.0.
func ValidateFields(msg FieldGetter) error {
	typ, _ := msg.GetField("type")
	name, _ := typ.(string)
	switch name {
	case "alias":
		return Alias{UserId: stringField(msg, "userId"), PreviousId: stringField(msg, "previousId")}.Validate()
	case "group":
		return Group{UserId: stringField(msg, "userId"), AnonymousId: stringField(msg, "anonymousId"),
			GroupId: stringField(msg, "groupId")}.Validate()
	case "identify":
		return Identify{UserId: stringField(msg, "userId"), AnonymousId: stringField(msg, "anonymousId")}.Validate()
	case "page":
		return Page{UserId: stringField(msg, "userId"), AnonymousId: stringField(msg, "anonymousId")}.Validate()
	case "screen":
		return Screen{UserId: stringField(msg, "userId"), AnonymousId: stringField(msg, "anonymousId")}.Validate()
	case "track":
		return Track{UserId: stringField(msg, "userId"), AnonymousId: stringField(msg, "anonymousId"),
			Event: stringField(msg, "event")}.Validate()
	}
	return FieldError{Type: "analytics.Event", Name: "Type", Value: typ}
}

// stringField is msg's field as a string; "" when it is absent or not a
// string.
func stringField(msg FieldGetter, field string) string {
	v, _ := msg.GetField(field)
	s, _ := v.(string)
	return s
}
