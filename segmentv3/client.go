package analytics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	native "github.com/relaykit/analytics-go"
	"go.uber.org/zap"
)

// Client sends messages to the tracking API. Create one with New or
// NewWithConfig, share it (it is safe for concurrent use) and Close it at
// shutdown.
type Client interface {
	// Close delivers the messages that were queued and stops the client.
	// It waits at most Config.CloseTimeout (DefaultCloseTimeout when
	// zero) for the deliveries, then hands every message it could not
	// deliver to Callback.Failure and returns an error that says how many
	// there were; it always returns within that bound plus 0.5 s. It
	// returns nil when everything queued got its outcome in time (failures
	// included: they are reported to Callback.Failure). Later calls return
	// ErrClosed.
	io.Closer

	// Enqueue validates msg, fills in its Type, MessageId (a random UUID)
	// and Timestamp (now, in UTC) when they are empty, and queues it for
	// delivery. It waits while the queue is full, as v3 did; it does no
	// I/O.
	//
	// It returns a FieldError when a required field is empty, ErrClosed
	// after Close, and an error wrapping ErrMessageTooBig (also passed to
	// Callback.Failure) for a message over 32 KiB of JSON. A message that
	// Enqueue rejected is never sent; one it accepted gets exactly one
	// Callback call. The client does not keep msg or its maps.
	Enqueue(Message) error
}

// New returns a client with the default configuration. With an empty write
// key, which NewWithConfig rejects, the client it returns reports that
// ConfigError from every Enqueue.
func New(writeKey string) Client {
	c, err := NewWithConfig(writeKey, Config{})
	if err != nil {
		return &failedClient{err: err}
	}
	return c
}

// NewWithConfig returns a started client configured by config. It returns
// a ConfigError, and a nil client, when a field has an impossible value or
// writeKey is empty.
//
// Besides Enqueue and Close, the returned client has the method
// Flush(context.Context) error, which waits until every message enqueued
// before it has its outcome (see the migration guide).
func NewWithConfig(writeKey string, config Config) (Client, error) {
	if err := config.validate(); err != nil {
		return nil, err
	}
	c := &client{
		callback:     config.Callback,
		closeTimeout: config.CloseTimeout,
		log:          zapLogger(config.Logger, config.Verbose),
		pending:      make(map[string][]*pendingMessage),
	}
	if c.closeTimeout == 0 {
		c.closeTimeout = DefaultCloseTimeout
	}
	if config.DefaultContext != nil {
		c.defaults = config.DefaultContext.fields(16)
		delete(c.defaults, "library") // the client reports itself
	}
	n, err := native.New(writeKey, config.options(c)...)
	if err != nil {
		var ce *native.ConfigError
		if errors.As(err, &ce) {
			return nil, ConfigError{Reason: ce.Reason, Field: ce.Field, Value: ce.Value}
		}
		return nil, err
	}
	c.native = n
	c.enqueueCtx, c.stopEnqueue = context.WithCancel(context.Background())
	return c, nil
}

type client struct {
	native       *native.Client
	callback     Callback
	closeTimeout time.Duration
	defaults     map[string]interface{} // DefaultContext's fields, without library
	log          *zap.Logger

	enqueueCtx  context.Context // cancelled when Close starts: waiting Enqueue calls end
	stopEnqueue context.CancelFunc
	closing     atomic.Bool

	mu      sync.Mutex
	pending map[string][]*pendingMessage // accepted messages by id, for the callbacks
}

// pendingMessage is an accepted message waiting for its outcome; a pointer
// so that a failed enqueue removes exactly its own entry.
type pendingMessage struct{ msg Message }

