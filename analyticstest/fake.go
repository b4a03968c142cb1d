package analyticstest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/relaykit/analytics-go"
)

// Fake is an analytics.Tracker that records events in memory instead of
// sending them. Create it with NewFake; the zero value is not usable. All
// methods are safe for concurrent use.
//
// It follows the contract of *analytics.Client where a test can observe it:
//
//   - An enqueue call validates the message with its own Validate method and
//     returns that error (a *analytics.MessageError) without recording
//     anything. A nil or unknown Message is rejected the same way.
//   - An accepted message is stamped as the client stamps it: an empty
//     MessageID gets a random UUID, a zero Timestamp gets the current time
//     (see WithMessageIDs and WithClock for fixed values). Pointers are
//     recorded as values.
//   - After Close every enqueue call returns analytics.ErrClosed, and so do
//     Flush and a second Close.
//   - FailEnqueueWith makes enqueue calls return an error, for example
//     analytics.ErrQueueFull.
//
// Accepted events wait, like events in the client's queue, until Flush or
// Close gives them their disposition: each appears in exactly one call of
// the OnSuccess callback, or of the OnError callback when WithDeliveryError
// is used. Unlike the client, the fake calls these callbacks on the
// goroutine that called Flush or Close, and lets a panic in them through.
//
// The fake does not encode events, so it does not reproduce
// analytics.ErrEventTooLarge or the encoding errors of values that are not
// JSON; use FailEnqueueWith to simulate them.
type Fake struct {
	onSuccess   func([]analytics.Message)
	onError     func(error, []analytics.Message)
	deliveryErr error
	now         func() time.Time
	newID       func() string

	mu         sync.Mutex
	messages   []analytics.Message // every accepted message, in order
	pending    []analytics.Message // accepted, without a disposition yet
	enqueueErr error
	closed     bool
	changed    chan struct{} // closed and replaced when a waiter should look again
}

var _ analytics.Tracker = (*Fake)(nil)

// FakeOption configures a Fake in NewFake.
type FakeOption interface {
	applyFake(*Fake)
}

type fakeOptionFunc func(*Fake)

func (f fakeOptionFunc) applyFake(fk *Fake) { f(fk) }

// WithOnSuccess registers a callback for delivered events, like
// analytics.WithOnSuccess. Flush and Close call it once with the events
// accepted since the previous Flush or Close (never with none). Default:
// no callback.
func WithOnSuccess(f func(events []analytics.Message)) FakeOption {
	return fakeOptionFunc(func(fk *Fake) { fk.onSuccess = f })
}

// WithOnError registers a callback for events that were not delivered, like
// analytics.WithOnError. It is only called when WithDeliveryError sets an
// error. Default: no callback.
func WithOnError(f func(err error, events []analytics.Message)) FakeOption {
	return fakeOptionFunc(func(fk *Fake) { fk.onError = f })
}

// WithDeliveryError makes every accepted event end up in the OnError
// callback with err, instead of in OnSuccess, so that an application's
// error handling can be tested. Default nil: every event is delivered.
//
// Pass an error that wraps the reason the real client would report, for
// example a *analytics.DeliveryError with Reason
// analytics.ErrRetriesExhausted and Last an *analytics.HTTPError. When err
// matches analytics.ErrShutdownInterrupted the events are handed back the
// way the client hands them back: only by Close, which then returns an
// error matching analytics.ErrShutdownInterrupted; until Close, Flush waits
// for its context to end and returns an error wrapping ctx.Err().
func WithDeliveryError(err error) FakeOption {
	return fakeOptionFunc(func(fk *Fake) { fk.deliveryErr = err })
}

// WithClock sets the clock that stamps a zero Timestamp (default
// time.Now). It is called once per enqueue call, outside the fake's lock.
func WithClock(now func() time.Time) FakeOption {
	return fakeOptionFunc(func(fk *Fake) {
		if now != nil {
			fk.now = now
		}
	})
}

// WithMessageIDs sets the generator that stamps an empty MessageID (default:
// a random version 4 UUID, as the client uses). It is called once per
// enqueue call of a message without a MessageID, outside the fake's lock.
func WithMessageIDs(next func() string) FakeOption {
	return fakeOptionFunc(func(fk *Fake) {
		if next != nil {
			fk.newID = next
		}
	})
}

// NewFake returns an open Fake with no recorded messages.
func NewFake(opts ...FakeOption) *Fake {
	f := &Fake{now: time.Now, newID: randomUUID, changed: make(chan struct{})}
	for _, o := range opts {
		if o != nil {
			o.applyFake(f)
		}
	}
	return f
}

