package analytics_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticstest"
)

// jsonMap decodes one JSON object with numbers as json.Number, so two
// encodings compare equal exactly when they hold the same members and the
// same digits, whatever their key order.
func jsonMap(t *testing.T, data []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var m map[string]any
	require.NoError(t, d.Decode(&m), "%s", data)
	return m
}

// richMaps returns maps with every kind of value a dead letter must carry
// unchanged: unicode and escapes, nesting, large and fractional numbers.
func richMaps() (props, ctx, integrations map[string]any) {
	props = map[string]any{
		"title":  "Ünïcødé \"quoted\" \\ back\nslash 🎉 \u2028 日本語",
		"big":    int64(9007199254740993), // 2⁵³+1: a float64 would make it …992
		"max":    int64(math.MaxInt64),
		"neg":    -42,
		"ratio":  0.1,
		"tiny":   1.5e-7,
		"huge":   1e21,
		"ok":     true,
		"none":   nil,
		"nested": map[string]any{"list": []any{1, "two", map[string]any{"three": 3.5}}, "empty": map[string]any{}},
		"tags":   []string{"a", "b"},
	}
	ctx = map[string]any{"ip": "203.0.113.7", "locale": "fr-FR", "device": map[string]any{"id": "d-1", "n": 7}}
	integrations = map[string]any{"All": false, "Mixpanel": true, "Amplitude": map[string]any{"session_id": int64(1700000000123)}}
	return props, ctx, integrations
}

// allTypes returns one message of each type with every field set.
func allTypes() []analytics.Message {
	ts := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	props, ctx, in := richMaps()
	return []analytics.Message{
		analytics.Track{MessageID: "m-track", UserID: "u-ü", AnonymousID: "a-1", Event: "Bought 🎁", Timestamp: ts, Properties: props, Context: ctx, Integrations: in},
		analytics.Identify{MessageID: "m-identify", UserID: "u-1", AnonymousID: "a-1", Timestamp: ts, Traits: props, Context: ctx, Integrations: in},
		analytics.Group{MessageID: "m-group", UserID: "u-1", GroupID: "g-1", Timestamp: ts, Traits: props, Context: ctx, Integrations: in},
		analytics.Page{MessageID: "m-page", AnonymousID: "a-1", Name: "Home", Category: "Docs", Timestamp: ts, Properties: props, Context: ctx, Integrations: in},
		analytics.Screen{MessageID: "m-screen", UserID: "u-1", Name: "Main", Category: "App", Timestamp: ts, Properties: props, Context: ctx, Integrations: in},
		analytics.Alias{MessageID: "m-alias", UserID: "u-2", PreviousID: "u-1", Timestamp: ts, Context: ctx, Integrations: in},
	}
}

// Every message type writes the wire format with encoding/json (values and
// pointers, alone and in a slice) and UnmarshalMessage reads it back into
// the same type with the same fields: ids, timestamp to the nanosecond,
// unicode, nested maps, and numbers with their digits (json.Number).
func TestMessageJSONRoundTripsEveryType(t *testing.T) {
	for _, m := range allTypes() {
		t.Run(m.Type(), func(t *testing.T) {
			data, err := json.Marshal(m)
			require.NoError(t, err)
			wire := jsonMap(t, data)
			assert.Equal(t, m.Type(), wire["type"])
			assert.Equal(t, m.ID(), wire["messageId"])
			assert.Equal(t, "2026-03-04T05:06:07.123456789Z", wire["timestamp"])
			assert.NotContains(t, wire["context"], "library", "MarshalJSON adds nothing the message does not hold")
			assert.Equal(t, map[string]any{"All": false, "Mixpanel": true, "Amplitude": map[string]any{"session_id": json.Number("1700000000123")}}, wire["integrations"])
			if m.Type() != "alias" {
				key := "properties"
				if m.Type() == "identify" || m.Type() == "group" {
					key = "traits"
				}
				free := wire[key].(map[string]any)
				assert.Equal(t, json.Number("9007199254740993"), free["big"])
				assert.Equal(t, json.Number("9223372036854775807"), free["max"])
				assert.Equal(t, "Ünïcødé \"quoted\" \\ back\nslash 🎉 \u2028 日本語", free["title"])
			}

			ptr, err := json.Marshal(pointerTo(m))
			require.NoError(t, err)
			assert.Equal(t, wire, jsonMap(t, ptr), "a pointer marshals as its value")

			back, err := analytics.UnmarshalMessage(data)
			require.NoError(t, err)
			assert.Equal(t, m.Type(), back.Type())
			assert.Equal(t, m.ID(), back.ID())
			again, err := json.Marshal(back)
			require.NoError(t, err)
			assert.Equal(t, wire, jsonMap(t, again), "marshal → unmarshal → marshal changes nothing")
		})
	}

	// a slice of messages, as a dead-letter file might hold them
	data, err := json.Marshal(allTypes())
	require.NoError(t, err)
	var raws []json.RawMessage
	require.NoError(t, json.Unmarshal(data, &raws))
	require.Len(t, raws, 6)
	for i, raw := range raws {
		back, err := analytics.UnmarshalMessage(raw)
		require.NoError(t, err)
		assert.Equal(t, allTypes()[i].Type(), back.Type())
	}
}

