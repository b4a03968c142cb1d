package analytics

import (
	"math/rand/v2"
	"sync"
)

// The hot path hands out small pieces of larger allocations: event JSON is
// copied into 32 KiB slabs and message ids are cut from strings of 64 ids.
// One allocation then serves many events, which keeps Track at few
// allocations per call. A slab or id block stays alive while any event cut
// from it does; events leave in FIFO order, so that is short. sync.Pool
// keeps one current slab per P, so concurrent callers rarely share one.

const (
	slabSize    = 32 << 10
	idsPerBlock = 64
)

// scratch is the hot path's working state, one per P through sync.Pool, so
// an enqueue call costs one Get and one Put: the encoder's buffer, the
// current slab and the current id block.
type scratch struct {
	enc  encoder
	slab []byte
	ids  string
	next int
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
	if cap(s.enc.buf) > 64<<10 { // do not keep a huge event's buffer
		s.enc.buf = make([]byte, 0, 1024)
	}
	scratches.Put(s)
}

// keep returns a copy of p that shares a slab with other events.
func (s *scratch) keep(p []byte) []byte {
	if len(p) > slabSize/4 {
		return append([]byte(nil), p...) // large events get their own allocation
	}
	if cap(s.slab)-len(s.slab) < len(p) {
		s.slab = make([]byte, 0, slabSize)
	}
	start := len(s.slab)
	s.slab = append(s.slab, p...)
	return s.slab[start:len(s.slab):len(s.slab)]
}

// messageID returns a random (version 4) UUID cut from the current block.
// math/rand/v2's global source is ChaCha8, seeded by the runtime and safe
// for concurrent use, which is plenty for idempotency keys and far cheaper
// than crypto/rand.
func (s *scratch) messageID() string {
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
	hi, lo := rand.Uint64(), rand.Uint64()
	hi = hi&^(0xf<<12) | 0x4<<12 // version 4
	lo = lo&^(0x3<<62) | 0x2<<62 // RFC 4122 variant
	for i := 0; i < 16; i++ {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		var x byte
		if i < 8 {
			x = byte(hi >> (56 - 8*i))
		} else {
			x = byte(lo >> (56 - 8*(i-8)))
		}
		dst = append(dst, hexDigits[x>>4], hexDigits[x&0xf])
	}
	return dst
}
