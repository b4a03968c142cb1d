package analytics

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go/internal/shared"
)

// Tracker is the set of methods code that sends events needs: the enqueue
// calls. *Client implements it; so does the fake in package analyticstest,
// so code that depends on Tracker can be tested without a server.
//
// Flush and Close are deliberately not part of it: the client is shared by
// the whole process and its lifetime belongs to the code that created it
// (usually main, which closes it at shutdown). Code handed a Tracker cannot
// close the client under the other users' feet. Code that owns the client
// keeps the *Client (or declares its own interface with Flush and Close).
type Tracker interface {
	Track(Track) error
	Identify(Identify) error
	Group(Group) error
	Page(Page) error
	Screen(Screen) error
	Alias(Alias) error
	Enqueue(Message) error
	EnqueueContext(context.Context, Message) error
}

var _ Tracker = (*Client)(nil)

// Client sends events to a Segment-compatible tracking API. Create it with
// New; all methods are safe for concurrent use.
//
// The enqueue methods (Track, Identify, Group, Page, Screen, Alias, Enqueue)
// validate and encode the event, stamp messageId and timestamp when they are
// empty, and queue it without blocking and without I/O (in durable mode,
// see WithDiskBuffer, with one append to the disk buffer). A nil error means
// the event was accepted: it will get exactly one disposition, reported
// through the callbacks (in durable mode an event Close keeps on disk gets
// its callback from the client that later sends it: see WithDiskBuffer).
// An error means it was
// rejected: it is never sent and gets no callback. The client keeps nothing
// of the caller's message, maps included (see Message), so the caller may
// reuse or change it after the call.
//
// Events flow one way: the queue (queue.go) → a consumer (consumer.go),
// which cuts a batch to the limits the server taught (ratelimit.go)
// and sends one attempt (request.go) → the verdict settles the batch
// (consumer.go) or puts it in the waiting room (ratelimit.go) until it may be
// sent again; a waiting batch holds no consumer.
//
// # Callbacks
//
// OnSuccess and OnError (see WithOnSuccess, WithOnError) run on the client's
// consumer goroutines, or during Close for events handed back at shutdown.
// Calls for one batch happen after its last attempt; calls for different
// batches may run concurrently when Consumers > 1. A callback must return
// quickly: the consumer does no other work while it runs. A panicking
// callback is recovered and logged at ERROR with its stack; the consumer
// keeps running, and the events keep the outcome they were given. The
// messages passed to callbacks are copies or rebuilt from the JSON sent (see
// Message and WithOnError).
type Client struct {
	cfg          Config
	log          *zap.Logger
	q            *queue
	room         *waitingRoom
	settle       *settler
	keepMessages bool           // OnSuccess is registered: events carry a copy of their Message (see settler.messages)
	defaults     *defaults      // WithDefaultContext, WithDefaultProperties; nil without them
	disk         *durable       // WithDiskBuffer; nil in memory mode
	limits       *learnedLimits // the server's limits learned from its refusals (R67, R68)
	noLibrary    bool           // shared.Compat NoLibrary: no context.library stamp
	noRetries    *atomic.Bool   // shared.Compat FastClose: set when Close begins; nil without
	// successName and errorName: what Close's error calls OnSuccess and
	// OnError (shared.Compat; blockedCallbacks).
	successName, errorName string

	closed          atomic.Bool        // fast path for enqueue after Close
	retire          chan struct{}      // closed by Close once consumers are no longer needed
	interrupt       context.Context    // cancelled when Close's deadline interrupts delivery
	cancelInterrupt context.CancelFunc // interrupts waits and requests
	consumers       sync.WaitGroup
	ownTransport    *http.Transport // the transport New made, closed by Close; nil for WithHTTPClient
	auth            *tokenSource    // WithOAuth's token goroutine; nil without OAuth
	outage          *outageLog      // lines about a failing server (ratelimit.go)
}

