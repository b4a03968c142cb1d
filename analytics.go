package analytics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Tracker is the set of methods an application uses to send events. *Client
// implements it; so does the fake in package analyticstest, so code that
// depends on Tracker can be tested without a server.
type Tracker interface {
	Track(Track) error
	Identify(Identify) error
	Group(Group) error
	Page(Page) error
	Screen(Screen) error
	Alias(Alias) error
	Enqueue(Message) error
	EnqueueContext(context.Context, Message) error
	Flush(context.Context) error
	Close(context.Context) error
}

var _ Tracker = (*Client)(nil)

// Client sends events to a Segment-compatible tracking API. Create it with
// New; all methods are safe for concurrent use.
//
// The enqueue methods (Track, Identify, Group, Page, Screen, Alias, Enqueue)
// validate and encode the event, stamp messageId and timestamp when they are
// empty, and queue it without blocking and without I/O. A nil error means
// the event was accepted: it will get exactly one disposition, reported
// through the callbacks. An error means it was rejected: it is never sent and
// gets no callback. The client keeps nothing of the caller's message, maps
// included (see Message), so the caller may reuse or change it after the
// call.
//
// # Callbacks
//
// OnSuccess and OnError (see WithOnSuccess, WithOnError) run on the client's
// consumer goroutines, or on the goroutine that called Close for events
// handed back at shutdown. Calls for one batch happen after its last
// attempt; calls for different batches may run concurrently when Consumers
// > 1 and are ordered only per consumer. A callback must return quickly: the
// consumer does no other work while it runs. A panicking callback is
// recovered and logged; the consumer keeps running. The messages passed to
// callbacks are copies (see Message).
type Client struct {
	cfg  Config
	log  *zap.Logger
	q    *queue
	gate *rateLimitGate

	onSuccess    func([]Message)
	onError      func(error, []Message)
	keepMessages bool // a callback is registered: events keep their Message

	closed        atomic.Bool   // fast path for enqueue after Close
	quit          chan struct{} // closed by Close once everything has a disposition
	stop          context.Context
	cancelStop    context.CancelFunc // interrupts waits and requests (Close deadline)
	assembleToken chan struct{}
	consumers     sync.WaitGroup
	ownTransport  *http.Transport // the transport New made, closed by Close; nil for WithHTTPClient

	stats     counters
	dropMu    sync.Mutex
	dropsSeen int64     // drops already reported
	dropLast  time.Time // last aggregated drop warning
}

// New returns a started Client that sends to writeKey's source. Invalid
// options make it return a *ConfigError naming the field. The client starts
// its consumer goroutines at once; call Close to stop them.
func New(writeKey string, opts ...Option) (*Client, error) {
	s, err := resolve(writeKey, opts)
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:           s.Config,
		log:           s.logger,
		q:             newQueue(s.QueueCapacity, s.FlushAt),
		gate:          &rateLimitGate{limit: s.MaxRateLimitDuration},
		onSuccess:     s.onSuccess,
		onError:       s.onError,
		keepMessages:  s.onSuccess != nil || s.onError != nil,
		quit:          make(chan struct{}),
		assembleToken: make(chan struct{}, 1),
	}
	c.stop, c.cancelStop = context.WithCancel(context.Background())
	c.assembleToken <- struct{}{}
	httpClient := newHTTPClient(&s)
	if !s.CustomHTTPClient {
		c.ownTransport, _ = httpClient.Transport.(*http.Transport)
	}
	c.consumers.Add(s.Consumers)
	for i := 0; i < s.Consumers; i++ {
		w := &consumer{c: c, sender: newSender(&s, httpClient)}
		go w.run()
	}
	c.log.Debug("analytics client started", zap.Stringer("config", c.cfg))
	return c, nil
}

// Config returns the effective configuration (without the write key).
func (c *Client) Config() Config { return c.cfg }

