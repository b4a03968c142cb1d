package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/relaykit/analytics-go"
)

// This file turns the --input JSON (README.md, Input) into a plan: client options,
// sequences of events, and the CLI's own settings. Everything is checked
// before the client is built, so bad input never makes a request. Every
// error names the JSON field it is about.

// defaultCloseTimeout is the deadline of the final Close when the input sets
// neither config.closeTimeoutMs nor config.timeout.
const defaultCloseTimeout = 10 * time.Second

// defaultFlushTimeout is the deadline of a sequence's Flush when
// config.flushTimeoutMs is absent.
const defaultFlushTimeout = 10 * time.Second

// plan is the parsed input.
type plan struct {
	writeKey  string
	opts      []analytics.Option // from apiHost and config, in a fixed order
	sequences []sequence

	closeTimeout time.Duration
	flushTimeout time.Duration
	afterClose   bool
	durable      bool // config.diskBufferDir: events of earlier runs may be replayed
}

type sequence struct {
	delay  time.Duration
	events []inputEvent
	flush  bool
}

// inputEvent is one event of a sequence, fields as given (README.md, Input).
type inputEvent struct {
	Type         string         `json:"type"`
	MessageID    string         `json:"messageId"`
	UserID       string         `json:"userId"`
	AnonymousID  string         `json:"anonymousId"`
	Event        string         `json:"event"`
	Name         string         `json:"name"`
	Category     string         `json:"category"`
	GroupID      string         `json:"groupId"`
	PreviousID   string         `json:"previousId"`
	Timestamp    *string        `json:"timestamp"`
	Properties   map[string]any `json:"properties"`
	Traits       map[string]any `json:"traits"`
	Context      map[string]any `json:"context"`
	Integrations map[string]any `json:"integrations"`

	timestamp time.Time
}

var eventTypes = map[string]bool{
	"identify": true, "track": true, "page": true, "screen": true, "alias": true, "group": true,
}

// sdkFields maps an analytics.ConfigError field to the input field it came
// from, so a rejected configuration names what the caller wrote.
var sdkFields = map[string]string{
	"WriteKey":                "writeKey",
	"Endpoint":                "apiHost",
	"FlushAt":                 "config.flushAt",
	"FlushInterval":           "config.flushInterval",
	"QueueCapacity":           "config.queueCapacity",
	"Consumers":               "config.consumers",
	"HTTPTimeout":             "config.httpTimeoutMs",
	"MaxRetries":              "config.maxRetries",
	"MaxTotalBackoffDuration": "config.maxTotalBackoffDurationMs",
	"MaxRateLimitDuration":    "config.maxRateLimitDurationMs",
	"OAuth.ClientID":          "config.oauth.clientId",
	"OAuth.KeyID":             "config.oauth.keyId",
	"OAuth.PrivateKey":        "config.oauth.privateKeyPem",
	"OAuth.AuthServer":        "config.oauth.authServer",
}

// newClient builds the client the input configures (apiHost and config),
// with the CLI's own options first.
func (p *plan) newClient(own ...analytics.Option) (*analytics.Client, error) {
	return analytics.New(p.writeKey, append(own, p.opts...)...)
}

// ids returns the messageId ev is sent with (the input's, or one from the
// SDK's own generator: the CLI stamps the ids it needs to correlate
// callbacks with input events, and the SDK sends a given id unchanged, R2)
// and the input's ("" when it has none).
func (ev inputEvent) ids() (sent, input string) {
	sent = ev.MessageID
	if sent == "" {
		sent = analytics.NewMessageID()
	}
	return sent, ev.MessageID
}

// enqueue calls the SDK method that matches the event's type, with id as
// its messageId.
func (ev inputEvent) enqueue(c *analytics.Client, id string) error {
	switch ev.Type {
	case "track":
		return c.Track(analytics.Track{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID, Event: ev.Event,
			Timestamp: ev.timestamp, Properties: ev.Properties, Context: ev.Context, Integrations: ev.Integrations,
		})
	case "identify":
		return c.Identify(analytics.Identify{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID,
			Timestamp: ev.timestamp, Traits: ev.Traits, Context: ev.Context, Integrations: ev.Integrations,
		})
	case "group":
		return c.Group(analytics.Group{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID, GroupID: ev.GroupID,
			Timestamp: ev.timestamp, Traits: ev.Traits, Context: ev.Context, Integrations: ev.Integrations,
		})
	case "page":
		return c.Page(analytics.Page{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID, Name: ev.Name, Category: ev.Category,
			Timestamp: ev.timestamp, Properties: ev.Properties, Context: ev.Context, Integrations: ev.Integrations,
		})
	case "screen":
		return c.Screen(analytics.Screen{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID, Name: ev.Name, Category: ev.Category,
			Timestamp: ev.timestamp, Properties: ev.Properties, Context: ev.Context, Integrations: ev.Integrations,
		})
	case "alias":
		return c.Alias(analytics.Alias{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID, PreviousID: ev.PreviousID,
			Timestamp: ev.timestamp, Context: ev.Context, Integrations: ev.Integrations,
		})
	}
	// parseEvent admits only the six types above.
	return fmt.Errorf("unknown event type %q", ev.Type)
}