// Lock order. These are all the mutexes of the package, and those of
// internal/diskbuf taken while a lock of this package is held. A goroutine
// holding one of them takes only mutexes below it in this list, never one
// above:
//
//  1. durable.mu (durable.go): an enqueue call's append and its
//     memory-or-disk decision, and the disk reader's hand-over. While it
//     is held, the append takes diskbuf's Log.mu, and the push (or the
//     reader's load) queue.mu.
//  2. learnedLimits.mu (ratelimit.go): applyLocked hands the new budget to
//     queue.setBudget, which takes queue.mu, then capacity.mu.
//  3. waitingRoom.mu (ratelimit.go), which also guards the server's health
//     and outage state kept in the room: holding and releasing places
//     takes capacity.mu.
//  4. queue.mu (queue.go): close wakes the blocked producers under it
//     (capacity.mu).
//  5. capacity.mu (queue.go): the line of blocked EnqueueContext calls.
//  6. diskbuf Log.mu, then Log.ackMu (internal/diskbuf): the log's
//     appends and segments, then its acknowledgement file.
//
// The rest are leaves, under which no other mutex is taken:
// tokenSource.mu (oauth.go), settler.dropMu (consumer.go; the rejection
// warning is logged under it) and isolation.mu (queue.go). The
// durable.beforeBatch hook of queue.take (queue.onTake) runs after
// queue.mu is released.

// New returns a started Client that sends to writeKey's source. Invalid
// options make it return a *ConfigError naming the field. An empty write
// key, or one with leading or trailing whitespace (a newline read from a
// secret file), is refused with a *ConfigError for "WriteKey": it is not
// trimmed, because the stored secret is what needs fixing. The client starts
// its consumer goroutines at once; call Close to stop them.
func New(writeKey string, opts ...Option) (*Client, error) {
	s, err := resolve(writeKey, opts)
	if err != nil {
		return nil, err
	}
	q, places := newQueueWith(s.queueOptions())
	c := &Client{
		cfg:          s.effective(),
		log:          s.logger,
		q:            q,
		room:         s.waitingRoom(places),
		settle:       s.settler(q),
		keepMessages: s.keepMessages(),
		defaults:     s.messageDefaults(),
		noLibrary:    s.compat.NoLibrary,
		successName:  cmp.Or(s.compat.SuccessName, "OnSuccess"),
		errorName:    cmp.Or(s.compat.ErrorName, "OnError"),
		retire:       make(chan struct{}),
		limits:       s.learnedLimits(q),
	}
	c.noRetries = s.noRetries()
	var replay int
	if c.disk, replay, err = s.openDisk(); err != nil {
		return nil, err
	}
	if c.disk != nil {
		c.settle.keepOnDisk(c.disk) // hand-backs stay on disk, without a callback
		q.onEachTake(c.disk.beforeBatch)
		c.disk.startReader(q, places, &c.settle.stats, replay) // read back, before any new event, as memory allows
	}
	c.interrupt, c.cancelInterrupt = context.WithCancel(context.Background())
	httpClient := s.uploadClient()
	c.ownTransport = s.ownTransport(httpClient)
	if c.auth = s.tokenSource(httpClient, c.room); c.auth != nil {
		c.auth.start(c.interrupt) // fetches the first token now (R50)
	}
	c.outage = newOutageLog(c.log, q, c.room, c.disk, &c.settle.stats)
	policy := s.retryPolicy(c.noRetries)
	c.consumers.Add(s.Consumers)
	for i := 0; i < s.Consumers; i++ {
		w := newConsumer(c, s.transport(httpClient), policy, s.attemptHook)
		go func() {
			defer c.consumers.Done()
			w.run()
		}()
	}
	c.log.Debug("analytics client started", zap.Stringer("config", c.cfg))
	return c, nil
}

// Config returns the effective configuration, without the write key and
// with the user information of the endpoint URL (a password) replaced by
// xxxxx, so that it is safe to log in any form: String, %+v, JSON, slog or
// zap.Any.
func (c *Client) Config() Config { return c.cfg }

