package analytics

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// appendTimestamp writes exactly what time.RFC3339Nano does, for every
// instant and location.
func TestAppendTimestampMatchesRFC3339Nano(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("IST", 5*3600+1800), time.FixedZone("W", -3600)}
	var cache secondText
	check := func(ts time.Time) {
		t.Helper()
		want := string(ts.AppendFormat([]byte("x"), time.RFC3339Nano))
		require.Equal(t, want, string(appendTimestamp([]byte("x"), ts, nil)), "%v", ts)
		require.Equal(t, want, string(appendTimestamp([]byte("x"), ts, &cache)), "%v, cached", ts)
	}
	r := rand.New(rand.NewPCG(1, 2))
	lo := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	for i := 0; i < 100000; i++ {
		sec := lo + r.Int64N(hi-lo)
		var ns int64
		switch i % 4 {
		case 0:
			ns = r.Int64N(1e9)
		case 1:
			ns = r.Int64N(1000) * 1e6 // milliseconds: trailing zeros trimmed
		case 2:
			ns = r.Int64N(10) * 1e8
		}
		ts := time.Unix(sec, ns)
		for _, z := range zones {
			check(ts.In(z))
		}
		check(ts.In(time.UTC).Add(time.Duration(r.Int64N(3e9)))) // often the cached second, or the next ones
	}
	for _, ts := range []time.Time{
		{},
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 6, 1, 0, 0, 0, 10, time.UTC),
		time.Date(2024, 2, 29, 12, 0, 0, 1, time.UTC),
		time.Now(), // Local, with a monotonic reading
		time.Now().UTC(),
	} {
		check(ts)
	}
}
