package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	PoisonFreedSlabs = true
	goleak.VerifyTestMain(m)
}

// events are the JSON of a body's events, as wire.Events.
type events [][]byte

func (e events) Len() int          { return len(e) }
func (e events) JSON(i int) []byte { return e[i] }
func (e events) Bytes() int {
	n := 0
	for _, d := range e {
		n += len(d) + 1
	}
	return max(n-1, 0)
}

// A body is exactly the envelope, the events' JSON in order, the extra
// members, sentAt and the write key; with the per-event sentAt each event
// also ends in the attempt's sentAt, and nothing else in it changes.
func TestFrameEncode(t *testing.T) {
	evs := events{[]byte(`{"type":"track","messageId":"a"}`), []byte(`{"type":"alias","messageId":"b","context":{"sentAt":1}}`)}
	sentAt := time.Date(2026, 5, 1, 10, 0, 0, 120000000, time.FixedZone("X", 3600))
	for _, tc := range []struct {
		eventSentAt bool
		extra       string
		want        string
	}{
		{false, "", `{"batch":[{"type":"track","messageId":"a"},{"type":"alias","messageId":"b","context":{"sentAt":1}}],"sentAt":"2026-05-01T09:00:00.12Z","writeKey":"w\"k"}`},
		{true, "", `{"batch":[{"type":"track","messageId":"a","sentAt":"2026-05-01T09:00:00.12Z"},{"type":"alias","messageId":"b","context":{"sentAt":1},"sentAt":"2026-05-01T09:00:00.12Z"}],"sentAt":"2026-05-01T09:00:00.12Z","writeKey":"w\"k"}`},
		{false, `"context":{"x":1}`, `{"batch":[{"type":"track","messageId":"a"},{"type":"alias","messageId":"b","context":{"sentAt":1}}],"context":{"x":1},"sentAt":"2026-05-01T09:00:00.12Z","writeKey":"w\"k"}`},
	} {
		var extra []byte
		if tc.extra != "" {
			extra = []byte(tc.extra)
		}
		f := NewFrame(`w"k`, extra, tc.eventSentAt)
		got := f.Encode(nil, evs, sentAt)
		assert.Equal(t, tc.want, string(got))
		assert.True(t, json.Valid(got))
		reused := f.Encode(make([]byte, 3, 4096), evs, sentAt)
		assert.Equal(t, tc.want, string(reused), "a reused buffer")
	}
	// An event that does not end in '}' is written unchanged.
	f := NewFrame("k", nil, true)
	assert.Equal(t, `{"batch":[1,{"a":1,"sentAt":"2026-05-01T09:00:00.12Z"}],"sentAt":"2026-05-01T09:00:00.12Z","writeKey":"k"}`,
		string(f.Encode(nil, events{[]byte(`1`), []byte(`{"a":1}`)}, sentAt)))
}

// Size is what a body adds around its events' JSON and commas, at most
// and exactly for the longest sentAt; PerEvent is what the per-event
// sentAt adds to each event, at most and exactly for the longest sentAt.
func TestFrameSize(t *testing.T) {
	longest := time.Date(2026, 12, 31, 23, 59, 59, 123456789, time.UTC)
	short := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	evs := events{[]byte(`{"a":1}`), []byte(`{"b":2}`), []byte(`{"c":3}`)}
	for _, extra := range []string{"", `"context":{"library":{"name":"x"}}`} {
		for _, on := range []bool{false, true} {
			var members []byte
			if extra != "" {
				members = []byte(extra)
			}
			f := NewFrame("the-write-key", members, on)
			add := evs.Bytes() + evs.Len()*PerEvent(on)
			assert.Equal(t, f.Size()+add, f.BodySize(evs))
			assert.Equal(t, f.BodySize(evs), len(f.Encode(nil, evs, longest)), "extra %q, per-event sentAt %t", extra, on)
			assert.Less(t, len(f.Encode(nil, evs, short)), f.BodySize(evs))
			assert.Equal(t, f.Size(), len(f.Encode(nil, events{}, longest)), "no events")
		}
	}
	assert.Equal(t, 0, PerEvent(false))
	assert.Equal(t, len(`,"sentAt":"2026-12-31T23:59:59.123456789Z"`), PerEvent(true))
}

