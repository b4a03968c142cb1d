package wire

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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

// AppendString writes what encoding/json writes (without its HTML
// escaping), for strings of every length around the four- and eight-byte
// steps of its fast path, with each special byte and every ASCII byte at
// each position.
func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	specials := []string{"\"", "\\", "\n", "\x00", "\x1f", "\x7f", "é", "\xff", "€", "\u2028", " "}
	for c := 0; c < utf8.RuneSelf; c++ { // every ASCII byte, for the table of plain bytes
		specials = append(specials, string(rune(c)))
	}
	for n := 0; n <= 40; n++ {
		for pos := 0; pos <= n; pos++ {
			for _, sp := range specials {
				s := strings.Repeat("a", pos) + sp + strings.Repeat("b", n-pos)
				var want bytes.Buffer
				enc := json.NewEncoder(&want)
				enc.SetEscapeHTML(false)
				require.NoError(t, enc.Encode(s))
				got := string(AppendString(nil, s))
				wantS := strings.TrimSuffix(want.String(), "\n")
				// encoding/json writes U+2028 and U+2029 escaped; the
				// encoder leaves them (valid JSON either way).
				if strings.Contains(s, "\u2028") {
					var back string
					require.NoError(t, json.Unmarshal([]byte(got), &back))
					require.Equal(t, s, back)
					continue
				}
				require.Equal(t, wantS, got, "%q", s)
			}
		}
	}
}