// configError names the input field of an error returned by analytics.New.
func configError(err error) error {
	var ce *analytics.ConfigError
	if errors.As(err, &ce) {
		if field, ok := sdkFields[ce.Field]; ok {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	return err
}

// decode unmarshals raw into v, keeping JSON numbers exact (json.Number) so
// properties and traits are passed through unchanged.
func decode(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// present reports whether a field was given with a non-null value.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// parseInput parses the --input document.
func parseInput(data []byte) (*plan, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("input is empty")
	}
	var top struct {
		WriteKey  json.RawMessage `json:"writeKey"`
		APIHost   json.RawMessage `json:"apiHost"`
		Sequences json.RawMessage `json:"sequences"`
		Config    json.RawMessage `json:"config"`
		// cdnHost is accepted and ignored: this SDK fetches no settings.
	}
	if err := decode(data, &top); err != nil {
		return nil, fmt.Errorf("invalid input JSON: %w", err)
	}
	p := &plan{closeTimeout: defaultCloseTimeout, flushTimeout: defaultFlushTimeout}

	if present(top.WriteKey) {
		if err := json.Unmarshal(top.WriteKey, &p.writeKey); err != nil {
			return nil, errors.New("writeKey: must be a string")
		}
	} // absent: analytics.New rejects the empty key, naming WriteKey
	if present(top.APIHost) {
		var host string
		if err := json.Unmarshal(top.APIHost, &host); err != nil {
			return nil, errors.New("apiHost: must be a string")
		}
		p.opts = append(p.opts, analytics.WithEndpoint(host))
	}
	if err := p.parseConfig(top.Config); err != nil {
		return nil, err
	}
	if err := p.parseSequences(top.Sequences); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *plan) parseConfig(raw json.RawMessage) error {
	if !present(raw) {
		return nil
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return errors.New("config: must be an object")
	}
	f := fields{m: cfg, prefix: "config."}

	if n, ok := f.integer("flushAt"); ok {
		p.opts = append(p.opts, analytics.WithFlushAt(n))
	}
	if d, ok := f.duration("flushInterval", time.Millisecond); ok {
		p.opts = append(p.opts, analytics.WithFlushInterval(d))
	}
	// Passed through exactly when present, including 0 (D22, R48).
	if n, ok := f.integer("maxRetries"); ok {
		p.opts = append(p.opts, analytics.WithMaxRetries(n))
	}
	if n, ok := f.integer("consumers"); ok {
		p.opts = append(p.opts, analytics.WithConsumers(n))
	}
	if n, ok := f.integer("queueCapacity"); ok {
		p.opts = append(p.opts, analytics.WithQueueCapacity(n))
	}
	if d, ok := f.duration("httpTimeoutMs", time.Millisecond); ok {
		p.opts = append(p.opts, analytics.WithHTTPTimeout(d))
	}
	if d, ok := f.duration("maxTotalBackoffDurationMs", time.Millisecond); ok {
		p.opts = append(p.opts, analytics.WithMaxTotalBackoffDuration(d))
	}
	if d, ok := f.duration("maxRateLimitDurationMs", time.Millisecond); ok {
		p.opts = append(p.opts, analytics.WithMaxRateLimitDuration(d))
	}
	if b, ok := f.boolean("gzip"); ok {
		p.opts = append(p.opts, analytics.WithGzip(b))
	}
	if b, ok := f.boolean("eventSentAt"); ok {
		p.opts = append(p.opts, analytics.WithEventSentAt(b))
	}
	if o, ok := f.oauth("oauth"); ok {
		p.opts = append(p.opts, analytics.WithOAuth(o))
	}
	// The CLI's own deadlines: the SDK does not see them, so check them here.
	if d, ok := f.nonNegative("timeout", time.Second); ok {
		p.closeTimeout = d
	}
	if d, ok := f.nonNegative("closeTimeoutMs", time.Millisecond); ok {
		p.closeTimeout = d // overrides timeout
	}
	if d, ok := f.nonNegative("flushTimeoutMs", time.Millisecond); ok {
		p.flushTimeout = d
	}
	if b, ok := f.boolean("afterClose"); ok {
		p.afterClose = b
	}
	if dir, ok := f.str("diskBufferDir"); ok {
		p.opts = append(p.opts, analytics.WithDiskBuffer(dir))
		p.durable = true
	}
	return f.err
}

func (p *plan) parseSequences(raw json.RawMessage) error {
	if !present(raw) {
		return errors.New("sequences: required")
	}
	var seqs []json.RawMessage
	if err := json.Unmarshal(raw, &seqs); err != nil {
		return errors.New("sequences: must be an array")
	}
	for i, rawSeq := range seqs {
		path := fmt.Sprintf("sequences[%d]", i)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(rawSeq, &m); err != nil {
			return fmt.Errorf("%s: must be an object", path)
		}
		f := fields{m: m, prefix: path + "."}
		var s sequence
		if d, ok := f.nonNegative("delayMs", time.Millisecond); ok {
			s.delay = d
		}
		if b, ok := f.boolean("flush"); ok {
			s.flush = b
		}
		if f.err != nil {
			return f.err
		}
		if present(m["events"]) {
			var evs []json.RawMessage
			if err := json.Unmarshal(m["events"], &evs); err != nil {
				return fmt.Errorf("%s.events: must be an array", path)
			}
			for j, rawEv := range evs {
				ev, err := parseEvent(rawEv)
				if err != nil {
					return fmt.Errorf("%s.events[%d]: %w", path, j, err)
				}
				s.events = append(s.events, ev)
			}
		}
		p.sequences = append(p.sequences, s)
	}
	return nil
}

func parseEvent(raw json.RawMessage) (inputEvent, error) {
	var ev inputEvent
	if err := decode(raw, &ev); err != nil {
		return ev, err
	}
	if !eventTypes[ev.Type] {
		return ev, fmt.Errorf("unknown event type %q (want identify, track, page, screen, alias or group)", ev.Type)
	}
	if ev.Timestamp != nil && *ev.Timestamp != "" {
		ts, err := parseTimestamp(*ev.Timestamp)
		if err != nil {
			return ev, fmt.Errorf("timestamp: %w", err)
		}
		ev.timestamp = ts
	}
	return ev, nil
}

// timestampLayouts are the ISO-8601 forms accepted; a time without a zone is
// read as UTC.
var timestampLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999Z0700",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02",
}

func parseTimestamp(s string) (time.Time, error) {
	for _, layout := range timestampLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an ISO-8601 date-time", s)
}

// fields reads typed values from a JSON object and keeps the first error.
// A missing or null field is absent (ok == false).
type fields struct {
	m      map[string]json.RawMessage
	prefix string
	err    error
}

func (f *fields) fail(key, reason string) {
	if f.err == nil {
		f.err = fmt.Errorf("%s%s: %s", f.prefix, key, reason)
	}
}

func (f *fields) number(key string) (float64, bool) {
	raw, ok := f.m[key]
	if !ok || !present(raw) {
		return 0, false
	}
	var v any
	if err := decode(raw, &v); err != nil {
		f.fail(key, "must be a number")
		return 0, false
	}
	n, isNum := v.(json.Number) // a JSON string is not a number, even "3"
	if !isNum {
		f.fail(key, "must be a number")
		return 0, false
	}
	x, err := n.Float64()
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		f.fail(key, "must be a finite number")
		return 0, false
	}
	return x, true
}

