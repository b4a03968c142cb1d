package analytics

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An encoding error names the key path of the bad value, and Field is the
// message's Go field name for every map field of every type.
func TestEncodingErrorsNameTheKeyPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		c := newTestClient(t, api, nil)
		nan := math.NaN()
		cases := []struct {
			name         string
			err          error
			field, path  string
			wantInString string
		}{
			{"properties", c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"ok": 1, "revenue": nan}}),
				"Properties", "properties.revenue", "Properties cannot be encoded: properties.revenue: unsupported value NaN"},
			{"nested traits", c.Identify(Identify{UserID: "u", Traits: Traits{"address": map[string]any{"zip": math.Inf(1)}}}),
				"Traits", "traits.address.zip", "traits.address.zip: unsupported value +Inf"},
			{"group traits", c.Group(Group{UserID: "u", GroupID: "g", Traits: Traits{"n": nan}}),
				"Traits", "traits.n", "traits.n: unsupported value NaN"},
			{"context list", c.Track(Track{UserID: "u", Event: "e", Context: ContextFields{"device": map[string]any{"ids": []any{1, "x", nan}}}}),
				"Context", "context.device.ids[2]", "context.device.ids[2]: unsupported value NaN"},
			{"integrations", c.Alias(Alias{UserID: "u", PreviousID: "p", Integrations: Integrations{"All": make(chan int)}}),
				"Integrations", "integrations.All", "integrations.All: json: unsupported type: chan int"},
			{"odd key", c.Page(Page{UserID: "u", Properties: Properties{"a.b": nan}}),
				"Properties", `properties["a.b"]`, `properties["a.b"]: unsupported value NaN`},
			{"screen", c.Screen(Screen{UserID: "u", Properties: Properties{"list": []any{[]any{nan}}}}),
				"Properties", "properties.list[0][0]", "properties.list[0][0]: unsupported value NaN"},
		}
		for _, tc := range cases {
			var me *MessageError
			if assert.ErrorAs(t, tc.err, &me, tc.name) {
				assert.Equal(t, tc.field, me.Field, tc.name)
				assert.Equal(t, tc.path, me.Path, tc.name)
				assert.ErrorContains(t, tc.err, tc.wantInString, tc.name)
			}
		}
		// The encoder is reused: a later good event is accepted and a
		// later bad one gets its own path, not a leftover of the last.
		require.NoError(t, c.Track(track("good")))
		err := c.Track(Track{UserID: "u", Event: "e", Properties: Properties{"x": nan}})
		var me *MessageError
		require.ErrorAs(t, err, &me)
		assert.Equal(t, "properties.x", me.Path)
		require.NoError(t, closeClient(t, c, time.Second))
		require.Len(t, api.requests(), 1)
		assert.Equal(t, []string{"good"}, api.requests()[0].ids)
	})
}
