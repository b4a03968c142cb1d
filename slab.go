package analytics

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The hot path hands out small pieces of larger allocations: event JSON is
// copied into 32 KiB slabs, and message ids that callbacks will read are cut
// from strings of 64 ids (without callbacks, ids are written straight into
// the JSON). One allocation then serves many events. sync.Pool keeps one
// current slab per P, so concurrent callers rarely share one.
//
// Slabs are reused. A slab counts holds: the events cut from it that have
// no disposition yet, plus the tickets its scratch has not handed out yet.
// A scratch takes a new slab with slabTickets tickets and hands one to each
// event without touching the count; when it moves on to the next slab it
// gives the rest back in one step, and each disposition gives one back. The
// count reaches zero when the scratch has moved on and every event is done;
// the slab then goes back to a pool. An event's JSON is read only between
// its acceptance and its disposition (the request body is a copy), and
// every accepted event has exactly one disposition (R42), which is what
// makes this safe. A slab whose count never reaches zero (a scratch dropped
// by the pool, say) is simply collected.

const (
	slabSize    = 32 << 10
	idsPerBlock = 64
	slabTickets = 1 << 30 // more than a slab can hold events
)

// slab holds the JSON of many events. Only the scratch that owns it appends.
type slab struct {
	buf  []byte
	refs atomic.Int32 // holds, as described above
}

var slabs = sync.Pool{New: func() any { return &slab{buf: make([]byte, 0, slabSize)} }}

// poisonFreedSlabs makes tests overwrite a slab as it goes back to the pool,
// so that JSON read after its release shows at once as a broken body.
var poisonFreedSlabs = false

// release gives back n holds; the last one returns the slab to the pool.
func (sl *slab) release(n int32) {
	if sl.refs.Add(-n) == 0 {
		if poisonFreedSlabs {
			clear(sl.buf)
		}
		sl.buf = sl.buf[:0]
		slabs.Put(sl)
	}
}

// releaseEvents gives back the slab holds of evs, one atomic step per run
// of events from the same slab. Their JSON must not be read after it.
func releaseEvents(evs []event) {
	var cur *slab
	var n int32
	for i := range evs {
		if sl := evs[i].slab; sl != cur {
			if cur != nil {
				cur.release(n)
			}
			cur, n = sl, 0
		}
		n++
		evs[i].slab = nil
	}
	if cur != nil {
		cur.release(n)
	}
}

// scratch is the hot path's working state, one per P through sync.Pool, so
// an enqueue call costs one Get and one Put: the encoder's buffer, the
// current slab and the current id block.
type scratch struct {
	enc    encoder
	slab   *slab
	handed int32 // tickets of slab handed out
	ids    string
	next   int

	// Set only by prepareDetached (analyticstest's Fake): a clock and an id
	// generator that replace time.Now and the id block. Nil in the client.
	clock func() time.Time
	newID func() string
}

// now is the timestamp stamped on an event without one, always in UTC.
func (s *scratch) now() time.Time {
	if s.clock != nil {
		return s.clock().UTC()
	}
	return time.Now().UTC()
}

var scratches = sync.Pool{New: func() any {
	return &scratch{enc: encoder{buf: make([]byte, 0, 1024)}, next: idsPerBlock}
}}

func getScratch() *scratch {
	s := scratches.Get().(*scratch)
	s.enc.buf, s.enc.err = s.enc.buf[:0], nil
	return s
}

func putScratch(s *scratch) {
	s.enc.defaults, s.enc.noLibrary = nil, false
	if cap(s.enc.buf) > 64<<10 { // do not keep a huge event's buffer
		s.enc.buf = make([]byte, 0, 1024)
	}
	scratches.Put(s)
}

// copyToSlab returns a copy of p for an event, and the slab it was cut from (nil
// for a large event, which gets its own allocation). The caller owns one
// hold on the slab and must release it at the event's disposition, or at
// once if the event is not accepted.
func (s *scratch) copyToSlab(p []byte) ([]byte, *slab) {
	if len(p) > slabSize/4 {
		return append([]byte(nil), p...), nil
	}
	sl := s.slab
	if sl == nil || cap(sl.buf)-len(sl.buf) < len(p) {
		if sl != nil {
			sl.release(slabTickets - s.handed) // the tickets not handed out
		}
		sl = slabs.Get().(*slab)
		sl.refs.Store(slabTickets)
		s.slab, s.handed = sl, 0
	}
	start := len(sl.buf)
	sl.buf = append(sl.buf, p...)
	s.handed++
	return sl.buf[start:len(sl.buf):len(sl.buf)], sl
}

// messageID returns a random (version 4) UUID cut from the current block.
// math/rand/v2's global source is ChaCha8, seeded by the runtime and safe
// for concurrent use, which is plenty for idempotency keys and far cheaper
// than crypto/rand.
func (s *scratch) messageID() string {
	if s.newID != nil {
		return s.newID()
	}
	if s.next == idsPerBlock {
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

// NewMessageID returns a new message id, as the client generates for events
// whose MessageID is empty: a random (version 4) UUID. Set it on a message
// before enqueueing it to know the id in advance (for example to correlate
// callbacks or logs). Safe for concurrent use.
func NewMessageID() string {
	s := scratches.Get().(*scratch)
	id := s.messageID()
	scratches.Put(s)
	return id
}

func appendUUID(dst []byte) []byte {
	return appendUUIDFrom(dst, rand.Uint64(), rand.Uint64())
}

// appendUUIDFrom appends the version-4 UUID made of the random bits hi, lo
// (their version and variant bits are overwritten), written into a fixed
// array first so that the 36 bytes cost one append.
func appendUUIDFrom(dst []byte, hi, lo uint64) []byte {
	hi = hi&^(0xf<<12) | 0x4<<12 // version 4
	lo = lo&^(0x3<<62) | 0x2<<62 // RFC 4122 variant
	// where each of the 16 bytes' two digits go, around the dashes at 8,
	// 13, 18 and 23
	pos := [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}
	var u [36]byte
	u[8], u[13], u[18], u[23] = '-', '-', '-', '-'
	for i := range 8 {
		x, y := byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
		p, q := pos[i], pos[i+8]
		u[p], u[p+1] = hexDigits[x>>4], hexDigits[x&0xf]
		u[q], u[q+1] = hexDigits[y>>4], hexDigits[y&0xf]
	}
	return append(dst, u[:]...)
}