// Extra members must be object members, within the limit, without the
// body's own keys.
func TestValidExtra(t *testing.T) {
	for _, ok := range []string{`"context":{"a":1}`, `"a":1,"b":[2]`, ` "a" : null `} {
		assert.True(t, ValidExtra([]byte(ok), 100), ok)
	}
	for _, bad := range []string{`"batch":[]`, `"a":1,"sentAt":"x"`, `"writeKey":"k"`, `,"a":1`, `"a":1,`, `{"a":1}`, `"a"`, `[1]`,
		`"a":"` + strings.Repeat("x", 100) + `"`} {
		assert.False(t, ValidExtra([]byte(bad), 100), bad)
	}
}

// A scratch cuts events from a slab until it is full, then from a new one;
// a large event gets its own allocation. The JSON stays put until every
// hold on its slab is released.
func TestScratchCopyToSlab(t *testing.T) {
	var s Scratch
	small := []byte(strings.Repeat("s", SlabSize/8))
	var cut [][]byte
	var from []*Slab
	for range 10 {
		d, sl := s.CopyToSlab(small)
		require.NotNil(t, sl)
		cut, from = append(cut, d), append(from, sl)
	}
	assert.Same(t, from[0], from[7], "eight events fit in one slab")
	assert.NotSame(t, from[7], from[8], "the ninth takes a new one")
	for _, d := range cut {
		require.Equal(t, string(small), string(d))
		require.Equal(t, len(d), cap(d), "an event cannot grow into its neighbour")
	}
	big, sl := s.CopyToSlab([]byte(strings.Repeat("b", SlabSize/4+1)))
	assert.Nil(t, sl)
	assert.Len(t, big, SlabSize/4+1)
	for i := range 8 {
		from[i].Release(1)
	}
	// The first slab is back in the pool (and poisoned) only now.
	assert.Equal(t, strings.Repeat("\x00", len(small)), string(cut[0]))
	assert.Equal(t, string(small), string(cut[8]), "the current slab keeps its JSON")
}

// Message ids are version-4 UUIDs, distinct across id blocks.
func TestScratchMessageID(t *testing.T) {
	var s Scratch
	seen := map[string]bool{}
	for range 3 * idsPerBlock {
		id := s.MessageID()
		require.Len(t, id, 36)
		require.Equal(t, byte('4'), id[14])
		require.False(t, seen[id])
		seen[id] = true
	}
}

// Aimed at its slab, the encoder writes each event where CopyToSlab keeps
// it: the JSON is not copied, every event keeps its own bytes while the
// next ones are written, and an event of any size, one that outgrows the
// room and one that is larger than a slab may hold included, comes out
// whole. Between events the encoder has its own buffer back.
func TestScratchAimAtSlab(t *testing.T) {
	var s Scratch
	s.Enc = newEncoder()
	sizes := []int{300, 300, 5000, 300, 9000, 300, 40000, 20, 300}
	for range 40 {
		sizes = append(sizes, 700)
	}
	var cut [][]byte
	var want []string
	inPlace := 0
	for i, n := range sizes {
		s.Enc.Reset(nil, "")
		s.AimAtSlab()
		text := strings.Repeat(string(rune('a'+i%26)), n)
		s.Enc.buf = append(s.Enc.buf, text...)
		written := s.Enc.Bytes()
		d, sl := s.CopyToSlab(written)
		if sl != nil && len(written) > 0 && &d[0] == &written[0] {
			inPlace++
		}
		require.False(t, s.aimed, "the encoder has its own buffer back")
		if sl != nil {
			require.Equal(t, len(d), cap(d), "an event cannot grow into its neighbour")
		}
		cut, want = append(cut, d), append(want, text)
		for j := range cut {
			require.Equal(t, want[j], string(cut[j]), "event %d after event %d", j, i)
		}
	}
	assert.Greater(t, inPlace, len(sizes)/2, "most events are written in place")
}
