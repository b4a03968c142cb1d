package analytics

import (
	"fmt"
	"time"
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
