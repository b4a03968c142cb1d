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
	sc.use(c.defaults, c.noLibrary)
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
		err = c.disk.accept(ctx, wait, sc, withCopy, &c.closed) // spill.go
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

// prepareDetached is the enqueue path of a client up to the queue, without
// a client: prepareMessage with callbacks registered, then the size check of
// accept. It backs analyticstest's Fake (see package internal/shared).
func prepareDetached(m Message, now func() time.Time, newID func() string) (Message, error) {
	sc := detachedScratch(now, newID)
	kept, err := prepareMessage(sc, m, true)
	if err == nil {
		err = checkSize(sc.Enc.Bytes())
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
