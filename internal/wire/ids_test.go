package wire

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The 128 random bits land in the UUID in order, hi first, with the version
// and variant bits set.
func TestAppendUUIDFromLayout(t *testing.T) {
	got := string(appendUUIDFrom([]byte("id:"), 0x0123456789abcdef, 0xfedcba9876543210))
	require.Equal(t, "id:01234567-89ab-4def-bedc-ba9876543210", got)
}

// Every UUID is the 128 bits written as hex digits, in order, with the
// dashes and the version and variant bits in place: checked against
// fmt for random bits and for the bit patterns at the edges of each digit
// (all zeros, all ones, each nibble 9, a, f).
func TestAppendUUIDFromDigits(t *testing.T) {
	want := func(hi, lo uint64) string {
		hi = hi&^(0xf<<12) | 0x4<<12
		lo = lo&^(0x3<<62) | 0x2<<62
		s := fmt.Sprintf("%016x%016x", hi, lo)
		return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
	}
	words := []uint64{0, ^uint64(0), 0x9999999999999999, 0xaaaaaaaaaaaaaaaa, 0xffffffff00000000, 0x0123456789abcdef, 0xa9a9a9a9a9a9a9a9}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		words = append(words, r.Uint64())
	}
	for i := 0; i+1 < len(words); i++ {
		hi, lo := words[i], words[i+1]
		require.Equal(t, want(hi, lo), string(appendUUIDFrom(nil, hi, lo)), "%#x %#x", hi, lo)
	}
}