func (f *fields) integer(key string) (int, bool) {
	x, ok := f.number(key)
	if !ok {
		return 0, false
	}
	if x != math.Trunc(x) {
		f.fail(key, "must be an integer")
		return 0, false
	}
	if x > math.MaxInt32 || x < math.MinInt32 {
		f.fail(key, "out of range")
		return 0, false
	}
	return int(x), true
}

// duration reads a number of units (fractions allowed). The sign is kept:
// analytics.New rejects negative values and names its field.
func (f *fields) duration(key string, unit time.Duration) (time.Duration, bool) {
	x, ok := f.number(key)
	if !ok {
		return 0, false
	}
	ns := x * float64(unit)
	if math.Abs(ns) >= math.MaxInt64 {
		f.fail(key, "out of range")
		return 0, false
	}
	return time.Duration(ns), true
}

// nonNegative is duration for the CLI's own settings, which it checks itself.
func (f *fields) nonNegative(key string, unit time.Duration) (time.Duration, bool) {
	d, ok := f.duration(key, unit)
	if ok && d < 0 {
		f.fail(key, "must not be negative")
		return 0, false
	}
	return d, ok
}

func (f *fields) boolean(key string) (bool, bool) {
	raw, ok := f.m[key]
	if !ok || !present(raw) {
		return false, false
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		f.fail(key, "must be true or false")
		return false, false
	}
	return b, true
}

// oauth reads config.oauth: {"clientId", "keyId", "privateKeyPem",
// "authServer", "scope"}, all strings. analytics.New checks the values.
func (f *fields) oauth(key string) (analytics.OAuthConfig, bool) {
	raw, ok := f.m[key]
	if !ok || !present(raw) {
		return analytics.OAuthConfig{}, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		f.fail(key, "must be an object")
		return analytics.OAuthConfig{}, false
	}
	sub := fields{m: m, prefix: f.prefix + key + "."}
	var c analytics.OAuthConfig
	c.ClientID, _ = sub.str("clientId")
	c.KeyID, _ = sub.str("keyId")
	pemText, _ := sub.str("privateKeyPem")
	c.PrivateKey = []byte(pemText)
	c.AuthServer, _ = sub.str("authServer")
	c.Scope, _ = sub.str("scope")
	if sub.err != nil {
		if f.err == nil {
			f.err = sub.err
		}
		return analytics.OAuthConfig{}, false
	}
	return c, true
}

func (f *fields) str(key string) (string, bool) {
	raw, ok := f.m[key]
	if !ok || !present(raw) {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		f.fail(key, "must be a string")
		return "", false
	}
	return s, true
}
