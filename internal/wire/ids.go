package wire

import (
	"math/rand/v2"
	"slices"
)

const hexDigits = "0123456789abcdef"

// appendUUID appends a new random (version 4) UUID.
func appendUUID(dst []byte) []byte {
	return appendUUIDFrom(dst, rand.Uint64(), rand.Uint64())
}

// appendUUIDFrom appends the version-4 UUID made of the random bits hi, lo
// (their version and variant bits are overwritten). Performance: the 36
// bytes are written in place, in dst's spare capacity (grown once if
// short), rather than into an array that is then copied.
func appendUUIDFrom(dst []byte, hi, lo uint64) []byte {
	hi = hi&^(0xf<<12) | 0x4<<12 // version 4
	lo = lo&^(0x3<<62) | 0x2<<62 // RFC 4122 variant
	// where each of the 16 bytes' two digits go, around the dashes at 8,
	// 13, 18 and 23
	pos := [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}
	n := len(dst)
	dst = slices.Grow(dst, 36)[:n+36]
	u := (*[36]byte)(dst[n:])
	u[8], u[13], u[18], u[23] = '-', '-', '-', '-'
	for i := range 8 {
		x, y := byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
		p, q := pos[i], pos[i+8]
		u[p], u[p+1] = hexDigits[x>>4], hexDigits[x&0xf]
		u[q], u[q+1] = hexDigits[y>>4], hexDigits[y&0xf]
	}
	return dst
}
