// Package difftest compares the compatibility package
// github.com/relaykit/analytics-go/segmentv3 with the real
// gopkg.in/segmentio/analytics-go.v3 v3.1.0. It is a separate module so
// that users of the SDK never download v3.
package difftest

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
