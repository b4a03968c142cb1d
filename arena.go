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

const slabSize = 32 << 10

type slab struct{ buf []byte }

var slabs = sync.Pool{New: func() any { return &slab{buf: make([]byte, 0, slabSize)} }}

// copyToSlab returns a copy of p that shares a slab with other events.
func copyToSlab(p []byte) []byte {
	if len(p) > slabSize/4 {
		return append([]byte(nil), p...) // large events get their own allocation
	}
	s := slabs.Get().(*slab)
	if cap(s.buf)-len(s.buf) < len(p) {
		s.buf = make([]byte, 0, slabSize)
	}
	start := len(s.buf)
	s.buf = append(s.buf, p...)
	out := s.buf[start:len(s.buf):len(s.buf)]
	slabs.Put(s)
	return out
}

const idsPerBlock = 64

type idBlock struct {
	ids  string
	next int
}

var idBlocks = sync.Pool{New: func() any { return &idBlock{next: idsPerBlock} }}

// NewMessageID returns a new message id, as the client generates for events
// whose MessageID is empty: a random (version 4) UUID. Set it on a message
// before enqueueing it to know the id in advance (for example to correlate
// callbacks or logs). Safe for concurrent use.
func NewMessageID() string { return newMessageID() }

// newMessageID returns a random (version 4) UUID. math/rand/v2's global
// source is ChaCha8, seeded by the runtime and safe for concurrent use,
// which is plenty for idempotency keys and far cheaper than crypto/rand.
func newMessageID() string {
	b := idBlocks.Get().(*idBlock)
	if b.next == idsPerBlock {
		buf := make([]byte, 0, idsPerBlock*36)
		for i := 0; i < idsPerBlock; i++ {
			buf = appendUUID(buf)
		}
		b.ids, b.next = string(buf), 0
	}
	id := b.ids[b.next*36 : (b.next+1)*36]
	b.next++
	idBlocks.Put(b)
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