func pointerTo(m analytics.Message) any {
	switch v := m.(type) {
	case analytics.Track:
		return &v
	case analytics.Identify:
		return &v
	case analytics.Group:
		return &v
	case analytics.Page:
		return &v
	case analytics.Screen:
		return &v
	case analytics.Alias:
		return &v
	}
	panic(m)
}

// The fields come back typed: the values UnmarshalMessage returns hold
// what was marshalled, numbers as json.Number with their exact digits.
func TestUnmarshalMessageFields(t *testing.T) {
	m := allTypes()[0].(analytics.Track)
	data, err := json.Marshal(m)
	require.NoError(t, err)
	back, err := analytics.UnmarshalMessage(data)
	require.NoError(t, err)
	tr, ok := back.(analytics.Track)
	require.True(t, ok, "got %T", back)
	assert.Equal(t, "m-track", tr.MessageID)
	assert.Equal(t, "u-ü", tr.UserID)
	assert.Equal(t, "a-1", tr.AnonymousID)
	assert.Equal(t, "Bought 🎁", tr.Event)
	assert.True(t, m.Timestamp.Equal(tr.Timestamp), "timestamp %v, want %v", tr.Timestamp, m.Timestamp)
	assert.Equal(t, time.UTC, tr.Timestamp.Location())
	big, err := tr.Properties["big"].(json.Number).Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(9007199254740993), big)
	assert.Equal(t, json.Number("0.1"), tr.Properties["ratio"])
	assert.Equal(t, json.Number("1.5e-07"), tr.Properties["tiny"])
	assert.Equal(t, json.Number("1e+21"), tr.Properties["huge"])
	assert.Nil(t, tr.Properties["none"])
	assert.Contains(t, tr.Properties, "none")
	assert.Equal(t, []any{json.Number("1"), "two", map[string]any{"three": json.Number("3.5")}}, tr.Properties["nested"].(map[string]any)["list"])
	assert.Equal(t, []any{"a", "b"}, tr.Properties["tags"])
	assert.Equal(t, map[string]any{"id": "d-1", "n": json.Number("7")}, tr.Context["device"])
	assert.Equal(t, false, tr.Integrations["All"])

	// encoding/json into a typed value works too
	var typed analytics.Track
	require.NoError(t, json.Unmarshal(data, &typed))
	assert.Equal(t, tr, typed)
	var wrong analytics.Identify
	err = json.Unmarshal(data, &wrong)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"track" event cannot be read into a identify`)
	var untyped analytics.Alias
	require.NoError(t, json.Unmarshal([]byte(`{"userId":"u2","previousId":"u1"}`), &untyped))
	assert.Equal(t, analytics.Alias{UserID: "u2", PreviousID: "u1"}, untyped)
	field := struct{ M analytics.Page }{analytics.Page{UserID: "kept"}}
	require.NoError(t, json.Unmarshal([]byte(`{"M":null}`), &field))
	assert.Equal(t, "kept", field.M.UserID, "null leaves a message as it is, as with encoding/json's own types")
}

// A message with no MessageID or Timestamp marshals without them, and
// enqueueing what UnmarshalMessage reads back stamps both.
func TestMessageJSONLeavesOutUnsetIDAndTimestamp(t *testing.T) {
	for _, m := range []analytics.Message{
		analytics.Track{UserID: "u", Event: "e"},
		analytics.Alias{UserID: "u", PreviousID: "p", Timestamp: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		analytics.Identify{MessageID: `id with "quotes" and \ slash`, UserID: "u"},
	} {
		data, err := json.Marshal(m)
		require.NoError(t, err)
		wire := jsonMap(t, data)
		if m.ID() == "" {
			assert.NotContains(t, wire, "messageId", "%s", data)
		} else {
			assert.Equal(t, m.ID(), wire["messageId"])
		}
		_, hasTS := wire["timestamp"]
		assert.Equal(t, m.Type() == "alias", hasTS, "%s", data)
		assert.NotContains(t, wire, "context", "no context is invented: %s", data)
		back, err := analytics.UnmarshalMessage(data)
		require.NoError(t, err)
		assert.Equal(t, m, back)
	}

	srv := analyticstest.NewServer(t)
	c, err := analytics.New("key", analytics.WithEndpoint(srv.URL()))
	require.NoError(t, err)
	back, err := analytics.UnmarshalMessage([]byte(`{"type":"track","userId":"u","event":"e"}`))
	require.NoError(t, err)
	require.NoError(t, c.Enqueue(back))
	require.NoError(t, closeWithin(c, 10*time.Second))
	got := srv.Events()
	require.Len(t, got, 1)
	assert.Len(t, got[0]["messageId"], 36, "the client stamps a messageId")
	assert.NotEmpty(t, got[0]["timestamp"])
}

// What is not one event of a known type is an error that says so.
func TestUnmarshalMessageErrors(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"purchase","userId":"u"}`:         `unknown message type "purchase"`,
		`{"userId":"u","event":"e"}`:               `no "type"`,
		`[1,2]`:                                    `cannot unmarshal array`,
		`{"type":"track"} {"type":"track"}`:        `data after the JSON object`,
		`{"type":"track","timestamp":"yesterday"}`: `cannot parse "yesterday"`,
		``:     `EOF`,
		`null`: `no "type"`,
	} {
		_, err := analytics.UnmarshalMessage([]byte(in))
		if assert.Error(t, err, in) {
			assert.Contains(t, err.Error(), want, in)
			assert.True(t, strings.HasPrefix(err.Error(), "analytics: UnmarshalMessage: "), err.Error())
		}
	}
}

