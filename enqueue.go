package analytics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/relaykit/analytics-go/internal/wire"
)

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
}

var scratches = sync.Pool{New: func() any { return &scratch{Scratch: wire.NewScratch()} }}

// libraryJSON is the context.library value every event carries.
const libraryJSON = `{"name":"` + LibraryName + `","version":"` + Version + `"}`

// getScratch returns a scratch whose encoder adds the defaults d (nil for
// none) and, unless noLibrary (shared.Compat NoLibrary), context.library.
func getScratch(d *defaults, noLibrary bool) *scratch {
	s := scratches.Get().(*scratch)
	library := libraryJSON
	if noLibrary {
		library = ""
	}
	s.Enc.Reset(d.encodedMaps(), library)
	s.defaults = d
	return s
}

func putScratch(s *scratch) {
	s.defaults = nil
	s.Clean()
	scratches.Put(s)
}

// now is the timestamp stamped on an event without one, always in UTC.
func (s *scratch) now() time.Time {
	if s.clock != nil {
		return s.clock().UTC()
	}
	return time.Now().UTC()
}

// messageID is a new message id: from the Fake's generator, or cut from
// the id block.
func (s *scratch) messageID() string {
	if s.newID != nil {
		return s.newID()
	}
	return s.MessageID()
}

// dispatch validates, stamps and enqueues m; with wait it waits for room.
// prepareMessage calls prepare on the concrete type, so m (and its maps)
// does not escape: a message built in the call stays on the caller's stack.
func (c *Client) dispatch(ctx context.Context, wait bool, m Message) error {
	sc := getScratch(c.defaults, c.noLibrary)
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
	sc := &scratch{clock: now, newID: newID}
	sc.Enc.Reset(nil, libraryJSON)
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
