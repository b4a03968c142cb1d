package analytics

import "time"

// Properties are the free-form properties of a Track, Page or Screen event.
// Values must be encodable as JSON.
type Properties = map[string]any

// Traits are the free-form traits of an Identify or Group event.
type Traits = map[string]any

// Context is the optional context object of an event. The client adds
// "library": {"name", "version"} unless the map already has a "library" key.
type Context = map[string]any

// Integrations selects the destinations of an event, e.g. {"All": false}.
type Integrations = map[string]any

// Message is one of Track, Identify, Group, Page, Screen or Alias (values or
// pointers). The set is closed: other types cannot implement it.
//
// Messages handed to callbacks are the values that were sent: MessageID and
// Timestamp are filled in when the caller left them empty.
type Message interface {
	// Validate reports a *MessageError when a required field is missing.
	Validate() error
	// Type returns the wire type, e.g. "track".
	Type() string
	// ID returns the messageId ("" before the message was enqueued, unless
	// the caller set one).
	ID() string

	appendJSON(e *encoder) error
}

// Track records an action a user performed (Segment spec: track).
// Event and one of UserID or AnonymousID are required.
type Track struct {
	MessageID    string // optional; generated when empty, never overwritten (R2)
	UserID       string
	AnonymousID  string
	Event        string
	Timestamp    time.Time // optional; now when zero
	Properties   Properties
	Context      Context
	Integrations Integrations
}

// Identify ties a user to their traits. UserID or AnonymousID is required.
type Identify struct {
	MessageID    string
	UserID       string
	AnonymousID  string
	Timestamp    time.Time
	Traits       Traits
	Context      Context
	Integrations Integrations
}

// Group associates a user with a group. GroupID and UserID or AnonymousID
// are required.
type Group struct {
	MessageID    string
	UserID       string
	AnonymousID  string
	GroupID      string
	Timestamp    time.Time
	Traits       Traits
	Context      Context
	Integrations Integrations
}

// Page records a page view. UserID or AnonymousID is required.
type Page struct {
	MessageID    string
	UserID       string
	AnonymousID  string
	Name         string
	Category     string
	Timestamp    time.Time
	Properties   Properties
	Context      Context
	Integrations Integrations
}

// Screen records a mobile screen view. UserID or AnonymousID is required.
type Screen struct {
	MessageID    string
	UserID       string
	AnonymousID  string
	Name         string
	Category     string
	Timestamp    time.Time
	Properties   Properties
	Context      Context
	Integrations Integrations
}

// Alias merges two user identities. UserID and PreviousID are required.
type Alias struct {
	MessageID    string
	UserID       string
	AnonymousID  string
	PreviousID   string
	Timestamp    time.Time
	Context      Context
	Integrations Integrations
}

func missing(typ, field string) error {
	return &MessageError{Type: typ, Field: field, Reason: "is required"}
}

func requireIdentity(typ, userID, anonymousID string) error {
	if userID == "" && anonymousID == "" {
		return missing(typ, "UserID or AnonymousID")
	}
	return nil
}

// Validate implements Message.
func (m Track) Validate() error {
	if m.Event == "" {
		return missing("track", "Event")
	}
	return requireIdentity("track", m.UserID, m.AnonymousID)
}

// Validate implements Message.
func (m Identify) Validate() error { return requireIdentity("identify", m.UserID, m.AnonymousID) }

// Validate implements Message.
func (m Group) Validate() error {
	if m.GroupID == "" {
		return missing("group", "GroupID")
	}
	return requireIdentity("group", m.UserID, m.AnonymousID)
}

// Validate implements Message.
func (m Page) Validate() error { return requireIdentity("page", m.UserID, m.AnonymousID) }

// Validate implements Message.
func (m Screen) Validate() error { return requireIdentity("screen", m.UserID, m.AnonymousID) }

// Validate implements Message.
func (m Alias) Validate() error {
	if m.PreviousID == "" {
		return missing("alias", "PreviousID")
	}
	if m.UserID == "" {
		return missing("alias", "UserID")
	}
	return nil
}

// Type implements Message.
func (Track) Type() string { return "track" }

// Type implements Message.
func (Identify) Type() string { return "identify" }

// Type implements Message.
func (Group) Type() string { return "group" }

// Type implements Message.
func (Page) Type() string { return "page" }

// Type implements Message.
func (Screen) Type() string { return "screen" }

// Type implements Message.
func (Alias) Type() string { return "alias" }

// ID implements Message.
func (m Track) ID() string { return m.MessageID }

// ID implements Message.
func (m Identify) ID() string { return m.MessageID }

// ID implements Message.
func (m Group) ID() string { return m.MessageID }

// ID implements Message.
func (m Page) ID() string { return m.MessageID }

// ID implements Message.
func (m Screen) ID() string { return m.MessageID }

// ID implements Message.
func (m Alias) ID() string { return m.MessageID }

func (m Track) appendJSON(e *encoder) error {
	e.header("track", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	e.stringField("event", m.Event)
	return e.tail("properties", m.Properties, m.Context, m.Integrations)
}

func (m Identify) appendJSON(e *encoder) error {
	e.header("identify", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	return e.tail("traits", m.Traits, m.Context, m.Integrations)
}

func (m Group) appendJSON(e *encoder) error {
	e.header("group", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	e.stringField("groupId", m.GroupID)
	return e.tail("traits", m.Traits, m.Context, m.Integrations)
}

func (m Page) appendJSON(e *encoder) error {
	e.header("page", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	e.optionalString("name", m.Name)
	e.optionalString("category", m.Category)
	return e.tail("properties", m.Properties, m.Context, m.Integrations)
}

func (m Screen) appendJSON(e *encoder) error {
	e.header("screen", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	e.optionalString("name", m.Name)
	e.optionalString("category", m.Category)
	return e.tail("properties", m.Properties, m.Context, m.Integrations)
}

func (m Alias) appendJSON(e *encoder) error {
	e.header("alias", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	e.stringField("previousId", m.PreviousID)
	return e.tail("", nil, m.Context, m.Integrations)
}

// Pointer receivers satisfy Message too, so *Track can be passed to Enqueue.
var (
	_ Message = Track{}
	_ Message = (*Track)(nil)
)

func (m Track) withDefaults(s *scratch, withID bool) Track {
	stamp(&m.MessageID, &m.Timestamp, s, withID)
	return m
}

func (m Identify) withDefaults(s *scratch, withID bool) Identify {
	stamp(&m.MessageID, &m.Timestamp, s, withID)
	return m
}

func (m Group) withDefaults(s *scratch, withID bool) Group {
	stamp(&m.MessageID, &m.Timestamp, s, withID)
	return m
}

func (m Page) withDefaults(s *scratch, withID bool) Page {
	stamp(&m.MessageID, &m.Timestamp, s, withID)
	return m
}

func (m Screen) withDefaults(s *scratch, withID bool) Screen {
	stamp(&m.MessageID, &m.Timestamp, s, withID)
	return m
}

func (m Alias) withDefaults(s *scratch, withID bool) Alias {
	stamp(&m.MessageID, &m.Timestamp, s, withID)
	return m
}

// enqueueAs calls withDefaults through its type parameter, which some
// linters do not follow; these references keep the methods visibly used.
var _ = []any{Track.withDefaults, Identify.withDefaults, Group.withDefaults, Page.withDefaults, Screen.withDefaults, Alias.withDefaults}