// Track enqueues a track event. See Client for the contract; errors are
// *MessageError (ErrInvalidMessage), ErrEventTooLarge, ErrQueueFull and
// ErrClosed, and in durable mode *DiskError (see WithDiskBuffer). The
// client does not keep m's maps (see Message).
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
// then returns an error matching both ErrQueueFull and ctx.Err(). It also
// waits while a batch is queued for every other consumer (Consumers/2 ×
// FlushAt events not yet taken, at least FlushAt and at most QueueCapacity,
// or more bytes than that many full batches carry: R71), since more queued
// events would not be sent any sooner; so a backfill holds about that many
// events, not QueueCapacity.
// Blocked callers go on in the order they came, woken when a batch's worth
// of room is free. In durable mode (WithDiskBuffer) a full memory is no
// reason to wait, since the event is kept on disk: it waits only at the
// disk limit, until delivered events free space. Other errors are as for
// Track. The non-blocking calls (Track, Enqueue, …) are unaffected: they
// are refused only at QueueCapacity.
func (c *Client) EnqueueContext(ctx context.Context, m Message) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return c.dispatch(ctx, true, m)
}

// dispatch validates, stamps and enqueues m; with wait it waits for room.
// prepareMessage calls prepare on the concrete type, so m (and its maps)
// does not escape: a message built in the call stays on the caller's stack.
func (c *Client) dispatch(ctx context.Context, wait bool, m Message) error {
	sc := getScratch()
	sc.use(c.defaults, c.noLibrary)
	sc.AimAtSlab() // the JSON is written where accept keeps it: no copy (internal/wire)
	copied, err := prepareMessage(sc, m, c.keepMessages)
	err = c.settle.stats.count(c.accept(ctx, wait, sc, copied, err))
	if err != nil {
		c.settle.rejected() // the aggregated warning (R51)
	}
	return err
}

// accept ends an enqueue call (R2, R43, R45): prepare has encoded the event
// into sc's encoder (or failed with err), and withCopy is the message for
// callbacks (nil unless OnSuccess is registered: see settler.messages). The JSON is copied into a slab and
// the event queued; without wait it never blocks, with wait it waits for
// room until ctx ends. An enqueue call after Close returns ErrClosed,
// whatever the event.
func (c *Client) accept(ctx context.Context, wait bool, sc *scratch, withCopy Message, err error) error {
	if c.closed.Load() {
		err = ErrClosed
	}
	if err == nil {
		err = checkSize(sc.Enc.Bytes())
	}
	if err == nil && c.disk != nil {
		err = c.disk.accept(ctx, wait, sc, withCopy, &c.closed) // durable.go
		putScratch(sc)
		return err
	}
	var ev event
	if err == nil {
		ev.data, ev.slab = sc.CopyToSlab(sc.Enc.Bytes())
	}
	putScratch(sc)
	if err != nil {
		return err
	}
	ev.msg = withCopy
	if wait {
		err = c.q.pushWait(ctx, &ev)
	} else {
		err = c.q.pushEvent(&ev)
	}
	if err != nil {
		releaseEvents([]event{ev}) // not accepted: the queue holds no copy
	}
	return err
}

