package analytics

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/relaykit/analytics-go/internal/wire"
)

// Properties are the free-form properties of a Track, Page or Screen event.
// Values must be encodable as JSON.
type Properties = map[string]any

// Traits are the free-form traits of an Identify or Group event.
type Traits = map[string]any

// ContextFields is the optional context object of an event. The client adds
// "library": {"name", "version"} unless the map already has a "library" key.
type ContextFields = map[string]any

// Integrations selects the destinations of an event, e.g. {"All": false}.
type Integrations = map[string]any

// Message is one of Track, Identify, Group, Page, Screen or Alias (values or
// pointers). The set is closed: other types cannot implement it.
//
// With WithOnSuccess registered, messages handed to callbacks are copies
// of the values that were sent, made at enqueue, with MessageID and
// Timestamp filled in when the caller left them empty. Their top-level maps
// (Properties, Traits, Context, Integrations) are copies too; nested values
// are shared. With WithOnError alone they are rebuilt from the JSON that
// was sent, when the failure happens (WithOnError lists how they differ).
// The client never keeps the caller's own maps, so a map literal written
// at the call site can stay on the caller's stack.
//
// Every message type marshals with encoding/json to the event's wire
// format (MarshalJSON), and UnmarshalMessage reads it back.
type Message interface {
	// Validate reports a *MessageError when a required field is missing.
	Validate() error
	// Type returns the wire type, e.g. "track".
	Type() string
	// ID returns the messageId ("" before the message was enqueued, unless
	// the caller set one).
	ID() string

	appendJSON(e *wire.Encoder) error
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
	Context      ContextFields
	Integrations Integrations
}

// Identify ties a user to their traits. UserID or AnonymousID is required.
type Identify struct {
	MessageID    string
	UserID       string
	AnonymousID  string
	Timestamp    time.Time
	Traits       Traits
	Context      ContextFields
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
	Context      ContextFields
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
	Context      ContextFields
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
	Context      ContextFields
	Integrations Integrations
}

// Alias merges two user identities. UserID and PreviousID are required.
type Alias struct {
	MessageID    string
	UserID       string
	AnonymousID  string
	PreviousID   string
	Timestamp    time.Time
	Context      ContextFields
	Integrations Integrations
}

// notAMessage is the error of an enqueue call given nil, a nil pointer, or
// a type outside the closed set.
func notAMessage(m Message) error {
	const pass = "(pass a Track, Identify, Group, Page, Screen or Alias, or a non-nil pointer to one)"
	typ := ""
	switch m.(type) {
	case nil:
		return invalidMessage("", "Message", "is nil "+pass)
	case *Track:
		typ = "track"
	case *Identify:
		typ = "identify"
	case *Group:
		typ = "group"
	case *Page:
		typ = "page"
	case *Screen:
		typ = "screen"
	case *Alias:
		typ = "alias"
	}
	if typ != "" {
		return invalidMessage(typ, "Message", "is a nil pointer "+pass)
	}
	// reflect.TypeOf, unlike fmt, does not make m (and the caller's maps)
	// escape: enqueue stays free of allocations.
	return invalidMessage("", "Message", "has type "+reflect.TypeOf(m).String()+" "+pass)
}

func missing(typ, field string) error {
	return invalidMessage(typ, field, "is required")
}

// blank is the error of a required id given only as white space or
// invisible characters (R65).
func blank(typ, field string) error {
	return invalidMessage(typ, field, "is required (only white space or invisible characters given)")
}

