package wire

import (
	"sync"
	"sync/atomic"
)

// The hot path hands out small pieces of larger allocations: event JSON is
// copied into 32 KiB slabs, and message ids that callbacks will read are cut
// from strings of 64 ids (without callbacks, ids are written straight into
// the JSON). One allocation then serves many events. The caller keeps one
// Scratch per P (through sync.Pool), so concurrent callers rarely share a
// slab.
//
// Slabs are reused. A slab counts holds: the events cut from it that have
// no disposition yet, plus the tickets its scratch has not handed out yet.
// A scratch takes a new slab with slabTickets tickets and hands one to each
// event without touching the count; when it moves on to the next slab it
// gives the rest back in one step, and each disposition gives one back. The
// count reaches zero when the scratch has moved on and every event is done;
// the slab then goes back to a pool. An event's JSON is read only between
// its acceptance and its disposition (the request body is a copy), and
// every accepted event has exactly one disposition, which is what makes
// this safe. A slab whose count never reaches zero (a scratch dropped by
// the pool, say) is simply collected.

// SlabSize is the size of a slab; an event larger than a quarter of it
// gets its own allocation.
const SlabSize = 32 << 10

const (
	idsPerBlock = 64
	slabTickets = 1 << 30 // more than a slab can hold events
)

// A Slab holds the JSON of many events. Only the Scratch that owns it
// appends.
type Slab struct {
	buf  []byte
	refs atomic.Int32 // holds, as described above
}

var slabs = sync.Pool{New: func() any { return &Slab{buf: make([]byte, 0, SlabSize)} }}

// PoisonFreedSlabs makes tests overwrite a slab as it goes back to the
// pool, so that JSON read after its release shows at once as a broken
// body. Set it before any slab is used.
var PoisonFreedSlabs = false

// Release gives back n holds (one per event cut from sl whose JSON will not
// be read again); the last one returns the slab to the pool.
func (sl *Slab) Release(n int32) {
	if sl.refs.Add(-n) == 0 {
		if PoisonFreedSlabs {
			clear(sl.buf)
		}
		sl.buf = sl.buf[:0]
		slabs.Put(sl)
	}
}

// A Scratch is the hot path's working state: an Encoder, the current slab
// and the current id block. The zero value is ready to use. Not safe for
// concurrent use; the caller keeps one per P through sync.Pool.
type Scratch struct {
	Enc    Encoder
	slab   *Slab
	handed int32  // tickets of slab handed out
	ids    string // a block of idsPerBlock ids, 36 bytes each
	next   int    // the next id of ids

	// Between AimAtSlab and the next CopyToSlab or Clean, Enc writes into
	// the free end of slab and own keeps the encoder's own buffer.
	aimed bool
	own   []byte
}

// NewScratch returns a Scratch whose Encoder has room for a typical event.
func NewScratch() Scratch {
	return Scratch{Enc: newEncoder()}
}

// Clean drops what s refers to of its last user (the defaults) and an
// outsize encoder buffer, before s goes back to a pool.
func (s *Scratch) Clean() {
	s.unaim()
	s.Enc.clean()
}

// aimRoom is the least free room of a slab that AimAtSlab writes into;
// with less, it moves on to a fresh slab (the rest, under a typical
// event's size, is left unused).
const aimRoom = 1 << 10

// AimAtSlab has the next event encoded straight into the free end of the
// current slab, so that CopyToSlab finds its JSON already in place and
// copies nothing: the one copy of an event's JSON on the hot path is then
// the request body's. Call it after Enc.Reset. It does nothing when the
// encoder's own buffer has grown past the slab room at hand (an event of
// that size may come again: it is encoded apart and copied, as without
// AimAtSlab). What was written in the slab's free end and not taken by
// CopyToSlab is overwritten by the next event: the slab's length moves
// only in CopyToSlab.
func (s *Scratch) AimAtSlab() {
	if s.aimed {
		return
	}
	sl := s.slab
	if sl == nil || cap(sl.buf)-len(sl.buf) < aimRoom {
		sl = s.nextSlab()
	}
	free := sl.buf[len(sl.buf):cap(sl.buf)]
	if cap(s.Enc.buf) > len(free) {
		return
	}
	s.own, s.aimed = s.Enc.buf[:0], true
	s.Enc.buf = free[:0]
}

// unaim gives the encoder its own buffer back. One that outgrew the slab
// room (append moved it to a new array) becomes its own buffer, as it
// would have grown without AimAtSlab, unless it is larger than an event
// cut from a slab: a rare large event must not stop AimAtSlab for good.
func (s *Scratch) unaim() {
	if !s.aimed {
		return
	}
	if grown := s.Enc.buf; !s.inSlab(grown) && cap(grown) > cap(s.own) && cap(grown) <= SlabSize/4 {
		s.own = grown
	}
	s.Enc.buf, s.own, s.aimed = s.own[:0], nil, false
}

// inSlab reports whether p starts at the free end of the current slab:
// the encoder wrote it there (aimed) and it did not outgrow the room.
func (s *Scratch) inSlab(p []byte) bool {
	sl := s.slab
	if !s.aimed || sl == nil || cap(p) == 0 {
		return false
	}
	n := len(sl.buf)
	return n < cap(sl.buf) && &sl.buf[:n+1][n] == &p[:1][0]
}

// nextSlab gives back the tickets of the current slab not handed out and
// takes a fresh slab.
func (s *Scratch) nextSlab() *Slab {
	if s.slab != nil {
		s.slab.Release(slabTickets - s.handed) // the tickets not handed out
	}
	sl := slabs.Get().(*Slab)
	sl.refs.Store(slabTickets)
	s.slab, s.handed = sl, 0
	return sl
}

// CopyToSlab returns a copy of p for an event, and the slab it was cut
// from (nil for a large event, which gets its own allocation). The caller
// owns one hold on the slab and must Release it at the event's
// disposition, or at once if the event is not accepted.
//
// After AimAtSlab, p is normally the encoder's JSON, already in the slab's
// free end: the slab then only grows over it. The encoder gets its own
// buffer back either way.
func (s *Scratch) CopyToSlab(p []byte) ([]byte, *Slab) {
	if s.inSlab(p) {
		sl := s.slab
		start := len(sl.buf)
		s.unaim() // before the slab grows over p: unaim tells p is in place
		sl.buf = sl.buf[:start+len(p)]
		s.handed++
		return sl.buf[start:len(sl.buf):len(sl.buf)], sl
	}
	defer s.unaim() // after the copy: p may be the encoder's buffer
	if len(p) > SlabSize/4 {
		return append([]byte(nil), p...), nil
	}
	sl := s.slab
	if sl == nil || cap(sl.buf)-len(sl.buf) < len(p) {
		sl = s.nextSlab()
	}
	start := len(sl.buf)
	sl.buf = append(sl.buf, p...)
	s.handed++
	return sl.buf[start:len(sl.buf):len(sl.buf)], sl
}

// MessageID returns a random (version 4) UUID cut from the current block.
// math/rand/v2's global source is ChaCha8, seeded by the runtime and safe
// for concurrent use, which is plenty for idempotency keys and far cheaper
// than crypto/rand.
func (s *Scratch) MessageID() string {
	if s.next*36 >= len(s.ids) {
		buf := make([]byte, 0, idsPerBlock*36)
		for i := 0; i < idsPerBlock; i++ {
			buf = appendUUID(buf)
		}
		s.ids, s.next = string(buf), 0
	}
	id := s.ids[s.next*36 : (s.next+1)*36]
	s.next++
	return id
}