// Flush closes the open batch and waits until every event accepted before
// the call has its disposition (delivered, failed or handed back), including
// events that wait in the waiting room for a retry or a rate-limit
// deadline. It returns nil then, or an error wrapping ctx.Err() when ctx
// ends first; nothing is handed back in that case and delivery goes on. A
// nil ctx means context.Background(). Flush may be called any number of
// times, concurrently; what it keeps while waiting is bounded by the number
// of outstanding events, not by the number of calls. After Close it returns
// ErrClosed (R41).
func (c *Client) Flush(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
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

// closeGrace bounds how long Close goes on after its context ended: it
// returns within the deadline + 0.5 s (R39) whatever the callbacks do.
const closeGrace = 400 * time.Millisecond

// lastChance is how long Close, called with a context that is already done,
// still sends what is queued before it interrupts delivery (R39). It is part
// of closeGrace, so such a Close returns within 0.5 s.
const lastChance = 250 * time.Millisecond

// Close stops the client (R39). Later enqueue calls return ErrClosed. Close
// uploads everything queued or waiting with the normal policy (backoff,
// Retry-After, budgets) and returns nil once every accepted event has its
// disposition. If ctx ends first, Close interrupts every wait, cancels
// requests in flight, hands every event without a disposition back through
// OnError with ErrShutdownInterrupted, and returns an error wrapping
// ErrShutdownInterrupted that says how many events were handed back.
//
// A ctx without a deadline (context.Background(), or a context that can
// only be cancelled) is bounded by CloseTimeout (WithCloseTimeout, default
// 30 s): Close(context.Background()) returns after at most CloseTimeout +
// 0.5 s, and a cancellation before that still interrupts at once. A ctx
// with a deadline is bounded by that deadline alone, longer or shorter than
// CloseTimeout.
//
// A ctx that is already done when Close is called (the context that
// signalled shutdown, or one derived from it) does not hand everything back
// at once: Close still makes one short attempt at what is queued (0.25 s)
// and returns within 0.5 s. What could not be delivered in that time is
// handed back, and the error says the context was already done: derive
// Close's context from context.Background(), for example
// context.WithTimeout(context.Background(), 10*time.Second).
//
// Close returns no later than ctx's deadline plus 0.5 s. If the hand-back
// callbacks (or a callback a consumer is running) have not finished by
// then, Close returns anyway and they finish on their own goroutines; the
// count in its error includes those events, and the error names each
// callback that had not returned with the number of events it was still
// reporting ("OnSuccess did not return (2 event(s) still being
// reported)"). A nil ctx means
// context.Background(). Delivery failures are reported through OnError
// only. A second Close returns ErrClosed.
//
// In durable mode (WithDiskBuffer) the events without an outcome stay on
// disk instead of being handed back through OnError: they get no callback
// (the client that later sends them calls theirs), Close's error says
// "N event(s) handed back (kept in the disk buffer)", Stats.OnDisk counts
// them, and the next client on the directory sends them. Close also stops
// waiting, before ctx ends, once the server is not answering: at least
// three of its recent answers, and at least half of them, were counted
// failures (5xx, 408, 410, 429 or 460 without a usable Retry-After,
// network errors, timeouts; or four in a row over a second or more), none
// was a 2xx since, and the latest answer of all is such a failure; or its
// Retry-After shuts the gate until ctx's deadline or later. It then
// cancels the requests in flight (their events stay on disk too) and its
// error says "the server is not answering", wrapping the last error.
// Close then syncs and closes the disk buffer and releases its lock; if
// that sync fails before the hand-back, the events get OnError as in
// memory mode.
func (c *Client) Close(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	c.endRetries() // before the queue closes: a batch it lets go at once is not retried
	if !c.q.close() {
		return ErrClosed
	}
	c.closed.Store(true)
	c.fastClose()
	// Whatever happens below, consumers are stopped and nothing is left
	// running that Close was meant to end.
	retireOnce := sync.OnceFunc(func() { close(c.retire) })
	defer retireOnce()
	defer c.cancelInterrupt()
	handedBefore := c.settle.handedBack()

	// graceEnd is when Close must stop waiting for consumers and
	// callbacks; it is set once delivery is interrupted.
	var graceEnd time.Time
	var doneBefore error // the cause of a ctx that was done before Close started
	if ctx.Err() != nil {
		doneBefore = context.Cause(ctx)
		graceEnd = time.Now().Add(closeGrace)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(context.Background(), lastChance, doneBefore)
		defer cancel()
		c.log.Warn("Close was called with a context that was already done; " +
			"derive Close's context from context.Background(), not from the one that signalled shutdown")
	} else if _, hasDeadline := ctx.Deadline(); !hasDeadline && c.cfg.CloseTimeout > 0 {
		d := c.cfg.CloseTimeout
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, &closeTimeoutError{d})
		defer cancel()
	}

	interrupted := false
	var stopped error // why Close stopped waiting before ctx ended (durable mode)
	if done := c.q.mark(); done != nil {
		interrupted, stopped = c.awaitOutcomes(ctx, done)
	}
	if interrupted {
		c.interruptDelivery() // interrupt waits and requests before consumers are retired
	}
	retireOnce()

	exited := make(chan struct{})
	go func() { c.consumers.Wait(); close(exited) }()
	if !interrupted {
		select {
		case <-exited:
		case <-ctx.Done():
			interrupted = true
			c.interruptDelivery()
		}
	}
	var grace <-chan time.Time
	stuck := false // the grace ran out: a callback had not returned
	if interrupted {
		if graceEnd.IsZero() {
			graceEnd = time.Now().Add(closeGrace)
		}
		t := time.NewTimer(time.Until(graceEnd)) // one grace for everything left below
		defer t.Stop()
		grace = t.C
		select {
		case <-exited:
		case <-grace:
			grace = closedTimeChan
			stuck = true
			c.log.Error("consumers did not stop within the shutdown grace period; a callback may be blocking")
		}
	}
	c.cancelInterrupt()
	c.auth.stop() // no token request outlives Close
	if c.ownTransport != nil {
		c.ownTransport.CloseIdleConnections() // no keep-alive goroutines outlive Close
	}
	if c.disk != nil {
		c.disk.stopReader() // kept on disk, counted, no callback (durable.go)
	}
	rest := c.q.drain()
	waiting := c.room.close() // handed back batch by batch: each keeps its Last and Attempts
	handing := len(rest)
	for _, b := range waiting {
		handing += len(b.events)
	}
	n := c.settle.handedBack() - handedBefore + int64(handing)
	if handing > 0 {
		err := handBackError(nil, 0) // never sent
		settled := make(chan struct{})
		go func() {
			defer close(settled)
			for _, b := range waiting {
				c.settle.handBack(b, nil)
			}
			if len(rest) > 0 {
				c.settle.events(rest, err)
			}
		}()
		if grace == nil {
			<-settled // not interrupted: no deadline to keep
		} else {
			select {
			case <-settled:
			case <-grace:
				stuck = true
				c.log.Error("hand-back callbacks still running when Close returned", zap.Int("events", handing))
			}
		}
	}
	c.settle.reportDrops(true)
	keep := c.settle.keepsOnDisk()
	kept := ""
	if n > 0 { // one line for every hand-back (R51)
		if keep {
			c.disk.leftOnDisk(n) // Stats.OnDisk
			kept = " (kept in the disk buffer)"
			fields := []zap.Field{zap.Int64("events", n), zap.Bool("kept", true), zap.String("dir", c.disk.dir)}
			if stopped != nil {
				fields = append(fields, zap.NamedError("reason", stopped)) // the server is not answering (R72)
			}
			c.log.Info("events handed back at shutdown", fields...)
		} else {
			c.log.Warn("events handed back at shutdown", zap.Int64("events", n), zap.Bool("kept", false))
		}
	}
	if c.disk != nil {
		c.disk.close() // handed-back events stay on disk
	}
	if n == 0 && !(interrupted && c.q.outstanding() > 0) {
		return nil
	}
	if stuck {
		kept += c.blockedCallbacks()
	}
	if doneBefore != nil {
		return fmt.Errorf("%w: %d event(s) handed back%s: Close's context was already done before Close started (%w); "+
			"derive it from context.Background(), e.g. context.WithTimeout(context.Background(), 10*time.Second)",
			ErrShutdownInterrupted, n, kept, doneBefore)
	}
	if stopped != nil {
		return fmt.Errorf("%w: %d event(s) handed back%s: %w", ErrShutdownInterrupted, n, kept, stopped)
	}
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("%w: %d event(s) handed back%s: %w", ErrShutdownInterrupted, n, kept, cause)
	}
	return fmt.Errorf("%w: %d event(s) handed back%s", ErrShutdownInterrupted, n, kept)
}