// Track records a track event; see Fake for the errors.
func (f *Fake) Track(m analytics.Track) error { return f.add(m) }

// Identify records an identify event; see Fake for the errors.
func (f *Fake) Identify(m analytics.Identify) error { return f.add(m) }

// Group records a group event; see Fake for the errors.
func (f *Fake) Group(m analytics.Group) error { return f.add(m) }

// Page records a page event; see Fake for the errors.
func (f *Fake) Page(m analytics.Page) error { return f.add(m) }

// Screen records a screen event; see Fake for the errors.
func (f *Fake) Screen(m analytics.Screen) error { return f.add(m) }

// Alias records an alias event; see Fake for the errors.
func (f *Fake) Alias(m analytics.Alias) error { return f.add(m) }

// Enqueue records any Message (a value or a non-nil pointer of one of the
// six types); see Fake for the errors.
func (f *Fake) Enqueue(m analytics.Message) error { return f.add(m) }

// EnqueueContext records m like Enqueue. When FailEnqueueWith set an error
// matching analytics.ErrQueueFull, it behaves like the client's blocking
// mode facing a full queue: it waits until the failure is cleared (then it
// accepts m), the fake is closed (analytics.ErrClosed) or ctx ends (an
// error matching both analytics.ErrQueueFull and ctx.Err()). A nil ctx
// means context.Background().
func (f *Fake) EnqueueContext(ctx context.Context, m analytics.Message) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return f.accept(ctx, m, true)
}

// add is the non-blocking accept of Track, Enqueue and the others.
func (f *Fake) add(m analytics.Message) error { return f.accept(context.Background(), m, false) }

// accept validates, stamps and records m. With wait set, an injected
// ErrQueueFull makes it wait as EnqueueContext documents.
func (f *Fake) accept(ctx context.Context, m analytics.Message, wait bool) error {
	m, err := normalize(m)
	if err != nil {
		return err
	}
	if err := m.Validate(); err != nil {
		return err
	}
	m = f.stamp(m) // before the lock: user code runs here
	f.mu.Lock()
	for {
		if f.closed {
			f.mu.Unlock()
			return analytics.ErrClosed
		}
		failure := f.enqueueErr
		if failure == nil {
			break
		}
		if !wait || !errors.Is(failure, analytics.ErrQueueFull) {
			f.mu.Unlock()
			return failure
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", failure, ctx.Err())
		}
		f.mu.Lock()
	}
	f.messages = append(f.messages, m)
	f.pending = append(f.pending, m)
	f.mu.Unlock()
	return nil
}

// Flush gives every event accepted so far its disposition: it calls
// OnSuccess, or OnError with the WithDeliveryError error, once with all of
// them, and returns nil. After Close it returns analytics.ErrClosed. For
// an error matching analytics.ErrShutdownInterrupted see WithDeliveryError.
func (f *Fake) Flush(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return analytics.ErrClosed
	}
	if isHandBack(f.deliveryErr) {
		// The client hands events back only at Close; until then a Flush
		// cannot complete.
		for len(f.pending) > 0 && !f.closed {
			changed := f.changed
			f.mu.Unlock()
			select {
			case <-changed:
			case <-ctx.Done():
				return fmt.Errorf("analyticstest: flush: %w", ctx.Err())
			}
			f.mu.Lock()
		}
		f.mu.Unlock()
		return nil
	}
	events := f.pending
	f.pending = nil
	f.mu.Unlock()
	f.dispose(events)
	return nil
}

// Close closes the fake: later enqueue calls and Flush return
// analytics.ErrClosed, and so does a second Close. It gives the events
// accepted since the last Flush their disposition as Flush does and returns
// nil; when the WithDeliveryError error matches
// analytics.ErrShutdownInterrupted and events were handed back, it returns
// an error matching analytics.ErrShutdownInterrupted, as the client does.
// ctx is not used: the fake never waits in Close.
func (f *Fake) Close(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return analytics.ErrClosed
	}
	f.closed = true
	events := f.pending
	f.pending = nil
	f.notifyLocked()
	f.mu.Unlock()
	f.dispose(events)
	if isHandBack(f.deliveryErr) && len(events) > 0 {
		return fmt.Errorf("%w: %d event(s) handed back", analytics.ErrShutdownInterrupted, len(events))
	}
	return nil
}

func (f *Fake) dispose(events []analytics.Message) {
	if len(events) == 0 {
		return
	}
	if f.deliveryErr == nil {
		if f.onSuccess != nil {
			f.onSuccess(events)
		}
		return
	}
	if f.onError != nil {
		f.onError(f.deliveryErr, events)
	}
}

func isHandBack(err error) bool {
	return err != nil && errors.Is(err, analytics.ErrShutdownInterrupted)
}

