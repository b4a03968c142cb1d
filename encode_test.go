package analytics

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/analytics-go/internal/wire"
)

type panickyJSON struct{}

func (panickyJSON) MarshalJSON() ([]byte, error) { panic("boom") }

type panickyText struct{}

func (panickyText) MarshalText() ([]byte, error) { panic("boom") }

// enqueue calls the enqueue method and turns a panic into a test failure,
// so that a panicking encoder shows as a failing assertion.
func enqueueNoPanic(t *testing.T, c *Client, m Message) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("Enqueue panicked: %v", r)
			err = nil
		}
	}()
	return c.Enqueue(m)
}

// A property whose MarshalJSON (or MarshalText, as a map key) panics is a
// *MessageError of the enqueue call, not a panic; the client goes on.
func TestPanickingMarshalerIsAMessageError(t *testing.T) {
	api := newFakeAPI(nil)
	c := newTestClient(t, api, nil, WithFlushAt(1))
	defer func() { require.NoError(t, closeClient(t, c, 5*time.Second)) }()
	for name, props := range map[string]Properties{
		"MarshalJSON":        {"bad": panickyJSON{}},
		"nested MarshalJSON": {"list": []any{1, map[string]any{"bad": &panickyJSON{}}}},
		"MarshalText key":    {"bad": map[panickyText]int{{}: 1}},
	} {
		err := enqueueNoPanic(t, c, Track{UserID: "u", Event: "e", Properties: props})
		var me *MessageError
		if assert.ErrorAs(t, err, &me, name) {
			assert.Equal(t, "track", me.Type, name)
			assert.ErrorIs(t, err, ErrInvalidMessage)
			assert.Contains(t, err.Error(), "panicked", name)
		}
	}
	require.NoError(t, c.Track(Track{UserID: "u", Event: "after"}))
	require.NoError(t, flush(t, c, 5*time.Second))
	assert.Len(t, api.requests(), 1, "only the valid event was sent")
}

// A json.Number must be a JSON number a server can decode as a float64;
// anything else is rejected at enqueue, where the caller can see it.
func TestJSONNumberChecked(t *testing.T) {
	api := newFakeAPI(nil)
	c := newTestClient(t, api, nil, WithFlushAt(1))
	defer func() { require.NoError(t, closeClient(t, c, 5*time.Second)) }()
	for _, n := range []string{"1e400", "-1e400", "1" + strings.Repeat("0", 400), "abc", "0x10", "1_000", "Inf", "NaN", "01", "1.", ".5", "+1", " 1", "1e", "--1"} {
		err := c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"n": json.Number(n)}})
		var me *MessageError
		assert.ErrorAs(t, err, &me, "json.Number(%q) accepted", n)
		err = c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"deep": []any{json.Number(n)}}})
		assert.ErrorAs(t, err, &me, "nested json.Number(%q) accepted", n)
	}
	ok := []string{"0", "-0", "1.5", "-2.5e-3", "1E+308", "1.7976931348623157e308", "1e-400", "12345678901234567890123"}
	for _, n := range ok {
		require.NoError(t, c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"n": json.Number(n)}}), n)
	}
	require.NoError(t, c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"n": json.Number("")}}))
	require.NoError(t, flush(t, c, 5*time.Second))
	reqs := api.requests()
	require.Len(t, reqs, len(ok)+1)
	for i, r := range reqs {
		var env struct {
			Batch []struct {
				Properties struct {
					N float64 `json:"n"`
				} `json:"properties"`
			} `json:"batch"`
		}
		require.NoError(t, json.Unmarshal(r.body, &env), "request %d decodes with float64 numbers", i)
	}
	zeros := 0 // consumers send in parallel: the empty one is in some request
	for _, r := range reqs {
		zeros += strings.Count(string(r.body), `"n":0}`)
	}
	assert.Equal(t, 2, zeros, `json.Number("0") and the empty json.Number are 0, as in encoding/json`)
}

// encodeTrack encodes m as the client would at enqueue.
func encodeTrack(t *testing.T, m Track) ([]byte, error) {
	t.Helper()
	sc := getScratch()
	sc.use(nil, false)
	defer putScratch(sc)
	_, err := m.prepare(sc, false)
	return append([]byte(nil), sc.Enc.Bytes()...), err
}

