package analyticstest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/internal/shared"
)

// Fake is an analytics.Tracker that records events in memory instead of
// sending them. Create it with NewFake; the zero value is not usable. All
// methods are safe for concurrent use.
//
// It follows the contract of *analytics.Client where a test can observe it,
// and it runs the client's own code to do so, not a copy:
//
//   - An enqueue call runs the client's preparation of the message: the
//     same type switch (a pointer is recorded as its value; a nil or
//     unknown Message is rejected), the same validation, the same JSON
//     encoding. It returns exactly the error the client returns (a
//     *analytics.MessageError, analytics.ErrEventTooLarge) and records
//     nothing.
//   - An accepted message is stamped as the client stamps it: an empty
//     MessageID gets an id from the client's generator (a random version 4
//     UUID), a zero Timestamp gets the current time in UTC (see
//     WithMessageIDs and WithClock for fixed values). What is recorded is
//     the copy the client's callbacks would get: Timestamp in UTC,
//     top-level maps copied.
//   - After Close every enqueue call returns analytics.ErrClosed, whatever
//     the event, and so do Flush and a second Close.
//   - FailEnqueueWith makes enqueue calls return an error, for example
//     analytics.ErrQueueFull, whatever the event: it is checked before the
//     message is validated (only Close takes precedence).
//
// Accepted events wait, like events in the client's queue, until Flush or
// Close gives them their disposition: each appears in exactly one call of
// the WithOnSuccess callback, or of the WithOnError callback
// when WithDeliveryError is used. Unlike the client, the fake calls these
// callbacks on the goroutine that called Flush or Close, and lets a panic
// in them through.
type Fake struct {
	onSuccess   func([]analytics.Message)
	onError     func(error, []analytics.Message)
	deliveryErr error
	now         func() time.Time // nil: the client's clock
	newID       func() string    // nil: the client's id generator

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
// analytics.WithOnSuccess for the client. Flush and Close call it once with
// the events accepted since the previous Flush or Close (never with none).
// Default: no callback.
func WithOnSuccess(f func(events []analytics.Message)) FakeOption {
	return fakeOptionFunc(func(fk *Fake) { fk.onSuccess = f })
}

// WithOnError registers a callback for events that were not
// delivered, like analytics.WithOnError for the client. It is only called
// when WithDeliveryError sets an error. Default: no callback.
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
// time.Now, as the client). Its result is converted to UTC, as the client
// stamps. It is called at most once per enqueue call, outside the fake's
// lock.
func WithClock(now func() time.Time) FakeOption {
	return fakeOptionFunc(func(fk *Fake) {
		if now != nil {
			fk.now = now
		}
	})
}

// WithMessageIDs sets the generator that stamps an empty MessageID (default:
// the client's generator, a random version 4 UUID). It is called at most
// once per enqueue call of a message without a MessageID, and not for a
// call rejected by Close or FailEnqueueWith, outside the fake's lock.
func WithMessageIDs(next func() string) FakeOption {
	return fakeOptionFunc(func(fk *Fake) {
		if next != nil {
			fk.newID = next
		}
	})
}

// NewFake returns an open Fake with no recorded messages.
func NewFake(opts ...FakeOption) *Fake {
	f := &Fake{changed: make(chan struct{})}
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

// accept checks the fake's state, then prepares m with the client's code
// and records it. With wait set, an injected ErrQueueFull makes it wait as
// EnqueueContext documents.
func (f *Fake) accept(ctx context.Context, m analytics.Message, wait bool) error {
	if err := f.admit(ctx, wait); err != nil {
		return err
	}
	kept, err := shared.Prepare(m, f.now, f.newID) // before the lock: user code runs here
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed { // closed meanwhile: the client too says ErrClosed, whatever the event
		return analytics.ErrClosed
	}
	if err != nil {
		return err
	}
	msg := kept.(analytics.Message)
	f.messages = append(f.messages, msg)
	f.pending = append(f.pending, msg)
	return nil
}

// admit returns ErrClosed after Close, else the FailEnqueueWith error (with
// wait and an error matching ErrQueueFull, it waits for the error to be
// cleared instead), else nil.
func (f *Fake) admit(ctx context.Context, wait bool) error {
	f.mu.Lock()
	for {
		if f.closed {
			f.mu.Unlock()
			return analytics.ErrClosed
		}
		failure := f.enqueueErr
		if failure == nil {
			f.mu.Unlock()
			return nil
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

// FailEnqueueWith makes every later enqueue call return err without
// recording the event, whatever the event: err is returned before the
// message is validated, so an invalid event gets err too (only a closed
// fake answers analytics.ErrClosed instead). nil restores normal behaviour. Use analytics.ErrQueueFull to test how
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
