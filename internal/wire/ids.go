package wire

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
)

// appendUUID appends a new random (version 4) UUID.
func appendUUID(dst []byte) []byte {
	return appendUUIDFrom(dst, rand.Uint64(), rand.Uint64())
}

// appendUUIDFrom appends the version-4 UUID made of the random bits hi, lo
// (their version and variant bits are overwritten), in order, hi first.
// Performance: each 32 bits become eight hex digits in one word (hex8),
// stored in place in dst's spare capacity (grown once if short); no digit
// is looked up in a table.
func appendUUIDFrom(dst []byte, hi, lo uint64) []byte {
	hi = hi&^(0xf<<12) | 0x4<<12 // version 4
	lo = lo&^(0x3<<62) | 0x2<<62 // RFC 4122 variant
	n := len(dst)
	dst = slices.Grow(dst, 36)[:n+36]
	u := (*[36]byte)(dst[n:])
	// xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx: hi's 16 digits, then lo's
	a, b := hex8(uint32(hi>>32)), hex8(uint32(hi))
	c, d := hex8(uint32(lo>>32)), hex8(uint32(lo))
	binary.BigEndian.PutUint64(u[0:8], a)
	u[8] = '-'
	binary.BigEndian.PutUint32(u[9:13], uint32(b>>32))
	u[13] = '-'
	binary.BigEndian.PutUint32(u[14:18], uint32(b))
	u[18] = '-'
	binary.BigEndian.PutUint32(u[19:23], uint32(c>>32))
	u[23] = '-'
	binary.BigEndian.PutUint32(u[24:28], uint32(c))
	binary.BigEndian.PutUint64(u[28:36], d)
	return dst
}

// hex8 is x as eight lowercase hex digits, the first in the word's most
// significant byte: the nibbles are spread one per byte, then each byte
// gets '0' added, and 'a'-'0'-10 more where the nibble is 10 or above.
func hex8(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	v = (v | v<<8) & 0x00ff00ff00ff00ff
	v = (v | v<<4) & 0x0f0f0f0f0f0f0f0f
	letters := (v + 0x0606060606060606) >> 4 & 0x0101010101010101 // 1 in each byte whose nibble is ≥ 10
	return v + 0x3030303030303030 + letters*('a'-'0'-10)
}
