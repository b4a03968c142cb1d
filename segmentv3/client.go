package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"runtime/debug"
	"strings"
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
	// Close sends the messages that were queued and stops the client. As
	// in v3 it waits for no retry: each queued batch gets its attempt, and
	// every message that is not delivered by it (or was waiting for a
	// retry) goes to Callback.Failure at once, with the last error. With
	// Config.DrainOnClose it retries with the normal policy instead. Either
	// way it waits at most Config.CloseTimeout (DefaultCloseTimeout when
	// zero): then it hands every message still without an outcome to
	// Callback.Failure and returns an error that says how many there were,
	// and names a Callback method that had not returned (v3's Close waited
	// for it forever) with the number of messages it was still reporting;
	// it always returns within that bound plus 0.5 s. It returns nil when
	// everything queued got its outcome in time (failures included: they
	// are reported to Callback.Failure). Later calls return ErrClosed.
	io.Closer

	// Enqueue validates msg, fills in its Type, MessageId (a random UUID)
	// and Timestamp (now, in UTC) when they are empty, and queues it for
	// delivery. It waits while the queue is full, as v3 did, and also
	// while a batch per two consumers is queued and not yet taken (the
	// engine's EnqueueContext mark, docs/delivery.md R71), so a backfill
	// holds what it can send; it does no I/O.
	//
	// Enqueue first calls msg's Validate method, as v3 did, and returns its
	// error. It returns an error for a nil message and for a type that is
	// not one of the six message types ("messages with custom types cannot
	// be enqueued: T", T being the type, as in v3), ErrClosed after Close,
	// and an error wrapping ErrMessageTooBig (also passed to
	// Callback.Failure) for a message over 32 KiB of JSON. A message that
	// Enqueue rejected is never sent; one it accepted gets exactly one
	// Callback call. The client does not keep msg or its maps.
	Enqueue(Message) error
}

// New returns a client with the default configuration. It never fails: the
// default configuration is valid, and an empty write key is accepted as in
// v3 (see NewWithConfig).
func New(writeKey string) Client {
	c, err := NewWithConfig(writeKey, Config{})
	if err != nil {
		return &failedClient{err: err}
	}
	return c
}

// NewWithConfig returns a started client configured by config. As v3's, it
// returns a ConfigError, and a nil client, only for a negative Interval or
// BatchSize (and here for a negative CloseTimeout, or NativeOptions the
// engine refuses). Every other value v3 accepted gives a working client,
// with one warning logged for a value that is wrong:
//
//   - an Endpoint that is not an API base URL (not an absolute http or https
//     URL, or one with /v1/batch, a query or a fragment): messages are
//     posted to Endpoint + "/v1/batch" as v3 posted them, and each one that
//     is not delivered there goes to Callback.Failure with the error v3
//     reported (for "url", the *url.Error `Post "url/v1/batch": unsupported
//     protocol scheme ""`);
//   - an empty write key, or one with leading or trailing white space: it is
//     sent as given, the API answers 401, and Callback.Failure receives it;
//   - an Interval over 24 h or a BatchSize over 10 000: the engine's maximum
//     is used instead;
//   - a DefaultContext too large to leave room for a message in a request
//     (about 440 KB of JSON): every message goes to Callback.Failure.
//
// Besides Enqueue and Close, the returned client has the method
// Flush(context.Context) error, which waits until every message enqueued
// before it has its outcome (see the migration guide).
func NewWithConfig(writeKey string, config Config) (Client, error) {
	if err := config.validate(); err != nil {
		return nil, err
	}
	c := &client{
		callback: config.Callback,
		log:      config.logger(),
		pending:  make(map[string][]*pendingMessage),
		uid:      config.uid,
		now:      config.now,
	}
	config = config.accept(c.log)
	if c.uid == nil {
		c.uid = native.NewMessageID
	}
	if c.now == nil {
		c.now = time.Now
	}
	fields, err := config.bodyFields(c.log)
	c.contextErr = err // v3 failed every batch with it; so does this client, message by message
	switch {
	case strings.TrimSpace(writeKey) == "":
		c.log.Warn("analytics: the write key is empty: the API will refuse every request")
	case strings.TrimSpace(writeKey) != writeKey:
		c.log.Warn("analytics: the write key has leading or trailing white space (a newline from a secret file?): " +
			"it is sent as given, and the API will likely refuse every request")
	}
	n, err := native.New(writeKey, config.options(c.log, c, fields)...)
	if err != nil {
		var ce *native.ConfigError
		if errors.As(err, &ce) {
			return nil, config.refused(ce)
		}
		return nil, err
	}
	c.native = n
	c.closeTimeout = n.Config().CloseTimeout // Config.CloseTimeout, or what NativeOptions made it
	c.log.Debug(config.describe(), zap.Duration("closeTimeout", c.closeTimeout))
	c.enqueueCtx, c.stopEnqueue = context.WithCancel(context.Background())
	return c, nil
}

