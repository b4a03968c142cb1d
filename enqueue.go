package analytics

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// dispatch validates, stamps and enqueues m; with wait it waits for room.
// It calls prepare on the concrete type, so m (and its maps) does not
// escape: a message built in the call stays on the caller's stack.
func (c *Client) dispatch(ctx context.Context, wait bool, m Message) error {
	sc := getScratch()
	withCopy := c.withMessages
	var copied Message
	var err error
	ok := true
	switch v := m.(type) {
	case Track:
		copied, err = v.prepare(sc, withCopy)
	case Identify:
		copied, err = v.prepare(sc, withCopy)
	case Group:
		copied, err = v.prepare(sc, withCopy)
	case Page:
		copied, err = v.prepare(sc, withCopy)
	case Screen:
		copied, err = v.prepare(sc, withCopy)
	case Alias:
		copied, err = v.prepare(sc, withCopy)
	case *Track:
		if ok = v != nil; ok {
			copied, err = v.prepare(sc, withCopy)
		}
	case *Identify:
		if ok = v != nil; ok {
			copied, err = v.prepare(sc, withCopy)
		}
	case *Group:
		if ok = v != nil; ok {
			copied, err = v.prepare(sc, withCopy)
		}
	case *Page:
		if ok = v != nil; ok {
			copied, err = v.prepare(sc, withCopy)
		}
	case *Screen:
		if ok = v != nil; ok {
			copied, err = v.prepare(sc, withCopy)
		}
	case *Alias:
		if ok = v != nil; ok {
			copied, err = v.prepare(sc, withCopy)
		}
	default:
		ok = false
	}
	if !ok {
		err = &MessageError{Type: "unknown", Field: "Message", Reason: "must be a non-nil Track, Identify, Group, Page, Screen or Alias"}
	}
	return c.accept(ctx, wait, sc, copied, err)
}

// accept ends an enqueue call (R2, R43, R45): prepare has encoded the event
// into sc's encoder (or failed with err), and withCopy is the message for
// callbacks (nil without callbacks). The JSON is copied into a slab and
// the event queued; without wait it never blocks, with wait it waits for
// room until ctx ends. An enqueue call after Close returns ErrClosed,
// whatever the event.
func (c *Client) accept(ctx context.Context, wait bool, sc *scratch, withCopy Message, err error) error {
	e := &sc.enc
	if c.closed.Load() {
		err = ErrClosed
	}
	if err == nil && len(e.buf) > MaxEventBytes {
		err = fmt.Errorf("%w: %d bytes of JSON, limit %d", ErrEventTooLarge, len(e.buf), MaxEventBytes)
	}
	var ev event
	if err == nil && c.disk != nil {
		err = c.appendDurable(&ev, e.buf, wait) // written to the OS before the call returns
	}
	if err == nil {
		ev.data, ev.slab = sc.copyToSlab(e.buf)
	}
	putScratch(sc)
	if err != nil {
		if errors.Is(err, ErrQueueFull) {
			c.settle.stats.dropped.Add(1)
		}
		return err
	}
	ev.msg = withCopy
	if wait {
		err = c.q.pushWait(ctx, ev)
	} else {
		err = c.q.push(ev)
	}
	if err != nil {
		if c.disk != nil {
			c.disk.ack([]event{ev}) // not accepted: not replayed either
		}
		releaseEvents([]event{ev}) // not accepted: the queue holds no copy
		if errors.Is(err, ErrQueueFull) {
			c.settle.stats.dropped.Add(1)
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
