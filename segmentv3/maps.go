package analytics

import "time"

// Properties are the free-form properties of a Track, Page or Screen
// message (https://segment.com/docs/spec/track/#properties). The setters
// store a value under the key the Segment spec names and return the map,
// so they chain:
//
//	analytics.NewProperties().SetRevenue(10).SetCurrency("USD")
//
// Values must be encodable as JSON. A nil or empty map is left out of the
// message. The client does not keep the map: it may be reused after
// Enqueue returns.
type Properties map[string]interface{}

// NewProperties returns an empty Properties map.
func NewProperties() Properties { return make(Properties, 10) }

// Set stores value under name and returns p.
func (p Properties) Set(name string, value interface{}) Properties {
	p[name] = value
	return p
}

// SetRevenue sets "revenue".
func (p Properties) SetRevenue(revenue float64) Properties { return p.Set("revenue", revenue) }

// SetCurrency sets "currency" (an ISO 4217 code such as "USD").
func (p Properties) SetCurrency(currency string) Properties { return p.Set("currency", currency) }

// SetValue sets "value".
func (p Properties) SetValue(value float64) Properties { return p.Set("value", value) }

// SetPath sets "path".
func (p Properties) SetPath(path string) Properties { return p.Set("path", path) }

// SetReferrer sets "referrer".
func (p Properties) SetReferrer(referrer string) Properties { return p.Set("referrer", referrer) }

// SetTitle sets "title".
func (p Properties) SetTitle(title string) Properties { return p.Set("title", title) }

// SetURL sets "url".
func (p Properties) SetURL(url string) Properties { return p.Set("url", url) }

// SetName sets "name".
func (p Properties) SetName(name string) Properties { return p.Set("name", name) }

// SetCategory sets "category".
func (p Properties) SetCategory(category string) Properties { return p.Set("category", category) }

// SetSKU sets "sku".
func (p Properties) SetSKU(sku string) Properties { return p.Set("sku", sku) }

// SetPrice sets "price".
func (p Properties) SetPrice(price float64) Properties { return p.Set("price", price) }

// SetProductId sets "id", the product id of the e-commerce spec.
func (p Properties) SetProductId(id string) Properties { return p.Set("id", id) }

// SetOrderId sets "orderId".
func (p Properties) SetOrderId(id string) Properties { return p.Set("orderId", id) }

// SetTotal sets "total".
func (p Properties) SetTotal(total float64) Properties { return p.Set("total", total) }

// SetSubtotal sets "subtotal".
func (p Properties) SetSubtotal(subtotal float64) Properties { return p.Set("subtotal", subtotal) }

// SetShipping sets "shipping".
func (p Properties) SetShipping(shipping float64) Properties { return p.Set("shipping", shipping) }

// SetTax sets "tax".
func (p Properties) SetTax(tax float64) Properties { return p.Set("tax", tax) }

// SetDiscount sets "discount".
func (p Properties) SetDiscount(discount float64) Properties { return p.Set("discount", discount) }

// SetCoupon sets "coupon".
func (p Properties) SetCoupon(coupon string) Properties { return p.Set("coupon", coupon) }

// SetProducts sets "products" to the list of products.
func (p Properties) SetProducts(products ...Product) Properties { return p.Set("products", products) }

// SetRepeat sets "repeat" (whether the customer bought before).
func (p Properties) SetRepeat(repeat bool) Properties { return p.Set("repeat", repeat) }

// Product is one product of the e-commerce spec, as stored by
// Properties.SetProducts.
//
// The SKU is sent under "sku", as the spec names it; v3 sent it under "sky"
// (a typo in its field tag). Price is always sent, other fields only when
// set.
type Product struct {
	ID    string  `json:"id,omitempty"`
	SKU   string  `json:"sku,omitempty"`
	Name  string  `json:"name,omitempty"`
	Price float64 `json:"price"`
}

// Traits are the free-form traits of an Identify or Group message, or of
// Context.Traits (https://segment.com/docs/spec/identify/#traits). The
// setters store a value under the key the Segment spec names and return
// the map, so they chain:
//
//	analytics.NewTraits().SetFirstName("Luke").Set("role", "Jedi")
//
// Values must be encodable as JSON; times are sent in RFC 3339 format.
// A nil or empty map is left out of the message.
type Traits map[string]interface{}

// NewTraits returns an empty Traits map.
func NewTraits() Traits { return make(Traits, 10) }

// Set stores value under field and returns t.
func (t Traits) Set(field string, value interface{}) Traits {
	t[field] = value
	return t
}

// SetAddress sets "address".
func (t Traits) SetAddress(address string) Traits { return t.Set("address", address) }

// SetAge sets "age".
func (t Traits) SetAge(age int) Traits { return t.Set("age", age) }

// SetAvatar sets "avatar" (a URL).
func (t Traits) SetAvatar(url string) Traits { return t.Set("avatar", url) }

// SetBirthday sets "birthday".
func (t Traits) SetBirthday(date time.Time) Traits { return t.Set("birthday", date) }

// SetCreatedAt sets "createdAt".
func (t Traits) SetCreatedAt(date time.Time) Traits { return t.Set("createdAt", date) }

// SetDescription sets "description".
func (t Traits) SetDescription(desc string) Traits { return t.Set("description", desc) }

// SetEmail sets "email".
func (t Traits) SetEmail(email string) Traits { return t.Set("email", email) }

// SetFirstName sets "firstName".
func (t Traits) SetFirstName(firstName string) Traits { return t.Set("firstName", firstName) }

// SetGender sets "gender".
func (t Traits) SetGender(gender string) Traits { return t.Set("gender", gender) }

// SetLastName sets "lastName".
func (t Traits) SetLastName(lastName string) Traits { return t.Set("lastName", lastName) }

// SetName sets "name".
func (t Traits) SetName(name string) Traits { return t.Set("name", name) }

// SetPhone sets "phone".
func (t Traits) SetPhone(phone string) Traits { return t.Set("phone", phone) }

// SetTitle sets "title".
func (t Traits) SetTitle(title string) Traits { return t.Set("title", title) }

// SetUsername sets "username".
func (t Traits) SetUsername(username string) Traits { return t.Set("username", username) }

// SetWebsite sets "website" (a URL).
func (t Traits) SetWebsite(url string) Traits { return t.Set("website", url) }

// Integrations select the destinations of a message
// (https://segment.com/docs/spec/common/#integrations): a name mapped to
// true, false or a destination-specific object. The helpers chain:
//
//	analytics.NewIntegrations().EnableAll().Disable("Salesforce")
//
// A nil or empty map is left out of the message.
type Integrations map[string]interface{}

// NewIntegrations returns an empty Integrations map.
func NewIntegrations() Integrations { return make(Integrations, 10) }

// EnableAll sets "all" to true, as v3 did. (The Segment spec spells the
// key "All"; use Set("All", true) for that spelling.)
func (i Integrations) EnableAll() Integrations { return i.Enable("all") }

// DisableAll sets "all" to false (see EnableAll for the spelling).
func (i Integrations) DisableAll() Integrations { return i.Disable("all") }

// Enable sets name to true.
func (i Integrations) Enable(name string) Integrations { return i.Set(name, true) }

// Disable sets name to false.
func (i Integrations) Disable(name string) Integrations { return i.Set(name, false) }

// Set stores value under name and returns i. Any value but false enables
// the destination; an object passes options to it.
func (i Integrations) Set(name string, value interface{}) Integrations {
	i[name] = value
	return i
}
