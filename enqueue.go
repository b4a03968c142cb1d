package analytics

import (
	"fmt"
	"time"

	"github.com/relaykit/analytics-go/internal/shared"
)

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

// MaxEventBytes is the largest accepted event, as encoded JSON (R45).
const MaxEventBytes = 32 * 1024

// checkSize rejects an event whose JSON is larger than MaxEventBytes (R45).
func checkSize(json []byte) error {
	if len(json) > MaxEventBytes {
		return fmt.Errorf("%w: %d bytes of JSON, limit %d", ErrEventTooLarge, len(json), MaxEventBytes)
	}
	return nil
}

// The enqueue path without a client, for analyticstest's Fake (reached
// through internal/shared, so not part of this package's API).
func init() {
	shared.Prepare = func(m any, now func() time.Time, newID func() string) (any, error) {
		msg, _ := m.(Message) // nil or not a Message: rejected as unknown below
		return prepareDetached(msg, now, newID)
	}
	shared.Decode = func(raw []byte) (any, error) { return decodeMessage(raw) }
}