// Track enqueues a track event. See Client for the contract; errors are
// *MessageError (ErrInvalidMessage), ErrEventTooLarge, ErrQueueFull and
// ErrClosed. The client does not keep m's maps (see Message).
func (c *Client) Track(m Track) error { return c.dispatch(context.Background(), false, m) }

// Identify enqueues an identify event; errors as for Track.
func (c *Client) Identify(m Identify) error { return c.dispatch(context.Background(), false, m) }

// Group enqueues a group event; errors as for Track.
func (c *Client) Group(m Group) error { return c.dispatch(context.Background(), false, m) }

// Page enqueues a page event; errors as for Track.
func (c *Client) Page(m Page) error { return c.dispatch(context.Background(), false, m) }

// Screen enqueues a screen event; errors as for Track.
func (c *Client) Screen(m Screen) error { return c.dispatch(context.Background(), false, m) }

// Alias enqueues an alias event; errors as for Track.
func (c *Client) Alias(m Alias) error { return c.dispatch(context.Background(), false, m) }

// Enqueue enqueues any Message (a value or a non-nil pointer of one of the
// six types) without blocking; errors as for Track.
func (c *Client) Enqueue(m Message) error { return c.dispatch(context.Background(), false, m) }

// EnqueueContext is the blocking mode, for backfills and batch jobs that
// must not drop: when the queue is full it waits for room until ctx ends,
// then returns an error matching both ErrQueueFull and ctx.Err(). It never
// waits when there is room. Other errors are as for Track. The
// non-blocking calls (Track, Enqueue, …) are unaffected.
func (c *Client) EnqueueContext(ctx context.Context, m Message) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return c.dispatch(ctx, true, m)
}

// dispatch validates, stamps and enqueues m; with wait it waits for room.
// It calls prepare on the concrete type, so m (and its maps) does not
// escape: a message built in the call stays on the caller's stack.
func (c *Client) dispatch(ctx context.Context, wait bool, m Message) error {
	sc := getScratch()
	keep := c.keepMessages
	var kept Message
	var err error
	ok := true
	switch v := m.(type) {
	case Track:
		kept, err = v.prepare(sc, keep)
	case Identify:
		kept, err = v.prepare(sc, keep)
	case Group:
		kept, err = v.prepare(sc, keep)
	case Page:
		kept, err = v.prepare(sc, keep)
	case Screen:
		kept, err = v.prepare(sc, keep)
	case Alias:
		kept, err = v.prepare(sc, keep)
	case *Track:
		if ok = v != nil; ok {
			kept, err = v.prepare(sc, keep)
		}
	case *Identify:
		if ok = v != nil; ok {
			kept, err = v.prepare(sc, keep)
		}
	case *Group:
		if ok = v != nil; ok {
			kept, err = v.prepare(sc, keep)
		}
	case *Page:
		if ok = v != nil; ok {
			kept, err = v.prepare(sc, keep)
		}
	case *Screen:
		if ok = v != nil; ok {
			kept, err = v.prepare(sc, keep)
		}
	case *Alias:
		if ok = v != nil; ok {
			kept, err = v.prepare(sc, keep)
		}
	default:
		ok = false
	}
	if !ok {
		err = &MessageError{Type: "unknown", Field: "Message", Reason: "must be a non-nil Track, Identify, Group, Page, Screen or Alias"}
	}
	return c.accept(ctx, wait, sc, kept, err)
}