// Enqueue implements Client.
func (c *client) Enqueue(msg Message) error {
	var keep Message
	var send native.Message
	switch m := msg.(type) {
	case Track:
		if err := m.Validate(); err != nil {
			return err
		}
		m.Type = "track"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Track{MessageID: m.MessageId, UserID: m.UserId, AnonymousID: m.AnonymousId,
			Event: m.Event, Timestamp: m.Timestamp, Properties: nonEmpty(m.Properties),
			Context: c.context(m.Context), Integrations: nonEmpty(m.Integrations)}
	case Identify:
		if err := m.Validate(); err != nil {
			return err
		}
		m.Type = "identify"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Identify{MessageID: m.MessageId, UserID: m.UserId, AnonymousID: m.AnonymousId,
			Timestamp: m.Timestamp, Traits: nonEmpty(m.Traits),
			Context: c.context(m.Context), Integrations: nonEmpty(m.Integrations)}
	case Group:
		if err := m.Validate(); err != nil {
			return err
		}
		m.Type = "group"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Group{MessageID: m.MessageId, UserID: m.UserId, AnonymousID: m.AnonymousId,
			GroupID: m.GroupId, Timestamp: m.Timestamp, Traits: nonEmpty(m.Traits),
			Context: c.context(m.Context), Integrations: nonEmpty(m.Integrations)}
	case Page:
		if err := m.Validate(); err != nil {
			return err
		}
		m.Type = "page"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Page{MessageID: m.MessageId, UserID: m.UserId, AnonymousID: m.AnonymousId,
			Name: m.Name, Timestamp: m.Timestamp, Properties: nonEmpty(m.Properties),
			Context: c.context(m.Context), Integrations: nonEmpty(m.Integrations)}
	case Screen:
		if err := m.Validate(); err != nil {
			return err
		}
		m.Type = "screen"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Screen{MessageID: m.MessageId, UserID: m.UserId, AnonymousID: m.AnonymousId,
			Name: m.Name, Timestamp: m.Timestamp, Properties: nonEmpty(m.Properties),
			Context: c.context(m.Context), Integrations: nonEmpty(m.Integrations)}
	case Alias:
		if err := m.Validate(); err != nil {
			return err
		}
		m.Type = "alias"
		m.MessageId, m.Timestamp = stamp(m.MessageId, m.Timestamp)
		keep = m
		send = native.Alias{MessageID: m.MessageId, UserID: m.UserId, PreviousID: m.PreviousId,
			Timestamp: m.Timestamp, Context: c.context(m.Context), Integrations: nonEmpty(m.Integrations)}
	case *Track:
		return c.enqueuePointer(m == nil, msg, func() Message { return *m })
	case *Identify:
		return c.enqueuePointer(m == nil, msg, func() Message { return *m })
	case *Group:
		return c.enqueuePointer(m == nil, msg, func() Message { return *m })
	case *Page:
		return c.enqueuePointer(m == nil, msg, func() Message { return *m })
	case *Screen:
		return c.enqueuePointer(m == nil, msg, func() Message { return *m })
	case *Alias:
		return c.enqueuePointer(m == nil, msg, func() Message { return *m })
	default: // only a nil interface: the set of messages is closed
		return errors.New("analytics: cannot enqueue a nil Message")
	}
	return c.send(keep, send)
}

// enqueuePointer enqueues the message a pointer refers to, or reports a
// nil pointer (v3 panicked on one).
func (c *client) enqueuePointer(isNil bool, msg Message, deref func() Message) error {
	if isNil {
		return fmt.Errorf("analytics: cannot enqueue a nil %T", msg)
	}
	return c.Enqueue(deref())
}

// send hands m to the engine, waiting while the queue is full; keep is the
// v3 message the callbacks will receive.
func (c *client) send(keep Message, m native.Message) error {
	var p *pendingMessage
	if c.callback != nil {
		// Registered first: the outcome may arrive before EnqueueContext returns.
		p = &pendingMessage{msg: keep}
		c.mu.Lock()
		c.pending[m.ID()] = append(c.pending[m.ID()], p)
		c.mu.Unlock()
	}
	err := c.native.EnqueueContext(c.enqueueCtx, m)
	if err == nil {
		return nil
	}
	if p != nil {
		c.forget(m.ID(), p)
	}
	switch {
	case errors.Is(err, native.ErrClosed), errors.Is(err, native.ErrQueueFull):
		// ErrQueueFull comes only with enqueueCtx cancelled: Close began.
		return ErrClosed
	case errors.Is(err, native.ErrEventTooLarge):
		err = fmt.Errorf("%w: %w", ErrMessageTooBig, err)
	}
	// v3 accepted too large or unencodable messages and reported them to
	// Failure only; they are reported there too.
	c.fail(keep, err)
	return err
}