type client struct {
	native       *native.Client
	callback     Callback
	closeTimeout time.Duration
	log          *zap.Logger
	uid          func() string    // Config.uid or a random UUID
	now          func() time.Time // Config.now or time.Now
	contextErr   error            // DefaultContext cannot be encoded: every message fails with it

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
	msg, err := dereference(msg)
	if err != nil {
		return err
	}
	if err := msg.Validate(); err != nil { // first, as v3 did, whatever the type
		return err
	}
	keep, send, ok := engineMessage(msg, c.stamp)
	if !ok {
		return fmt.Errorf("messages with custom types cannot be enqueued: %T", msg)
	}
	if c.contextErr != nil {
		if c.closing.Load() {
			return ErrClosed
		}
		c.fail(keep, c.contextErr) // v3: Enqueue succeeds, the batch fails
		return nil
	}
	return c.send(keep, send)
}

// dereference returns the message a pointer to one of the six types
// refers to, msg itself otherwise, and an error for a nil message (v3
// panicked on one).
func dereference(msg Message) (Message, error) {
	var isNil bool
	switch m := msg.(type) {
	case nil:
		return nil, errors.New("analytics: cannot enqueue a nil Message")
	case *Track:
		if isNil = m == nil; !isNil {
			return *m, nil
		}
	case *Identify:
		if isNil = m == nil; !isNil {
			return *m, nil
		}
	case *Group:
		if isNil = m == nil; !isNil {
			return *m, nil
		}
	case *Page:
		if isNil = m == nil; !isNil {
			return *m, nil
		}
	case *Screen:
		if isNil = m == nil; !isNil {
			return *m, nil
		}
	case *Alias:
		if isNil = m == nil; !isNil {
			return *m, nil
		}
	}
	if isNil {
		return nil, fmt.Errorf("analytics: cannot enqueue a nil %T", msg)
	}
	return msg, nil
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
	c.callback.Failure(m, callbackError(err))
}

// callbackError is the error Callback.Failure receives for err: the error
// v3 would have passed where there is one, so that type assertions written
// for v3 keep matching. A transport failure is the *url.Error itself (the
// engine's *TransportError and *DeliveryError wrap it); a message or
// DefaultContext that cannot be encoded is encoding/json's error. Other
// errors, and every message handed back at Close's deadline (matching
// native.ErrShutdownInterrupted), are the engine's.
func callbackError(err error) error {
	if errors.Is(err, native.ErrShutdownInterrupted) {
		return err
	}
	var (
		ue  *url.Error
		ute *json.UnsupportedTypeError
		uve *json.UnsupportedValueError
		me  *json.MarshalerError
	)
	switch {
	case errors.As(err, &ue):
		return ue
	case errors.As(err, &me):
		return me
	case errors.As(err, &ute):
		return ute
	case errors.As(err, &uve):
		return uve
	}
	return err
}

// recoverCallback, deferred by succeed and fail, logs a panic of the
// Callback once at ERROR, with its value and stack, and ends it there.
func (c *client) recoverCallback(method string) {
	if r := recover(); r != nil {
		c.log.Error("analytics: Callback."+method+" panicked", zap.String("panic", fmt.Sprint(r)), zap.ByteString("stack", debug.Stack()))
	}
}

// retryDelay wraps Config.RetryAfter, which the engine calls on its
// consumer goroutines: a panic of f is logged once at ERROR, with its value
// and stack, and that retry waits v3's default backoff instead.
func (c *client) retryDelay(f func(int) time.Duration) func(int) time.Duration {
	return func(k int) (d time.Duration) {
		defer func() {
			if r := recover(); r != nil {
				c.log.Error("analytics: Config.RetryAfter panicked", zap.String("panic", fmt.Sprint(r)), zap.ByteString("stack", debug.Stack()))
				d = v3RetryAfter(k)
			}
		}()
		return f(k)
	}
}

// Close implements Client (io.Closer).
func (c *client) Close() error {
	if !c.closing.CompareAndSwap(false, true) {
		return ErrClosed
	}
	c.stopEnqueue() // Enqueue calls waiting for room return ErrClosed
	ctx := context.Background()
	if c.closeTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.closeTimeout, closeTimeoutError{c.closeTimeout})
		defer cancel()
	}
	err := c.native.Close(ctx)
	if errors.Is(err, native.ErrClosed) {
		return ErrClosed
	}
	return err
}

// closeTimeoutError is why Close stopped waiting: Config.CloseTimeout
// passed. It matches context.DeadlineExceeded.
type closeTimeoutError struct{ d time.Duration }

func (e closeTimeoutError) Error() string {
	return fmt.Sprintf("Close ran for Config.CloseTimeout (%v)", e.d)
}

func (e closeTimeoutError) Unwrap() error { return context.DeadlineExceeded }

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

// stamp fills an empty id and timestamp as v3 did: from the id generator
// (a random UUID) and the clock (now, here in UTC).
func (c *client) stamp(id string, ts time.Time) (string, time.Time) {
	if id == "" {
		id = c.uid()
	}
	if ts.IsZero() {
		ts = c.now().UTC()
	}
	return id, ts
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