// accept ends an enqueue call (R2, R43, R45): prepare has encoded the event
// into sc's encoder (or failed with err), and kept is the message for
// callbacks (nil without callbacks). The JSON is copied into a slab and
// the event queued; without wait it never blocks, with wait it waits for
// room until ctx ends.
func (c *Client) accept(ctx context.Context, wait bool, sc *scratch, kept Message, err error) error {
	e := &sc.enc
	if err == nil && c.closed.Load() {
		err = ErrClosed
	}
	if err == nil && len(e.buf) > MaxEventBytes {
		err = fmt.Errorf("%w: %d bytes of JSON, limit %d", ErrEventTooLarge, len(e.buf), MaxEventBytes)
	}
	var ev event
	if err == nil {
		ev.data, ev.slab = sc.keep(e.buf)
	}
	putScratch(sc)
	if err != nil {
		return err
	}
	ev.msg = kept
	if wait {
		err = c.q.pushWait(ctx, ev)
	} else {
		err = c.q.push(ev)
	}
	if err != nil {
		releaseEvents([]event{ev}) // not accepted: the queue holds no copy
		if errors.Is(err, ErrQueueFull) {
			c.stats.dropped.Add(1)
		}
	}
	return err
}

// stamp fills the fields the SDK owns, never overwriting the caller's (R2).
// An empty id is filled only withID (callbacks will read it); otherwise the
// encoder writes a fresh id straight into the JSON, and no string is made.
func stamp(id *string, ts *time.Time, s *scratch, withID bool) {
	if *id == "" && withID {
		*id = s.messageID()
	}
	if ts.IsZero() {
		*ts = time.Now().UTC()
	}
}

// Flush closes the open batch and waits until every event accepted before
// the call has its disposition (delivered, failed or handed back), including
// events that wait for a retry or a rate-limit deadline. It returns nil then,
// or an error wrapping ctx.Err() when ctx ends first; nothing is handed back
// in that case and delivery goes on. Flush may be called any number of
// times, concurrently. After Close it returns ErrClosed (R41).
func (c *Client) Flush(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	done := c.q.mark()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("analytics: flush: %w", ctx.Err())
	}
}

// closeGrace bounds how long Close waits for consumers after its context
// ended, so it returns within the deadline + 0.5 s (R39) even when a
// callback is slow.
const closeGrace = 400 * time.Millisecond

// Close stops the client (R39). Later enqueue calls return ErrClosed. Close
// uploads everything queued with the normal policy (backoff, Retry-After,
// budgets) and returns nil once every accepted event has its disposition.
// If ctx ends first, Close interrupts every wait, cancels requests in
// flight, hands every event without a disposition back through OnError
// with ErrShutdownInterrupted, and returns an error wrapping
// ErrShutdownInterrupted that says how many events were handed back. It
// returns no later than ctx's deadline plus 0.5 s. Delivery failures are
// reported through OnError only. A second Close returns ErrClosed.
func (c *Client) Close(ctx context.Context) error {
	if !c.q.close() {
		return ErrClosed
	}
	c.closed.Store(true)
	handedBefore := c.stats.handedBack.Load()

	interrupted := false
	if done := c.q.mark(); done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			interrupted = true
		}
	}
	if interrupted {
		c.cancelStop() // interrupt waits and requests before consumers see quit
	}
	close(c.quit)

	exited := make(chan struct{})
	go func() { c.consumers.Wait(); close(exited) }()
	if !interrupted {
		select {
		case <-exited:
		case <-ctx.Done():
			interrupted = true
			c.cancelStop()
		}
	}
	if interrupted {
		c.waitGrace(exited)
	}
	c.cancelStop() // releases the context when nothing was interrupted
	if c.ownTransport != nil {
		c.ownTransport.CloseIdleConnections() // no keep-alive goroutines outlive Close
	}
	if rest := c.q.drain(); len(rest) > 0 {
		c.settle(rest, &DeliveryError{Reason: ErrShutdownInterrupted})
	}
	c.reportDrops()
	n := c.stats.handedBack.Load() - handedBefore
	if n == 0 && !(interrupted && c.q.outstanding() > 0) {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("%w: %d event(s) handed back: %w", ErrShutdownInterrupted, n, cause)
	}
	return fmt.Errorf("%w: %d event(s) handed back", ErrShutdownInterrupted, n)
}

func (c *Client) waitGrace(exited <-chan struct{}) {
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		c.log.Error("consumers did not stop within the shutdown grace period; a callback may be blocking")
	}
}