func (c *client) forget(id string, p *pendingMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.pending[id]
	for i, q := range list {
		if q == p {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.pending, id)
	} else {
		c.pending[id] = list
	}
}

// take removes and returns the oldest accepted message with id.
func (c *client) take(id string) Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.pending[id]
	if len(list) == 0 {
		return nil
	}
	if len(list) == 1 {
		delete(c.pending, id)
	} else {
		c.pending[id] = list[1:]
	}
	return list[0].msg
}

// delivered is the engine's OnSuccess: one Success call per message.
func (c *client) delivered(events []native.Message) {
	for _, e := range events {
		if m := c.take(e.ID()); m != nil {
			c.succeed(m)
		}
	}
}

// failed is the engine's OnError: one Failure call per message.
func (c *client) failed(err error, events []native.Message) {
	for _, e := range events {
		if m := c.take(e.ID()); m != nil {
			c.fail(m, err)
		}
	}
}

// succeed and fail call the Callback, containing a panic to that message
// so the other messages of the batch still get their call.
func (c *client) succeed(m Message) {
	defer c.recoverCallback("Success")
	c.callback.Success(m)
}

func (c *client) fail(m Message, err error) {
	if c.callback == nil {
		return
	}
	defer c.recoverCallback("Failure")
	c.callback.Failure(m, err)
}

func (c *client) recoverCallback(method string) {
	if r := recover(); r != nil {
		c.log.Error("analytics: Callback."+method+" panicked", zap.Any("panic", r))
	}
}

// Close implements Client (io.Closer).
func (c *client) Close() error {
	if !c.closing.CompareAndSwap(false, true) {
		return ErrClosed
	}
	c.stopEnqueue() // Enqueue calls waiting for room return ErrClosed
	ctx, cancel := context.WithTimeout(context.Background(), c.closeTimeout)
	defer cancel()
	err := c.native.Close(ctx)
	if errors.Is(err, native.ErrClosed) {
		return ErrClosed
	}
	return err
}

// Flush waits until every message enqueued before the call has its outcome
// (reported to the Callback), or ctx ends. Not in v3, whose Client has no
// Flush; reach it with a type assertion:
//
//	if f, ok := client.(interface{ Flush(context.Context) error }); ok { … }
func (c *client) Flush(ctx context.Context) error {
	err := c.native.Flush(ctx)
	if errors.Is(err, native.ErrClosed) {
		return ErrClosed
	}
	return err
}

// context returns the context map of a message: DefaultContext's fields
// under the message's own. nil when both are empty (the engine then sends
// only context.library).
func (c *client) context(ctx *Context) map[string]interface{} {
	if ctx == nil {
		return c.defaults // the engine does not keep or change it
	}
	m := ctx.fields(len(c.defaults) + len(ctx.Extra) + 4)
	for k, v := range c.defaults {
		if _, ok := m[k]; !ok {
			m[k] = v
		}
	}
	return m
}

// stamp fills an empty id and timestamp as v3 did: a random UUID, and now.
func stamp(id string, ts time.Time) (string, time.Time) {
	if id == "" {
		id = native.NewMessageID()
	}
	if ts.IsZero() {
		ts = time.Now().UTC()
	}
	return id, ts
}

// nonEmpty returns m as the engine's map type, nil when empty: v3 left
// empty maps out of the JSON, the engine writes any non-nil map.
func nonEmpty[M ~map[string]interface{}](m M) map[string]interface{} {
	if len(m) == 0 {
		return nil
	}
	return m
}

// failedClient is what New returns when the configuration is invalid (an
// empty write key): it reports the error from every Enqueue.
type failedClient struct {
	err    error
	closed atomic.Bool
}

func (f *failedClient) Enqueue(Message) error {
	if f.closed.Load() {
		return ErrClosed
	}
	return f.err
}

func (f *failedClient) Close() error {
	if !f.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	return nil
}
