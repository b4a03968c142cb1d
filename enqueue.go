package analytics

import (
	"context"
	"fmt"
	"time"
)

// dispatch validates, stamps and enqueues m; with wait it waits for room.
// prepareMessage calls prepare on the concrete type, so m (and its maps)
// does not escape: a message built in the call stays on the caller's stack.
func (c *Client) dispatch(ctx context.Context, wait bool, m Message) error {
	sc := getScratch()
	sc.enc.defaults = c.defaults
	sc.enc.noLibrary = c.noLibrary
	copied, err := prepareMessage(sc, m, c.keepMessages)
	err = c.settle.stats.count(c.accept(ctx, wait, sc, copied, err))
	if err != nil {
		c.settle.rejected() // the aggregated warning (R51)
	}
	return err
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

// accept ends an enqueue call (R2, R43, R45): prepare has encoded the event
// into sc's encoder (or failed with err), and withCopy is the message for
// callbacks (nil unless OnSuccess is registered: see settler.messages). The JSON is copied into a slab and
// the event queued; without wait it never blocks, with wait it waits for
// room until ctx ends. An enqueue call after Close returns ErrClosed,
// whatever the event.
func (c *Client) accept(ctx context.Context, wait bool, sc *scratch, withCopy Message, err error) error {
	e := &sc.enc
	if c.closed.Load() {
		err = ErrClosed
	}
	if err == nil {
		err = checkSize(e.buf)
	}
	if err == nil && c.disk != nil {
		err = c.disk.accept(ctx, wait, sc, withCopy, &c.closed) // spill.go
		putScratch(sc)
		return err
	}
	var ev event
	if err == nil {
		ev.data, ev.slab = sc.copyToSlab(e.buf)
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

// prepareDetached is the enqueue path of a client up to the queue, without
// a client: prepareMessage with callbacks registered, then the size check of
// accept. It backs analyticstest's Fake (see package internal/shared).
func prepareDetached(m Message, now func() time.Time, newID func() string) (Message, error) {
	sc := &scratch{next: idsPerBlock, clock: now, newID: newID}
	kept, err := prepareMessage(sc, m, true)
	if err == nil {
		err = checkSize(sc.enc.buf)
	}
	if err != nil {
		return nil, err
	}
	return kept, nil
}

// checkSize rejects an event whose JSON is larger than MaxEventBytes (R45).
func checkSize(json []byte) error {
	if len(json) > MaxEventBytes {
		return fmt.Errorf("%w: %d bytes of JSON, limit %d", ErrEventTooLarge, len(json), MaxEventBytes)
	}
	return nil
}
