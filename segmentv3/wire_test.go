package analytics_test

import (
	"encoding/json"
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
// empty fields. The one difference by design is that context.library names
// this client and is in every event (v3 sent it once per batch).
func TestWireMatchesV3(t *testing.T) {
	ts := time.Date(2009, 11, 10, 23, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		msg  analytics.Message
		want string
	}{
		{"track", analytics.Track{MessageId: "m", UserId: "u", Event: "Download", Timestamp: ts,
			Properties: analytics.NewProperties().Set("application", "Segment Desktop")},
			`{"type":"track","messageId":"m","userId":"u","event":"Download","timestamp":"2009-11-10T23:00:00Z","properties":{"application":"Segment Desktop"},"context":{}}`},
		{"identify", analytics.Identify{MessageId: "m", AnonymousId: "a", Timestamp: ts,
			Traits: analytics.NewTraits().SetEmail("e")},
			`{"type":"identify","messageId":"m","anonymousId":"a","timestamp":"2009-11-10T23:00:00Z","traits":{"email":"e"},"context":{}}`},
		{"group", analytics.Group{MessageId: "m", UserId: "u", GroupId: "g", Timestamp: ts},
			`{"type":"group","messageId":"m","userId":"u","groupId":"g","timestamp":"2009-11-10T23:00:00Z","context":{}}`},
		{"page", analytics.Page{MessageId: "m", UserId: "u", Name: "Home", Timestamp: ts, Properties: analytics.NewProperties()},
			`{"type":"page","messageId":"m","userId":"u","name":"Home","timestamp":"2009-11-10T23:00:00Z","context":{}}`},
		{"screen", analytics.Screen{MessageId: "m", UserId: "u", Timestamp: ts, Integrations: analytics.NewIntegrations()},
			`{"type":"screen","messageId":"m","userId":"u","timestamp":"2009-11-10T23:00:00Z","context":{}}`},
		{"alias", analytics.Alias{MessageId: "m", UserId: "u", PreviousId: "p", Timestamp: ts,
			Integrations: analytics.NewIntegrations().DisableAll().Enable("Mixpanel")},
			`{"type":"alias","messageId":"m","userId":"u","previousId":"p","timestamp":"2009-11-10T23:00:00Z","integrations":{"all":false,"Mixpanel":true},"context":{}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				events := send(t, analytics.Config{}, tc.msg)
				require.Len(t, events, 1)
				var want map[string]interface{}
				require.NoError(t, json.Unmarshal([]byte(tc.want), &want))
				want["context"].(map[string]interface{})["library"] = library
				assert.Equal(t, want, events[0])
			})
		})
	}
}

// TestWireContext checks the Context JSON (zero info structs left out,
// Extra inlined and overridden by fields) and DefaultContext, merged into
// each event under the message's own fields.
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
			Extra:    map[string]interface{}{"locale": "shadowed", "custom": true},
		}
		events := send(t, analytics.Config{DefaultContext: defaults},
			analytics.Track{UserId: "u", Event: "with", Context: own},
			analytics.Track{UserId: "u", Event: "without"})
		require.Len(t, events, 2)
		assert.Equal(t, map[string]interface{}{
			"app":      map[string]interface{}{"name": "default-app"},
			"locale":   "fr-FR",
			"location": map[string]interface{}{"city": "Paris"},
			"tenant":   "t1",
			"custom":   true,
			"library":  library,
		}, events[0]["context"])
		assert.Equal(t, map[string]interface{}{
			"app":     map[string]interface{}{"name": "default-app"},
			"locale":  "en-US",
			"tenant":  "t1",
			"library": library,
		}, events[1]["context"])
		assert.Equal(t, "ignored", defaults.Library.Name, "DefaultContext is not modified")

		// The context's own JSON, as v3 writes it.
		assert.JSONEq(t, `{"locale":"fr-FR","location":{"city":"Paris"},"custom":true}`, jsonOf(t, own))
		assert.JSONEq(t, `{}`, jsonOf(t, analytics.Context{}))
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
