package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The 128 random bits land in the UUID in order, hi first, with the version
// and variant bits set.
func TestAppendUUIDFromLayout(t *testing.T) {
	got := string(appendUUIDFrom([]byte("id:"), 0x0123456789abcdef, 0xfedcba9876543210))
	require.Equal(t, "id:01234567-89ab-4def-bedc-ba9876543210", got)
}