// awaitOutcomes waits until done (every accepted event has its outcome)
// or ctx ends, and reports whether delivery must be interrupted. In
// durable mode it also stops waiting when the server is not answering
// (R72, waitingRoom.notAnswering): what is undelivered is on disk and goes out
// at the next start, so waiting out ctx would only delay the shutdown;
// stopped then says why.
func (c *Client) awaitOutcomes(ctx context.Context, done <-chan struct{}) (interrupt bool, stopped error) {
	deadline, _ := ctx.Deadline()
	for {
		var changed <-chan struct{}
		if c.disk != nil {
			var down bool
			var last error
			if down, changed, last = c.room.notAnswering(deadline); down {
				return true, &notAnsweringError{last}
			}
		}
		select {
		case <-done:
			return false, nil
		case <-ctx.Done():
			return true, nil
		case <-changed:
		}
	}
}

// interruptDelivery interrupts waits and requests at Close. In durable mode
// it syncs the disk buffer first: the events handed back stay there without
// a callback only if that sync succeeds; otherwise they get OnError with
// ErrShutdownInterrupted, as without a disk buffer.
func (c *Client) interruptDelivery() {
	if c.settle.keepsOnDisk() {
		if err := c.disk.syncNow(); err != nil {
			c.settle.stopKeeping()
			c.log.Error("disk buffer: the last sync before the hand-back failed; handed-back events get OnError",
				zap.String("dir", c.disk.dir), zap.Error(err))
		}
	}
	c.cancelInterrupt()
}