// requireIdentity checks that the event has a userId or an anonymousId; an
// id that is blank after trimming counts as absent (R65).
func requireIdentity(typ, userID, anonymousID string) error {
	if blankID(userID) && blankID(anonymousID) {
		if userID != "" || anonymousID != "" {
			return blank(typ, "UserID or AnonymousID")
		}
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
	if blankID(m.UserID) {
		if m.UserID != "" {
			return blank("alias", "UserID")
		}
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

func (m Track) appendJSON(e *wire.Encoder) error {
	e.Header("track", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	e.StringField("event", m.Event)
	return messageErrorOf(e.Tail("properties", m.Properties, m.Context, m.Integrations))
}

func (m Identify) appendJSON(e *wire.Encoder) error {
	e.Header("identify", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	return messageErrorOf(e.Tail("traits", m.Traits, m.Context, m.Integrations))
}

func (m Group) appendJSON(e *wire.Encoder) error {
	e.Header("group", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	e.StringField("groupId", m.GroupID)
	return messageErrorOf(e.Tail("traits", m.Traits, m.Context, m.Integrations))
}

func (m Page) appendJSON(e *wire.Encoder) error {
	e.Header("page", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	e.OptionalString("name", m.Name)
	e.OptionalString("category", m.Category)
	return messageErrorOf(e.Tail("properties", m.Properties, m.Context, m.Integrations))
}

func (m Screen) appendJSON(e *wire.Encoder) error {
	e.Header("screen", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	e.OptionalString("name", m.Name)
	e.OptionalString("category", m.Category)
	return messageErrorOf(e.Tail("properties", m.Properties, m.Context, m.Integrations))
}

func (m Alias) appendJSON(e *wire.Encoder) error {
	e.Header("alias", m.MessageID, m.Timestamp, m.UserID, m.AnonymousID)
	e.StringField("previousId", m.PreviousID)
	return messageErrorOf(e.Tail("", nil, m.Context, m.Integrations))
}

// Pointer receivers satisfy Message too, so *Track can be passed to Enqueue.
var (
	_ Message = Track{}
	_ Message = (*Track)(nil)
)

// The enqueue path up to the queue: prepareMessage validates an event,
// stamps it and encodes it into a scratch (package internal/wire's
// encoder, slab and id block) with what the client adds to every event:
// context.library and the default maps.

// scratch is the hot path's working state, one per P through sync.Pool, so
// an enqueue call costs one Get and one Put: the wire encoder, slab and id
// block (wire.Scratch), and what the call's client adds.
type scratch struct {
	wire.Scratch
	defaults *defaults // the client's, for the copy callbacks get (detach)

	// Set only by prepareDetached (analyticstest's Fake): a clock and an id
	// generator that replace time.Now and the id block. Nil in the client.
	clock func() time.Time
	newID func() string

	// wall is the wall clock time of the last rebase, with its monotonic
	// reading (see now).
	wall time.Time
}

var scratches = sync.Pool{New: func() any { return &scratch{Scratch: wire.NewScratch()} }}

// libraryJSON is the context.library value every event carries.
const libraryJSON = `{"name":"` + LibraryName + `","version":"` + Version + `"}`

// detachedScratch is a scratch outside the pool with the Fake's clock
// and id generator (see prepareDetached).
func detachedScratch(now func() time.Time, newID func() string) *scratch {
	s := &scratch{clock: now, newID: newID}
	s.use(nil, false)
	return s
}

// getScratch returns a scratch from the pool; use sets what its encoder
// adds.
func getScratch() *scratch { return scratches.Get().(*scratch) }

// use empties s for the next event, which gets the defaults d (nil for
// none) and, unless noLibrary (shared.Compat NoLibrary), context.library.
func (s *scratch) use(d *defaults, noLibrary bool) {
	library := libraryJSON
	if noLibrary {
		library = ""
	}
	s.Enc.Reset(d.encodedMaps(), library)
	s.defaults = d
}

func putScratch(s *scratch) {
	s.defaults = nil
	s.Clean()
	scratches.Put(s)
}

// now is the timestamp stamped on an event without one, always in UTC
// (docs/delivery.md R2).
//
// Performance: time.Now reads two clocks, the wall clock and the monotonic
// one. now reads only the monotonic clock and adds what it has moved since
// the last rebase to the wall time read then; it reads time.Now again once
// rebaseEvery has passed, so a step of the wall clock (NTP, a resume from
// suspend, which the monotonic clock does not count) shows in the
// timestamps within that much running time.
func (s *scratch) now() time.Time {
	if s.clock != nil {
		return s.clock().UTC()
	}
	if !s.wall.IsZero() {
		if d := time.Since(s.wall); d >= 0 && d < rebaseEvery {
			return s.wall.Add(d).UTC()
		}
	}
	s.wall = time.Now()
	return s.wall.UTC()
}

// rebaseEvery is how long now adds the monotonic clock's progress to one
// reading of the wall clock before it reads the wall clock again.
const rebaseEvery = 10 * time.Millisecond

// messageID is a new message id: from the Fake's generator, or cut from
// the id block.
func (s *scratch) messageID() string {
	if s.newID != nil {
		return s.newID()
	}
	return s.MessageID()
}

// NewMessageID returns a new message id, as the client generates for events
// whose MessageID is empty: a random (version 4) UUID. Set it on a message
// before enqueueing it to know the id in advance (for example to correlate
// callbacks or logs). Safe for concurrent use.
func NewMessageID() string {
	s := scratches.Get().(*scratch)
	id := s.MessageID()
	scratches.Put(s)
	return id
}

// stamp fills the fields the SDK owns, never overwriting the caller's (R2).
// An empty id is filled only withID (callbacks will read it); otherwise the
// encoder writes a fresh id straight into the JSON, and no string is made.
func stamp(id *string, ts *time.Time, s *scratch, withID bool) {
	if *id == "" && withID {
		*id = s.messageID()
	}
	if ts.IsZero() {
		*ts = s.now()
	}
}

// prepareMessage validates m, stamps it and encodes it into sc's encoder;
// with keep it also returns the copy callbacks get. A nil or unknown
// Message is a *MessageError. The client and analyticstest's Fake both
// call it (see prepareDetached), so they cannot disagree.
func prepareMessage(sc *scratch, m Message, keep bool) (Message, error) {
	switch v := m.(type) {
	case Track:
		return v.prepare(sc, keep)
	case Identify:
		return v.prepare(sc, keep)
	case Group:
		return v.prepare(sc, keep)
	case Page:
		return v.prepare(sc, keep)
	case Screen:
		return v.prepare(sc, keep)
	case Alias:
		return v.prepare(sc, keep)
	case *Track:
		if v != nil {
			return v.prepare(sc, keep)
		}
	case *Identify:
		if v != nil {
			return v.prepare(sc, keep)
		}
	case *Group:
		if v != nil {
			return v.prepare(sc, keep)
		}
	case *Page:
		if v != nil {
			return v.prepare(sc, keep)
		}
	case *Screen:
		if v != nil {
			return v.prepare(sc, keep)
		}
	case *Alias:
		if v != nil {
			return v.prepare(sc, keep)
		}
	}
	return nil, notAMessage(m)
}

// defaults are the maps of WithDefaultContext and WithDefaultProperties,
// copied when New applies the options and read-only afterwards, so every
// consumer and enqueue call may read them without a lock.
type defaults struct {
	context    map[string]any
	properties map[string]any

	// The same entries encoded once, at New; the encoder splices them into
	// each event's JSON.
	encoded wire.Defaults
}

// encodedMaps is what the encoder merges under an event's maps: nil for
// no defaults.
func (d *defaults) encodedMaps() *wire.Defaults {
	if d == nil {
		return nil
	}
	return &d.encoded
}

// newDefaults returns the client's defaults, or nil when there are none, so
// that enqueue calls without the options do no extra work. The options
// have checked that the maps encode.
func newDefaults(ctx, props map[string]any) *defaults {
	if len(ctx) == 0 && len(props) == 0 {
		return nil
	}
	d := &defaults{}
	if len(ctx) > 0 {
		d.context = ctx
		d.encoded.Context, _ = wire.EncodeMembers(ctx)
	}
	if len(props) > 0 {
		d.properties = props
		d.encoded.Properties, _ = wire.EncodeMembers(props)
	}
	return d
}

// mergeContext returns the Context callbacks get: a copy of own with the
// default entries it lacks (nil when both are empty).
func (d *defaults) mergeContext(own map[string]any) map[string]any {
	if d == nil {
		return cloneMap(own)
	}
	return mergeMaps(own, d.context)
}

// mergeProperties is mergeContext for Properties.
func (d *defaults) mergeProperties(own map[string]any) map[string]any {
	if d == nil {
		return cloneMap(own)
	}
	return mergeMaps(own, d.properties)
}

// mergeMaps copies own's top level and adds under's entries whose keys own
// lacks. It returns nil when own is nil and under is empty.
func mergeMaps(own, under map[string]any) map[string]any {
	if len(under) == 0 {
		return cloneMap(own)
	}
	out := make(map[string]any, len(own)+len(under))
	for k, v := range under {
		out[k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}

// prepare validates m, stamps it (see stamp) and encodes it into s's
// encoder; with keep it also returns the copy that callbacks get. The
// prepare methods are always called on the concrete type (from
// Client.dispatch), so the compiler can see that nothing of m is kept: its
// maps are read, never stored. Escape analysis does not track struct fields
// one by one, so keeping even one string of m in the heap would make the
// caller's maps escape with it. The copy for callbacks (detach) is
// therefore made of copies only: strings, top-level maps and the time.
// TestEnqueueDoesNotKeepCallersMaps fails if that is ever broken.

func (m Track) prepare(s *scratch, keep bool) (kept Message, err error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	stamp(&m.MessageID, &m.Timestamp, s, keep)
	if keep {
		kept = m.detach(s.defaults)
	}
	return kept, m.appendJSON(&s.Enc)
}

func (m Track) detach(d *defaults) Message {
	c := cloneStrings([5]string{m.MessageID, m.UserID, m.AnonymousID, m.Event})
	return Track{MessageID: c[0], UserID: c[1], AnonymousID: c[2], Event: c[3], Timestamp: cloneTime(m.Timestamp),
		Properties: d.mergeProperties(m.Properties), Context: d.mergeContext(m.Context), Integrations: cloneMap(m.Integrations)}
}

func (m Identify) prepare(s *scratch, keep bool) (kept Message, err error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	stamp(&m.MessageID, &m.Timestamp, s, keep)
	if keep {
		kept = m.detach(s.defaults)
	}
	return kept, m.appendJSON(&s.Enc)
}

func (m Identify) detach(d *defaults) Message {
	c := cloneStrings([5]string{m.MessageID, m.UserID, m.AnonymousID})
	return Identify{MessageID: c[0], UserID: c[1], AnonymousID: c[2], Timestamp: cloneTime(m.Timestamp),
		Traits: cloneMap(m.Traits), Context: d.mergeContext(m.Context), Integrations: cloneMap(m.Integrations)}
}

func (m Group) prepare(s *scratch, keep bool) (kept Message, err error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	stamp(&m.MessageID, &m.Timestamp, s, keep)
	if keep {
		kept = m.detach(s.defaults)
	}
	return kept, m.appendJSON(&s.Enc)
}

func (m Group) detach(d *defaults) Message {
	c := cloneStrings([5]string{m.MessageID, m.UserID, m.AnonymousID, m.GroupID})
	return Group{MessageID: c[0], UserID: c[1], AnonymousID: c[2], GroupID: c[3], Timestamp: cloneTime(m.Timestamp),
		Traits: cloneMap(m.Traits), Context: d.mergeContext(m.Context), Integrations: cloneMap(m.Integrations)}
}

func (m Page) prepare(s *scratch, keep bool) (kept Message, err error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	stamp(&m.MessageID, &m.Timestamp, s, keep)
	if keep {
		kept = m.detach(s.defaults)
	}
	return kept, m.appendJSON(&s.Enc)
}

func (m Page) detach(d *defaults) Message {
	c := cloneStrings([5]string{m.MessageID, m.UserID, m.AnonymousID, m.Name, m.Category})
	return Page{MessageID: c[0], UserID: c[1], AnonymousID: c[2], Name: c[3], Category: c[4], Timestamp: cloneTime(m.Timestamp),
		Properties: d.mergeProperties(m.Properties), Context: d.mergeContext(m.Context), Integrations: cloneMap(m.Integrations)}
}

func (m Screen) prepare(s *scratch, keep bool) (kept Message, err error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	stamp(&m.MessageID, &m.Timestamp, s, keep)
	if keep {
		kept = m.detach(s.defaults)
	}
	return kept, m.appendJSON(&s.Enc)
}

func (m Screen) detach(d *defaults) Message {
	c := cloneStrings([5]string{m.MessageID, m.UserID, m.AnonymousID, m.Name, m.Category})
	return Screen{MessageID: c[0], UserID: c[1], AnonymousID: c[2], Name: c[3], Category: c[4], Timestamp: cloneTime(m.Timestamp),
		Properties: d.mergeProperties(m.Properties), Context: d.mergeContext(m.Context), Integrations: cloneMap(m.Integrations)}
}

func (m Alias) prepare(s *scratch, keep bool) (kept Message, err error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	stamp(&m.MessageID, &m.Timestamp, s, keep)
	if keep {
		kept = m.detach(s.defaults)
	}
	return kept, m.appendJSON(&s.Enc)
}

func (m Alias) detach(d *defaults) Message {
	c := cloneStrings([5]string{m.MessageID, m.UserID, m.AnonymousID, m.PreviousID})
	return Alias{MessageID: c[0], UserID: c[1], AnonymousID: c[2], PreviousID: c[3], Timestamp: cloneTime(m.Timestamp),
		Context: d.mergeContext(m.Context), Integrations: cloneMap(m.Integrations)}
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

// cloneStrings copies the strings of in into one new allocation.
func cloneStrings(in [5]string) (out [5]string) {
	n := 0
	for _, s := range in {
		n += len(s)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range in {
		b.WriteString(s)
	}
	all := b.String()
	for i, s := range in {
		out[i], all = all[:len(s)], all[len(s):]
	}
	return out
}

// cloneTime returns the instant t, in UTC, sharing nothing with t.
func cloneTime(t time.Time) time.Time {
	return time.Unix(t.Unix(), int64(t.Nanosecond())).UTC()
}

// cloneMap copies the top level of m (nil stays nil).
func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
