package analytics_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	native "github.com/relaykit/analytics-go"
	analytics "github.com/relaykit/analytics-go/segmentv3"
)

// send enqueues msgs on a fresh client with config, closes it and returns
// the events the API received.
func send(t *testing.T, config analytics.Config, msgs ...analytics.Message) []map[string]interface{} {
	t.Helper()
	api := &fakeAPI{}
	config.Transport = api
	client, err := analytics.NewWithConfig("key", config)
	require.NoError(t, err)
	for _, m := range msgs {
		require.NoError(t, client.Enqueue(m))
	}
	require.NoError(t, client.Close())
	return api.events()
}

func jsonOf(t *testing.T, v interface{}) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

var library = map[string]interface{}{"name": native.LibraryName, "version": native.Version}

// TestWireMatchesV3 checks each message type against the JSON v3 sends for
// it (v3's fixtures test-enqueue-*.json): the same names, the same omitted
// empty fields, no context in an event that has none (context.library is
// in the body's context, once per request, as in v3).
func TestWireMatchesV3(t *testing.T) {
	ts := time.Date(2009, 11, 10, 23, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		msg  analytics.Message
		want string
	}{
		{"track", analytics.Track{MessageId: "m", UserId: "u", Event: "Download", Timestamp: ts,
			Properties: analytics.NewProperties().Set("application", "Segment Desktop")},
			`{"type":"track","messageId":"m","userId":"u","event":"Download","timestamp":"2009-11-10T23:00:00Z","properties":{"application":"Segment Desktop"}}`},
		{"identify", analytics.Identify{MessageId: "m", AnonymousId: "a", Timestamp: ts,
			Traits: analytics.NewTraits().SetEmail("e")},
			`{"type":"identify","messageId":"m","anonymousId":"a","timestamp":"2009-11-10T23:00:00Z","traits":{"email":"e"}}`},
		{"group", analytics.Group{MessageId: "m", UserId: "u", GroupId: "g", Timestamp: ts},
			`{"type":"group","messageId":"m","userId":"u","groupId":"g","timestamp":"2009-11-10T23:00:00Z"}`},
		{"page", analytics.Page{MessageId: "m", UserId: "u", Name: "Home", Timestamp: ts, Properties: analytics.NewProperties()},
			`{"type":"page","messageId":"m","userId":"u","name":"Home","timestamp":"2009-11-10T23:00:00Z"}`},
		{"screen", analytics.Screen{MessageId: "m", UserId: "u", Timestamp: ts, Integrations: analytics.NewIntegrations()},
			`{"type":"screen","messageId":"m","userId":"u","timestamp":"2009-11-10T23:00:00Z"}`},
		{"alias", analytics.Alias{MessageId: "m", UserId: "u", PreviousId: "p", Timestamp: ts,
			Integrations: analytics.NewIntegrations().DisableAll().Enable("Mixpanel")},
			`{"type":"alias","messageId":"m","userId":"u","previousId":"p","timestamp":"2009-11-10T23:00:00Z","integrations":{"all":false,"Mixpanel":true}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				events := send(t, analytics.Config{}, tc.msg)
				require.Len(t, events, 1)
				var want map[string]interface{}
				require.NoError(t, json.Unmarshal([]byte(tc.want), &want))
				assert.Equal(t, want, events[0])
			})
		})
	}
}

// TestWireContext checks the Context JSON (zero info structs left out,
// Extra inlined and overridden by fields) and DefaultContext, sent once
// per request as the body's context with this client's library, as v3 did;
// each event carries only its own context.
func TestWireContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defaults := &analytics.Context{
			App:     analytics.AppInfo{Name: "default-app"},
			Locale:  "en-US",
			Library: analytics.LibraryInfo{Name: "ignored"},
			Extra:   map[string]interface{}{"tenant": "t1"},
		}
		own := &analytics.Context{
			Locale:   "fr-FR",
			Location: analytics.LocationInfo{City: "Paris"},
			Direct:   true,
			GroupID:  "g1",
			Extra:    map[string]interface{}{"locale": "shadowed", "custom": true},
		}
		api := &fakeAPI{}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: api, DefaultContext: defaults})
		require.NoError(t, err)
		require.NoError(t, client.Enqueue(analytics.Track{UserId: "u", Event: "with", Context: own}))
		require.NoError(t, client.Enqueue(analytics.Track{UserId: "u", Event: "without"}))
		require.NoError(t, client.Close())
		require.Equal(t, 1, api.requests())
		events := api.events()
		require.Len(t, events, 2)
		assert.Equal(t, map[string]interface{}{
			"app":     map[string]interface{}{"name": "default-app"},
			"locale":  "en-US",
			"tenant":  "t1",
			"library": library,
		}, api.reqs[0].body["context"])
		assert.Equal(t, map[string]interface{}{
			"locale":   "fr-FR",
			"location": map[string]interface{}{"city": "Paris"},
			"direct":   true,
			"groupId":  "g1",
			"custom":   true,
		}, events[0]["context"])
		assert.NotContains(t, events[1], "context")
		assert.Equal(t, "ignored", defaults.Library.Name, "DefaultContext is not modified")

		// The context's own JSON, as v3 writes it.
		assert.JSONEq(t, `{"locale":"fr-FR","location":{"city":"Paris"},"direct":true,"groupId":"g1","custom":true}`, jsonOf(t, own))
		assert.JSONEq(t, `{}`, jsonOf(t, analytics.Context{}))
	})
}

// A test written for v3 decodes the request body into v3's own types and
// compares each event's Context with what it set: it sees exactly that.
// The whole body, with the values that change from run to run replaced, is
// testdata/v3-body.golden.json: v3's shape (batch, a body-level context
// with the library, sentAt) plus the engine's writeKey.
func TestWireBodyDecodesAsV3(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := time.Date(2009, 11, 10, 23, 0, 0, 0, time.UTC)
		contexts := []*analytics.Context{
			nil,
			{App: analytics.AppInfo{Name: "shop", Version: "1.2"}, IP: net.ParseIP("10.0.0.1"), Locale: "de-DE"},
			{Library: analytics.LibraryInfo{Name: "own", Version: "9"}, Direct: true, Traits: analytics.NewTraits().SetName("n")},
			{},
		}
		api := &fakeAPI{}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: api,
			DefaultContext: &analytics.Context{OS: analytics.OSInfo{Name: "linux"}}})
		require.NoError(t, err)
		for i, ctx := range contexts {
			require.NoError(t, client.Enqueue(analytics.Track{MessageId: fmt.Sprint("m", i), UserId: "u", Event: "E",
				Timestamp: ts, Context: ctx}))
		}
		require.NoError(t, client.Close())
		require.Equal(t, 1, api.requests())

		var body struct {
			Batch []analytics.Track `json:"batch"`
		}
		require.NoError(t, json.Unmarshal(api.reqs[0].raw, &body))
		require.Len(t, body.Batch, len(contexts))
		for i, ctx := range contexts {
			assert.Equal(t, ctx, body.Batch[i].Context, "event %d", i)
		}

		var whole map[string]interface{}
		require.NoError(t, json.Unmarshal(api.reqs[0].raw, &whole))
		require.NotEmpty(t, whole["sentAt"])
		whole["sentAt"] = "SENT_AT"
		whole["context"].(map[string]interface{})["library"].(map[string]interface{})["version"] = "VERSION"
		got, err := json.MarshalIndent(whole, "", "  ")
		require.NoError(t, err)
		golden := filepath.Join("testdata", "v3-body.golden.json")
		if os.Getenv("UPDATE_GOLDEN") != "" {
			require.NoError(t, os.WriteFile(golden, append(got, '\n'), 0o644))
		}
		want, err := os.ReadFile(golden)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got)+"\n")
	})
}

// TestWireStampsAndHelpers checks what Enqueue fills in (a UUID messageId,
// a UTC timestamp; a caller's values are kept) and the JSON of the
// Properties and Traits helpers.
func TestWireStampsAndHelpers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		paris := time.FixedZone("CET", 3600)
		events := send(t, analytics.Config{},
			analytics.Track{UserId: "u", Event: "stamped"},
			analytics.Track{UserId: "u", Event: "kept", MessageId: "mine", Timestamp: time.Date(2020, 1, 2, 3, 4, 5, 6000000, paris)},
			analytics.Identify{UserId: "u", Traits: analytics.NewTraits().SetAge(30).SetBirthday(time.Date(1990, 5, 6, 0, 0, 0, 0, time.UTC))},
			analytics.Track{UserId: "u", Event: "order", Properties: analytics.NewProperties().SetRevenue(9.99).
				SetProducts(analytics.Product{ID: "1", SKU: "S", Name: "N", Price: 2}, analytics.Product{Name: "free"})},
		)
		require.Len(t, events, 4)
		assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, events[0]["messageId"])
		assert.Equal(t, "2000-01-01T00:00:00Z", events[0]["timestamp"], "now, in UTC (synctest epoch)")
		assert.Equal(t, "mine", events[1]["messageId"])
		assert.Equal(t, "2020-01-02T03:04:05.006+01:00", events[1]["timestamp"], "as v3: RFC 3339 with the caller's offset")
		assert.Equal(t, map[string]interface{}{"age": 30.0, "birthday": "1990-05-06T00:00:00Z"}, events[2]["traits"])
		assert.Equal(t, map[string]interface{}{"revenue": 9.99, "products": []interface{}{
			map[string]interface{}{"id": "1", "sku": "S", "name": "N", "price": 2.0},
			map[string]interface{}{"name": "free", "price": 0.0},
		}}, events[3]["properties"])
	})
}