// FailEnqueueWith makes every later enqueue call return err (after
// validation, and unless the fake is closed) without recording the event;
// nil restores normal behaviour. Use analytics.ErrQueueFull to test how
// code copes with a full queue; see EnqueueContext for the blocking mode.
func (f *Fake) FailEnqueueWith(err error) {
	f.mu.Lock()
	f.enqueueErr = err
	f.notifyLocked()
	f.mu.Unlock()
}

// Reset forgets every recorded message, pending events included (they get
// no callback), clears FailEnqueueWith and reopens a closed fake. The
// options given to NewFake stay.
func (f *Fake) Reset() {
	f.mu.Lock()
	f.messages, f.pending = nil, nil
	f.enqueueErr = nil
	f.closed = false
	f.notifyLocked()
	f.mu.Unlock()
}

// notifyLocked wakes every goroutine waiting in EnqueueContext or Flush.
func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Closed reports whether Close was called (and Reset was not called since).
func (f *Fake) Closed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// Pending returns how many accepted events wait for Flush or Close.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// Messages returns a copy of every accepted message, in the order the
// enqueue calls returned, stamped as sent. Each element is a value
// (analytics.Track, analytics.Identify, …), never a pointer.
func (f *Fake) Messages() []analytics.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]analytics.Message, len(f.messages))
	copy(out, f.messages)
	return out
}

// Tracks returns the accepted track events, in order.
func (f *Fake) Tracks() []analytics.Track { return only[analytics.Track](f) }

// Identifies returns the accepted identify events, in order.
func (f *Fake) Identifies() []analytics.Identify { return only[analytics.Identify](f) }

// Groups returns the accepted group events, in order.
func (f *Fake) Groups() []analytics.Group { return only[analytics.Group](f) }

// Pages returns the accepted page events, in order.
func (f *Fake) Pages() []analytics.Page { return only[analytics.Page](f) }

// Screens returns the accepted screen events, in order.
func (f *Fake) Screens() []analytics.Screen { return only[analytics.Screen](f) }

// Aliases returns the accepted alias events, in order.
func (f *Fake) Aliases() []analytics.Alias { return only[analytics.Alias](f) }

func only[M analytics.Message](f *Fake) []M {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []M
	for _, m := range f.messages {
		if v, ok := m.(M); ok {
			out = append(out, v)
		}
	}
	return out
}

// normalize turns a pointer into its value and rejects nil and unknown
// messages with the error the client returns.
func normalize(m analytics.Message) (analytics.Message, error) {
	switch v := m.(type) {
	case analytics.Track, analytics.Identify, analytics.Group,
		analytics.Page, analytics.Screen, analytics.Alias:
		return v, nil
	case *analytics.Track:
		if v != nil {
			return *v, nil
		}
	case *analytics.Identify:
		if v != nil {
			return *v, nil
		}
	case *analytics.Group:
		if v != nil {
			return *v, nil
		}
	case *analytics.Page:
		if v != nil {
			return *v, nil
		}
	case *analytics.Screen:
		if v != nil {
			return *v, nil
		}
	case *analytics.Alias:
		if v != nil {
			return *v, nil
		}
	}
	return nil, &analytics.MessageError{Type: "unknown", Field: "Message",
		Reason: "must be a non-nil Track, Identify, Group, Page, Screen or Alias"}
}

// stamp fills an empty MessageID and a zero Timestamp, never overwriting
// the caller's values, as the client does.
func (f *Fake) stamp(m analytics.Message) analytics.Message {
	switch v := m.(type) {
	case analytics.Track:
		f.fill(&v.MessageID, &v.Timestamp)
		return v
	case analytics.Identify:
		f.fill(&v.MessageID, &v.Timestamp)
		return v
	case analytics.Group:
		f.fill(&v.MessageID, &v.Timestamp)
		return v
	case analytics.Page:
		f.fill(&v.MessageID, &v.Timestamp)
		return v
	case analytics.Screen:
		f.fill(&v.MessageID, &v.Timestamp)
		return v
	case analytics.Alias:
		f.fill(&v.MessageID, &v.Timestamp)
		return v
	}
	return m
}

func (f *Fake) fill(id *string, ts *time.Time) {
	if *id == "" {
		*id = f.newID()
	}
	if ts.IsZero() {
		*ts = f.now()
	}
}

// randomUUID returns a random version 4 UUID.
func randomUUID() string {
	hi := rand.Uint64()&^(0xf<<12) | 0x4<<12 // version 4
	lo := rand.Uint64()&^(0x3<<62) | 0x2<<62 // RFC 4122 variant
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x",
		hi>>32, hi>>16&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
}
