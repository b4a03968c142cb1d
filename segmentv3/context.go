package analytics

import (
	"encoding/json"
	"net"

	native "github.com/relaykit/analytics-go"
)

// Context is the context object of a message
// (https://segment.com/docs/spec/common/#context). Only the fields that are
// set are sent: an info struct whose fields are all zero, an empty string,
// IP or Traits is left out.
//
// Library is normally left empty: the client reports itself once per
// request, in the body's top-level context, as v3 did (see the migration
// guide). A Library set in a message's Context is sent in that event as
// given. Direct and GroupID are the fields v3.3.0 added.
type Context struct {
	App       AppInfo      `json:"app,omitempty"`
	Campaign  CampaignInfo `json:"campaign,omitempty"`
	Device    DeviceInfo   `json:"device,omitempty"`
	Library   LibraryInfo  `json:"library,omitempty"`
	Location  LocationInfo `json:"location,omitempty"`
	Network   NetworkInfo  `json:"network,omitempty"`
	OS        OSInfo       `json:"os,omitempty"`
	Page      PageInfo     `json:"page,omitempty"`
	Referrer  ReferrerInfo `json:"referrer,omitempty"`
	Screen    ScreenInfo   `json:"screen,omitempty"`
	IP        net.IP       `json:"ip,omitempty"`
	Direct    bool         `json:"direct,omitempty"` // v3.3.0
	Locale    string       `json:"locale,omitempty"`
	GroupID   string       `json:"groupId,omitempty"` // v3.3.0
	Timezone  string       `json:"timezone,omitempty"`
	UserAgent string       `json:"userAgent,omitempty"`
	Traits    Traits       `json:"traits,omitempty"`

	// Extra holds context fields that have no struct field. They are
	// written at the top level of the context object, next to the others;
	// a struct field that is set wins over an Extra key of the same name.
	Extra map[string]interface{} `json:"-"`
}

// AppInfo is context.app: the application that sent the message.
type AppInfo struct {
	Name      string `json:"name,omitempty"`
	Version   string `json:"version,omitempty"`
	Build     string `json:"build,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// CampaignInfo is context.campaign: the UTM parameters of a campaign.
type CampaignInfo struct {
	Name    string `json:"name,omitempty"`
	Source  string `json:"source,omitempty"`
	Medium  string `json:"medium,omitempty"`
	Term    string `json:"term,omitempty"`
	Content string `json:"content,omitempty"`
}

// DeviceInfo is context.device: the user's device.
type DeviceInfo struct {
	Id            string `json:"id,omitempty"`
	Manufacturer  string `json:"manufacturer,omitempty"`
	Model         string `json:"model,omitempty"`
	Name          string `json:"name,omitempty"`
	Type          string `json:"type,omitempty"`
	Version       string `json:"version,omitempty"`
	AdvertisingID string `json:"advertisingId,omitempty"`
}

// LibraryInfo is context.library: the library that sent the message.
type LibraryInfo struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
}

// LocationInfo is context.location. Zero coordinates are not sent.
type LocationInfo struct {
	City      string  `json:"city,omitempty"`
	Country   string  `json:"country,omitempty"`
	Region    string  `json:"region,omitempty"`
	Latitude  float64 `json:"latitude,omitempty"`
	Longitude float64 `json:"longitude,omitempty"`
	Speed     float64 `json:"speed,omitempty"`
}

// NetworkInfo is context.network. False flags are not sent.
type NetworkInfo struct {
	Bluetooth bool   `json:"bluetooth,omitempty"`
	Cellular  bool   `json:"cellular,omitempty"`
	WIFI      bool   `json:"wifi,omitempty"`
	Carrier   string `json:"carrier,omitempty"`
}

// OSInfo is context.os: the user's operating system.
type OSInfo struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
}

// PageInfo is context.page: the web page the message came from.
type PageInfo struct {
	Hash     string `json:"hash,omitempty"`
	Path     string `json:"path,omitempty"`
	Referrer string `json:"referrer,omitempty"`
	Search   string `json:"search,omitempty"`
	Title    string `json:"title,omitempty"`
	URL      string `json:"url,omitempty"`
}

// ReferrerInfo is context.referrer: what referred the user.
type ReferrerInfo struct {
	Type string `json:"type,omitempty"`
	Name string `json:"name,omitempty"`
	URL  string `json:"url,omitempty"`
	Link string `json:"link,omitempty"`
}

// ScreenInfo is context.screen: the screen's density and size in pixels.
type ScreenInfo struct {
	Density int `json:"density,omitempty"`
	Width   int `json:"width,omitempty"`
	Height  int `json:"height,omitempty"`
}

// MarshalJSON writes the context as one object: the Extra keys, then the
// fields that are set (which win over Extra keys of the same name).
func (ctx Context) MarshalJSON() ([]byte, error) {
	return json.Marshal(ctx.fields(len(ctx.Extra) + 4))
}

// fields returns the context as the map MarshalJSON encodes: Extra's
// entries, overwritten by every field that is not zero. The nested values
// are the info structs themselves, so they encode with their own tags.
func (ctx Context) fields(size int) map[string]interface{} {
	m := make(map[string]interface{}, size)
	for k, v := range ctx.Extra {
		m[k] = v
	}
	if ctx.App != (AppInfo{}) {
		m["app"] = ctx.App
	}
	if ctx.Campaign != (CampaignInfo{}) {
		m["campaign"] = ctx.Campaign
	}
	if ctx.Device != (DeviceInfo{}) {
		m["device"] = ctx.Device
	}
	if ctx.Library != (LibraryInfo{}) {
		m["library"] = ctx.Library
	}
	if ctx.Location != (LocationInfo{}) {
		m["location"] = ctx.Location
	}
	if ctx.Network != (NetworkInfo{}) {
		m["network"] = ctx.Network
	}
	if ctx.OS != (OSInfo{}) {
		m["os"] = ctx.OS
	}
	if ctx.Page != (PageInfo{}) {
		m["page"] = ctx.Page
	}
	if ctx.Referrer != (ReferrerInfo{}) {
		m["referrer"] = ctx.Referrer
	}
	if ctx.Screen != (ScreenInfo{}) {
		m["screen"] = ctx.Screen
	}
	if len(ctx.IP) != 0 {
		m["ip"] = ctx.IP
	}
	if ctx.Direct {
		m["direct"] = true
	}
	if ctx.Locale != "" {
		m["locale"] = ctx.Locale
	}
	if ctx.GroupID != "" {
		m["groupId"] = ctx.GroupID
	}
	if ctx.Timezone != "" {
		m["timezone"] = ctx.Timezone
	}
	if ctx.UserAgent != "" {
		m["userAgent"] = ctx.UserAgent
	}
	if len(ctx.Traits) != 0 {
		m["traits"] = ctx.Traits
	}
	return m
}

// contextOf returns the context map of a message, nil without one (the
// event then has no context, as in v3). DefaultContext is not merged: it
// is the request body's context.
func contextOf(ctx *Context) map[string]interface{} {
	if ctx == nil {
		return nil
	}
	return ctx.fields(len(ctx.Extra) + 4)
}

// requestContext is the JSON of a request body's context: def (none when
// nil) with Library set to this client's name and version, in a copy (v3
// overwrote the caller's Library).
func requestContext(def *Context) ([]byte, error) {
	ctx := Context{}
	if def != nil {
		ctx = *def
	}
	ctx.Library = LibraryInfo{Name: native.LibraryName, Version: native.Version}
	return json.Marshal(ctx)
}