// notAnsweringError says why Close, in durable mode, stopped waiting before
// its context ended; it wraps the server's last error, if any.
type notAnsweringError struct{ last error }

func (e *notAnsweringError) Error() string {
	if e.last == nil {
		return "Close stopped waiting: the server's Retry-After outlasts Close's deadline"
	}
	return "Close stopped waiting: the server is not answering (last: " + e.last.Error() + ")"
}

func (e *notAnsweringError) Unwrap() error { return e.last }

// blockedCallbacks names, for Close's error, the callbacks that had not
// returned when Close gave up waiting for them, and how many events each
// was still reporting: "; OnSuccess did not return (2 event(s) still
// being reported)". Empty when every callback had returned by then.
func (c *Client) blockedCallbacks() string {
	inSuccess, inError := c.settle.inCallbacks()
	var parts []string
	for _, cb := range []struct {
		name string
		n    int64
	}{{c.successName, inSuccess}, {c.errorName, inError}} {
		if cb.n > 0 {
			parts = append(parts, fmt.Sprintf("%s did not return (%d event(s) still being reported)", cb.name, cb.n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}

// closeTimeoutError is the cause of an interruption by CloseTimeout. It
// matches context.DeadlineExceeded.
type closeTimeoutError struct{ d time.Duration }

func (e *closeTimeoutError) Error() string {
	return fmt.Sprintf("Close ran for CloseTimeout (%v; see WithCloseTimeout)", e.d)
}

func (e *closeTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// closedTimeChan is a channel that is always ready: the grace period has
// already been used up.
var closedTimeChan = func() <-chan time.Time {
	ch := make(chan time.Time)
	close(ch)
	return ch
}()

// endRetries ends retries when Close begins on a client with
// shared.Compat FastClose: consumers fail what would be retried. Close
// calls it before it closes the queue, so the open batch, which the queue
// then lets go at once, fails instead of waiting for a retry.
func (c *Client) endRetries() {
	if c.noRetries != nil {
		c.noRetries.Store(true)
	}
}

// fastClose goes on with a Close without retries (shared.Compat
// FastClose; endRetries came first): every batch waiting in the room is
// due now and the gate opens.
func (c *Client) fastClose() {
	if c.noRetries != nil {
		c.room.dueNow(time.Now())
	}
}

// Stats returns a snapshot of the client's counters. Safe for concurrent
// use; the counters are read one by one, not as one atomic snapshot.
func (c *Client) Stats() Stats {
	pending, accepted := c.q.counts()
	st := c.settle.stats.snapshot(int64(pending), accepted, c.limits.bodyLimit(), c.limits.eventLimit())
	if c.disk != nil {
		c.disk.addStats(&st, !c.closed.Load())
	}
	return st
}

// Seams for the segment v3 compatibility package (segmentv3) and for
// analyticstest's Fake. They are reached through internal/shared, so they
// are not part of this package's API; see shared.Compat for what each
// compatibility setting does.

func init() {
	shared.CompatOption = func(c shared.Compat) any {
		return withCompat(c)
	}
	shared.MaxBodyFields = maxBodyFields
	shared.CheckEndpoint = func(endpoint string) error {
		return checkEndpoint(strings.TrimSuffix(endpoint, "/"))
	}
}
