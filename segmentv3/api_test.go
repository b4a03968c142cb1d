package analytics_test

import (
	"encoding/json"
	"io"
	"log"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	analytics "github.com/relaykit/analytics-go/segmentv3"
)

// TestEveryV3Identifier uses every exported identifier of
// gopkg.in/segmentio/analytics-go.v3 v3.1.0 at least once, as a v3 program
// would (the difftest module checks the list against v3's source), and
// checks what the values do.
func TestEveryV3Identifier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{}
		rec := &recorder{}
		var _ analytics.Callback = rec
		var logger analytics.Logger = analytics.StdLogger(log.New(io.Discard, "segment ", log.LstdFlags))
		logger.Logf("%d", 1)
		logger.Errorf("%d", 2)

		assert.Equal(t, "https://api.segment.io", analytics.DefaultEndpoint)
		assert.Equal(t, 5*time.Second, analytics.DefaultInterval)
		assert.Equal(t, 250, analytics.DefaultBatchSize)
		assert.Equal(t, "3.0.0", analytics.Version)
		for _, err := range []error{analytics.ErrClosed, analytics.ErrTooManyRequests, analytics.ErrMessageTooBig} {
			assert.NotEmpty(t, err.Error())
		}

		ctx := &analytics.Context{
			App:       analytics.AppInfo{Name: "app", Version: "1.0", Build: "42", Namespace: "com.example"},
			Campaign:  analytics.CampaignInfo{Name: "c", Source: "s", Medium: "m", Term: "t", Content: "x"},
			Device:    analytics.DeviceInfo{Id: "d", Manufacturer: "m", Model: "mo", Name: "n", Type: "ios", Version: "1", AdvertisingID: "ad"},
			Library:   analytics.LibraryInfo{Name: "custom", Version: "9"},
			Location:  analytics.LocationInfo{City: "Paris", Country: "FR", Region: "IDF", Latitude: 48.85, Longitude: 2.35, Speed: 1},
			Network:   analytics.NetworkInfo{Bluetooth: true, Cellular: true, WIFI: true, Carrier: "x"},
			OS:        analytics.OSInfo{Name: "linux", Version: "6"},
			Page:      analytics.PageInfo{Hash: "#h", Path: "/p", Referrer: "r", Search: "?q", Title: "T", URL: "https://e.com/p"},
			Referrer:  analytics.ReferrerInfo{Type: "t", Name: "n", URL: "u", Link: "l"},
			Screen:    analytics.ScreenInfo{Density: 2, Width: 100, Height: 200},
			IP:        net.IPv4(10, 0, 0, 1),
			Locale:    "fr-FR",
			Timezone:  "Europe/Paris",
			UserAgent: "ua",
			Traits:    analytics.NewTraits().SetEmail("a@b.c"),
			Extra:     map[string]interface{}{"custom": 1},
		}
		b, err := ctx.MarshalJSON()
		require.NoError(t, err)
		var asMap map[string]interface{}
		require.NoError(t, json.Unmarshal(b, &asMap))
		assert.Len(t, asMap, 16, "fifteen fields and one Extra key")
		assert.Equal(t, "10.0.0.1", asMap["ip"])

		props := analytics.NewProperties().SetRevenue(1).SetCurrency("USD").SetValue(2).SetPath("/p").
			SetReferrer("r").SetTitle("t").SetURL("u").SetName("n").SetCategory("c").SetSKU("s").
			SetPrice(3).SetProductId("id").SetOrderId("o").SetTotal(4).SetSubtotal(5).SetShipping(6).
			SetTax(7).SetDiscount(8).SetCoupon("cp").SetRepeat(true).
			SetProducts(analytics.Product{ID: "p1", SKU: "sku1", Name: "P", Price: 9.5}).Set("k", "v")
		assert.Len(t, props, 22)
		traits := analytics.NewTraits().SetAddress("a").SetAge(3).SetAvatar("av").
			SetBirthday(time.Unix(0, 0)).SetCreatedAt(time.Unix(1, 0)).SetDescription("d").SetEmail("e").
			SetFirstName("f").SetGender("g").SetLastName("l").SetName("n").SetPhone("p").SetTitle("t").
			SetUsername("u").SetWebsite("w").Set("k", "v")
		assert.Len(t, traits, 16)
		integrations := analytics.NewIntegrations().EnableAll().DisableAll().Enable("A").Disable("B").Set("C", map[string]interface{}{"x": 1})
		assert.Equal(t, analytics.Integrations{"all": false, "A": true, "B": false, "C": map[string]interface{}{"x": 1}}, integrations)

		var retried int
		client, err := analytics.NewWithConfig("key", analytics.Config{
			Endpoint:       "https://example.test",
			Interval:       time.Second,
			Transport:      api,
			Logger:         logger,
			Callback:       rec,
			BatchSize:      10,
			Verbose:        true,
			DefaultContext: &analytics.Context{App: analytics.AppInfo{Name: "default"}},
			RetryAfter:     func(n int) time.Duration { retried++; return time.Duration(n) * time.Second },
		})
		require.NoError(t, err)
		ts := time.Date(2009, 11, 10, 23, 0, 0, 0, time.UTC)
		msgs := []analytics.Message{
			analytics.Track{Type: "ignored", MessageId: "t", AnonymousId: "a", UserId: "u", Event: "E", Timestamp: ts, Context: ctx, Properties: props, Integrations: integrations},
			analytics.Identify{MessageId: "i", AnonymousId: "a", UserId: "u", Timestamp: ts, Context: ctx, Traits: traits, Integrations: integrations},
			analytics.Group{MessageId: "g", AnonymousId: "a", UserId: "u", GroupId: "G", Timestamp: ts, Context: ctx, Traits: traits, Integrations: integrations},
			&analytics.Page{MessageId: "p", AnonymousId: "a", UserId: "u", Name: "N", Timestamp: ts, Context: ctx, Properties: props, Integrations: integrations},
			analytics.Screen{MessageId: "s", AnonymousId: "a", UserId: "u", Name: "N", Timestamp: ts, Context: ctx, Properties: props, Integrations: integrations},
			analytics.Alias{MessageId: "al", PreviousId: "p", UserId: "u", Timestamp: ts, Context: ctx, Integrations: integrations},
		}
		for _, m := range msgs {
			require.NoError(t, m.Validate())
			require.NoError(t, client.Enqueue(m))
		}
		require.NoError(t, client.Close())
		assert.ErrorIs(t, client.Close(), analytics.ErrClosed)
		assert.ErrorIs(t, client.Enqueue(msgs[0]), analytics.ErrClosed)
		assert.Len(t, api.events(), 6)
		assert.Equal(t, "https://example.test/v1/batch", api.reqs[0].url, "Endpoint")
		assert.Equal(t, []string{"Basic a2V5Og=="}, api.reqs[0].header["Authorization"], "the write key as user name")
		successes, failures := rec.byID()
		assert.Equal(t, map[string]int{"t": 1, "i": 1, "g": 1, "p": 1, "s": 1, "al": 1}, successes)
		assert.Empty(t, failures)
		assert.Zero(t, retried, "RetryAfter is not used")

		var fe analytics.FieldError
		require.ErrorAs(t, analytics.Track{UserId: "u"}.Validate(), &fe)
		assert.Equal(t, analytics.FieldError{Type: "analytics.Track", Name: "Event", Value: ""}, fe)
		assert.Equal(t, `analytics.Track.Event: invalid field value: ""`, fe.Error())

		_, err = analytics.NewWithConfig("key", analytics.Config{Interval: -1})
		var ce analytics.ConfigError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, analytics.ConfigError{Reason: "negative time intervals are not supported", Field: "Interval", Value: time.Duration(-1)}, ce)
		assert.Contains(t, ce.Error(), "analytics.Config.Interval")

		var c analytics.Client = analytics.New("key")
		require.NoError(t, c.Close())
	})
}

// noopCallback implements Callback as a v3 program does.
type noopCallback struct{}

func (noopCallback) Success(analytics.Message)        {}
func (noopCallback) Failure(analytics.Message, error) {}

var _ analytics.Callback = noopCallback{}
