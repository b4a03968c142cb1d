// Package program is a v3 program that the differential test runs once with
// gopkg.in/segmentio/analytics-go.v3 and once with the compatibility
// package. The two copies of this file differ only in the import line
// (sameprogram_test.go checks it).
package program

import (
	"net"
	"net/http"
	"sync"
	"time"

	analytics "github.com/relaykit/analytics-go/segmentv3"
)

// Result is what the program observed.
type Result struct {
	EnqueueErrors []string       // the error of each invalid message, in order
	Successes     map[string]int // Callback.Success calls by message type
	Failures      map[string]int // Callback.Failure calls by message type
	CloseError    error
}

type callback struct {
	mu sync.Mutex
	r  *Result
}

func (c *callback) Success(m analytics.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.r.Successes[kind(m)]++
}

func (c *callback) Failure(m analytics.Message, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.r.Failures[kind(m)]++
}

func kind(m analytics.Message) string {
	switch m.(type) {
	case analytics.Track:
		return "track"
	case analytics.Identify:
		return "identify"
	case analytics.Group:
		return "group"
	case analytics.Page:
		return "page"
	case analytics.Screen:
		return "screen"
	case analytics.Alias:
		return "alias"
	}
	return "other"
}

// Run sends the program's messages to endpoint and closes the client.
func Run(endpoint string, transport http.RoundTripper) *Result {
	r := &Result{Successes: map[string]int{}, Failures: map[string]int{}}
	client, err := analytics.NewWithConfig("write-key", analytics.Config{
		Endpoint:  endpoint,
		Transport: transport,
		Interval:  time.Hour,
		BatchSize: 4,
		Callback:  &callback{r: r},
		DefaultContext: &analytics.Context{
			App:   analytics.AppInfo{Name: "difftest", Version: "1.0"},
			Extra: map[string]interface{}{"tenant": "acme"},
		},
	})
	if err != nil {
		panic(err)
	}

	cet := time.FixedZone("CET", 3600)
	when := time.Date(2024, 2, 29, 12, 30, 45, 123456789, cet)
	full := &analytics.Context{
		App:       analytics.AppInfo{Name: "shop", Version: "2.1", Build: "210", Namespace: "com.example.shop"},
		Campaign:  analytics.CampaignInfo{Name: "spring", Source: "news", Medium: "email", Term: "shoes", Content: "a"},
		Device:    analytics.DeviceInfo{Id: "dev-1", Manufacturer: "Apple", Model: "iPhone15,2", Name: "phone", Type: "ios", Version: "17", AdvertisingID: "ad-1"},
		Location:  analytics.LocationInfo{City: "Lyon", Country: "FR", Region: "ARA", Latitude: 45.76, Longitude: 4.83, Speed: 0},
		Network:   analytics.NetworkInfo{WIFI: true, Carrier: "Orange"},
		OS:        analytics.OSInfo{Name: "iOS", Version: "17.2"},
		Page:      analytics.PageInfo{Path: "/cart", Referrer: "https://ref.example", Search: "?a=1", Title: "Cart", URL: "https://shop.example/cart"},
		Referrer:  analytics.ReferrerInfo{Type: "web", Name: "ref", URL: "https://ref.example", Link: "l"},
		Screen:    analytics.ScreenInfo{Density: 3, Width: 1179, Height: 2556},
		IP:        net.ParseIP("203.0.113.7"),
		Locale:    "fr-FR",
		Timezone:  "Europe/Paris",
		UserAgent: "Mozilla/5.0",
		Traits:    analytics.NewTraits().SetEmail("ada@example.com"),
		Extra:     map[string]interface{}{"app": "shadowed by App", "experiment": map[string]interface{}{"id": 7, "arm": "B"}},
	}

	messages := []analytics.Message{
		analytics.Track{
			UserId: "user-1",
			Event:  "Order Completed",
			Properties: analytics.NewProperties().SetRevenue(39.95).SetCurrency("EUR").SetValue(1).
				SetPath("/checkout").SetReferrer("r").SetTitle("Checkout").SetURL("https://shop.example/checkout").
				SetName("order").SetCategory("shoes").SetSKU("SKU-1").SetPrice(19.5).SetProductId("p-1").
				SetOrderId("o-1").SetTotal(39.95).SetSubtotal(35).SetShipping(4.95).SetTax(0).SetDiscount(2.5).
				SetCoupon("SPRING").SetRepeat(false).
				SetProducts(analytics.Product{ID: "p-1", SKU: "SKU-1", Name: "Shoe", Price: 19.5}, analytics.Product{Name: "Gift"}),
			Context:      full,
			Integrations: analytics.NewIntegrations().EnableAll().Disable("Salesforce").Set("Amplitude", map[string]interface{}{"session_id": 12}),
		},
		&analytics.Track{
			MessageId:   "fixed-id",
			AnonymousId: "anon-1",
			Event:       "Signed Up",
			Timestamp:   when,
			Properties: analytics.Properties{
				"plan": "pro", "seats": 3, "big": int64(1) << 53, "ratio": 0.1, "trial": true, "none": nil,
				"tags": []string{"a", "b"}, "nested": map[string]interface{}{"k": []interface{}{1, "x", false}},
				"at": when, "empty": map[string]interface{}{},
			},
		},
		analytics.Track{UserId: "user-2", Event: "Empty Maps", Properties: analytics.NewProperties(),
			Context: &analytics.Context{}, Integrations: analytics.NewIntegrations()},
		analytics.Identify{
			UserId: "user-1",
			Traits: analytics.NewTraits().SetAddress("1 rue de la Paix").SetAge(36).SetAvatar("https://a.example/ada.png").
				SetBirthday(time.Date(1815, 12, 10, 0, 0, 0, 0, time.UTC)).SetCreatedAt(when).SetDescription("d").
				SetEmail("ada@example.com").SetFirstName("Ada").SetGender("f").SetLastName("Lovelace").
				SetName("Ada Lovelace").SetPhone("+33").SetTitle("Countess").SetUsername("ada").
				SetWebsite("https://ada.example").Set("plan", "pro"),
			Context: &analytics.Context{Locale: "en-GB", Extra: map[string]interface{}{"tenant": "override"}},
		},
		analytics.Identify{AnonymousId: "anon-2"},
		analytics.Group{UserId: "user-1", GroupId: "group-1", Traits: analytics.NewTraits().SetName("Acme").Set("employees", 42)},
		analytics.Page{UserId: "user-1", Name: "Home", Properties: analytics.NewProperties().SetURL("https://shop.example/").SetTitle("Home")},
		&analytics.Page{AnonymousId: "anon-3"},
		analytics.Screen{UserId: "user-1", Name: "Settings", Properties: analytics.Properties{"tab": "privacy"},
			Integrations: analytics.NewIntegrations().DisableAll().Enable("Mixpanel")},
		analytics.Alias{UserId: "user-1", PreviousId: "anon-1", Context: &analytics.Context{IP: net.ParseIP("2001:db8::1")}},
	}
	for _, m := range messages {
		if err := client.Enqueue(m); err != nil {
			panic(err)
		}
	}

	invalid := []analytics.Message{
		analytics.Track{UserId: "u"},
		analytics.Track{Event: "no user"},
		analytics.Identify{},
		analytics.Group{UserId: "u"},
		analytics.Group{GroupId: "g"},
		analytics.Page{Name: "p"},
		analytics.Screen{},
		analytics.Alias{PreviousId: "p"},
		analytics.Alias{UserId: "u"},
	}
	for _, m := range invalid {
		err := client.Enqueue(m)
		if err == nil {
			r.EnqueueErrors = append(r.EnqueueErrors, "<nil>")
		} else {
			r.EnqueueErrors = append(r.EnqueueErrors, err.Error())
		}
	}

	r.CloseError = client.Close()
	if err := client.Enqueue(messages[0]); err != analytics.ErrClosed {
		r.EnqueueErrors = append(r.EnqueueErrors, "after Close: "+err.Error())
	}
	if t, ok := transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
	return r
}