// A value that is not JSON fails MarshalJSON with the path of the value.
func TestMessageJSONUnencodable(t *testing.T) {
	_, err := json.Marshal(analytics.Track{UserID: "u", Event: "e", Properties: analytics.Properties{"a": map[string]any{"b": math.NaN()}}})
	var me *analytics.MessageError
	require.True(t, errors.As(err, &me), "%v", err)
	assert.Equal(t, "properties.a.b", me.Path)
}

func closeWithin(c *analytics.Client, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Close(ctx)
}

// The dead-letter path end to end, for every message type and both ways
// the client makes OnError's messages (copies kept with WithOnSuccess,
// rebuilt from the sent JSON without it): events the server refuses reach
// OnError, are written as JSON lines, read back with UnmarshalMessage and
// enqueued on a second client, and the server receives them with their
// original messageId, timestamp and exact numbers, and the library entry
// once.
func TestDeadLetterReenqueueReachesServerUnchanged(t *testing.T) {
	for _, keep := range []bool{false, true} {
		name := "rebuilt"
		if keep {
			name = "kept"
		}
		t.Run(name, func(t *testing.T) {
			down := analyticstest.NewServer(t)
			down.SetResponse(400, `{"message":"refused"}`)
			var (
				mu    sync.Mutex
				lines bytes.Buffer
			)
			opts := []analytics.Option{
				analytics.WithEndpoint(down.URL()),
				analytics.WithFlushAt(1),
				analytics.WithOnError(func(err error, events []analytics.Message) {
					mu.Lock()
					defer mu.Unlock()
					enc := json.NewEncoder(&lines)
					for _, m := range events {
						if err := enc.Encode(m); err != nil {
							t.Errorf("writing a dead letter: %v", err)
						}
					}
				}),
			}
			if keep {
				opts = append(opts, analytics.WithOnSuccess(func([]analytics.Message) {}))
			}
			first, err := analytics.New("key", opts...)
			require.NoError(t, err)
			for _, m := range allTypes() {
				require.NoError(t, first.Enqueue(m))
			}
			require.NoError(t, closeWithin(first, 10*time.Second))
			sent := map[string]map[string]any{} // by messageId, as first sent
			for _, raw := range down.Requests() {
				for _, ev := range raw.RawEvents {
					w := jsonMap(t, ev)
					sent[w["messageId"].(string)] = w
				}
			}
			require.Len(t, sent, 6)

			up := analyticstest.NewServer(t)
			second, err := analytics.New("key", analytics.WithEndpoint(up.URL()))
			require.NoError(t, err)
			sc := bufio.NewScanner(&lines)
			n := 0
			for sc.Scan() {
				m, err := analytics.UnmarshalMessage(sc.Bytes())
				require.NoError(t, err)
				require.NoError(t, second.Enqueue(m))
				n++
			}
			require.Equal(t, 6, n, "one dead letter per event")
			require.NoError(t, closeWithin(second, 10*time.Second))

			got := up.RawEvents()
			require.Len(t, got, 6)
			for _, raw := range got {
				w := jsonMap(t, raw)
				id := w["messageId"].(string)
				require.Contains(t, sent, id, "an original messageId")
				assert.Equal(t, sent[id], w, "the re-sent event is the event first sent")
				if p, ok := w["properties"].(map[string]any); ok {
					assert.Equal(t, json.Number("9007199254740993"), p["big"])
				}
				assert.Equal(t, "2026-03-04T05:06:07.123456789Z", w["timestamp"])
			}
		})
	}
}