// Property values of every kind the encoder writes itself come out as
// encoding/json would write them: the decoded properties are equal, and
// the event is valid JSON.
func TestEncodedValuesMatchEncodingJSON(t *testing.T) {
	values := map[string]any{
		"nil":          nil,
		"bools":        []any{true, false},
		"ints":         []any{0, -1, int64(math.MinInt64), int32(math.MaxInt32), uint(7), uint64(math.MaxUint64), uint32(9)},
		"floats":       []any{0.0, -0.5, 1e-7, 1e21, 123456.789, float32(1.5), float32(1e-7), float32(3e21)},
		"nil list":     []any(nil),
		"empty list":   []any{},
		"list":         []any{"a", `b\c`, 1, []any{true, nil}, map[string]any{"k": "v"}},
		"nil strings":  []string(nil),
		"empty strs":   []string{},
		"strings":      []string{"x", `y\z`, "\"q\"", "\x01"},
		"map":          map[string]any{"a": map[string]any{"b": []any{1, 2}}},
		"time":         time.Date(2024, 2, 29, 12, 0, 0, 5, time.FixedZone("X", 3600)),
		"raw":          json.RawMessage(`{"r":[1,2]}`),
		"other":        struct{ A int }{A: 3},
		"invalid utf8": "a\x80b\xffc\xc3",
		"utf8":         "é\u2028🎉",
	}
	buf, err := encodeTrack(t, Track{MessageID: "m", UserID: "u", Event: "e", Properties: values})
	require.NoError(t, err)
	require.True(t, json.Valid(buf), "%s", buf)
	var got struct {
		Properties map[string]any `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(buf, &got))
	want := map[string]any{}
	raw, err := json.Marshal(values)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &want))
	assert.Equal(t, want, got.Properties)
	// Absent and nil lists are null, empty ones [], as encoding/json writes them.
	assert.Contains(t, string(buf), `"nil list":null`)
	assert.Contains(t, string(buf), `"nil strings":null`)
	assert.Contains(t, string(buf), `"empty list":[]`)
	assert.Contains(t, string(buf), `"empty strs":[]`)
	assert.Contains(t, string(buf), `"invalid utf8":"a\ufffdb\ufffdc\ufffd"`)
}

// Maps and lists share one nesting limit: the properties object and up
// to 64 levels below it are accepted, one level more is rejected with a
// *MessageError naming the field.
func TestNestingLimit(t *testing.T) {
	maps := func(n int) Properties { // n nested objects, properties included
		var v any = 1
		for i := 0; i < n; i++ {
			v = map[string]any{"k": v}
		}
		return Properties(v.(map[string]any))
	}
	lists := func(n int) Properties { // properties and n-1 nested lists
		var v any = 1
		for i := 1; i < n; i++ {
			v = []any{v}
		}
		return Properties{"k": v}
	}
	for name, nest := range map[string]func(int) Properties{"maps": maps, "lists": lists} {
		_, err := encodeTrack(t, Track{UserID: "u", Event: "e", Properties: nest(wire.MaxNesting + 1)})
		assert.NoError(t, err, "%s: %d levels", name, wire.MaxNesting+1)
		_, err = encodeTrack(t, Track{UserID: "u", Event: "e", Properties: nest(wire.MaxNesting + 2)})
		var me *MessageError
		require.ErrorAs(t, err, &me, "%s: %d levels", name, wire.MaxNesting+2)
		assert.Equal(t, "Properties", me.Field)
		assert.ErrorIs(t, err, wire.ErrTooDeep)
	}
}

// Floats take exponent notation exactly where encoding/json does (below
// 1e-6 or from 1e21 on, judged in the value's own precision), and keep
// their value.
func TestFloatNotationMatchesEncodingJSON(t *testing.T) {
	values := []any{
		0.0, 1e-6, 9.99e-7, 1e21, 9.99e20, 9.9999999999e20, -1e-6, -1e21, 123.456,
		float32(1e-6), float32(9.99e-7), float32(1e21), float32(9.99e20), float32(-1e21), float32(0.1),
	}
	for _, v := range values {
		buf, err := encodeTrack(t, Track{MessageID: "m", UserID: "u", Event: "e", Properties: Properties{"v": v}})
		require.NoError(t, err)
		var got struct {
			Properties struct {
				V json.RawMessage `json:"v"`
			} `json:"properties"`
		}
		require.NoError(t, json.Unmarshal(buf, &got))
		want, err := json.Marshal(v)
		require.NoError(t, err)
		assert.Equal(t, strings.ContainsAny(string(want), "eE"), strings.ContainsAny(string(got.Properties.V), "eE"),
			"%T %v: encoding/json writes %s, the encoder %s", v, v, want, got.Properties.V)
		var a, b float64
		require.NoError(t, json.Unmarshal(want, &a))
		require.NoError(t, json.Unmarshal(got.Properties.V, &b))
		assert.Equal(t, a, b, "%T %v", v, v)
	}
}
