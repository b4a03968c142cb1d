package analytics

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Upper bounds of the numeric options. New returns a *ConfigError naming
// the field for a value above its bound (or below its lower bound, given
// with each option). The bounds keep every size and count the client
// derives from an option far from overflow, on 32-bit platforms too, and
// are far above any useful setting.
const (
	// MaxFlushAt bounds WithFlushAt (events per batch).
	MaxFlushAt = 10_000
	// MaxQueueCapacity bounds WithQueueCapacity (events waiting for a consumer).
	MaxQueueCapacity = 1_000_000
	// MaxConsumers bounds WithConsumers (upload goroutines).
	MaxConsumers = 1_000
	// MaxRetriesBound bounds WithMaxRetries (counted retries of a batch).
	MaxRetriesBound = 1_000
	// MaxFlushInterval bounds WithFlushInterval.
	MaxFlushInterval = 24 * time.Hour
	// MaxHTTPTimeout bounds WithHTTPTimeout (one attempt).
	MaxHTTPTimeout = time.Hour
	// MaxTotalBackoffDurationBound bounds WithMaxTotalBackoffDuration.
	MaxTotalBackoffDurationBound = 7 * 24 * time.Hour
	// MaxRateLimitDurationBound bounds WithMaxRateLimitDuration.
	MaxRateLimitDurationBound = 7 * 24 * time.Hour
	// MaxCloseTimeout bounds WithCloseTimeout.
	MaxCloseTimeout = 24 * time.Hour
)

// validate checks the final settings, after every option was applied, so
// a later option overrides an earlier invalid one. The first error names
// its field.
func (s *settings) validate() error {
	ints := []struct {
		field   string
		v, lo   int
		hi      int
		maxName string
	}{
		{"FlushAt", s.FlushAt, 1, MaxFlushAt, "MaxFlushAt"},
		{"QueueCapacity", s.QueueCapacity, 1, MaxQueueCapacity, "MaxQueueCapacity"},
		{"Consumers", s.Consumers, 1, MaxConsumers, "MaxConsumers"},
		{"MaxRetries", s.MaxRetries, 0, MaxRetriesBound, "MaxRetriesBound"},
	}
	for _, c := range ints {
		switch {
		case c.v < c.lo && c.lo == 0:
			return invalid(c.field, c.v, "must not be negative")
		case c.v < c.lo:
			return invalid(c.field, c.v, fmt.Sprintf("must be at least %d", c.lo))
		case c.v > c.hi:
			return invalid(c.field, c.v, fmt.Sprintf("must be at most %d (%s)", c.hi, c.maxName))
		}
	}
	durations := []struct {
		field    string
		v        time.Duration
		positive bool // else 0 is allowed
		hi       time.Duration
		maxName  string
	}{
		{"FlushInterval", s.FlushInterval, true, MaxFlushInterval, "MaxFlushInterval"},
		{"HTTPTimeout", s.HTTPTimeout, true, MaxHTTPTimeout, "MaxHTTPTimeout"},
		{"MaxTotalBackoffDuration", s.MaxTotalBackoffDuration, false, MaxTotalBackoffDurationBound, "MaxTotalBackoffDurationBound"},
		{"MaxRateLimitDuration", s.MaxRateLimitDuration, false, MaxRateLimitDurationBound, "MaxRateLimitDurationBound"},
		{"CloseTimeout", s.CloseTimeout, false, MaxCloseTimeout, "MaxCloseTimeout"},
	}
	for _, c := range durations {
		switch {
		case c.positive && c.v <= 0:
			return invalid(c.field, c.v, "must be positive")
		case c.v < 0:
			return invalid(c.field, c.v, "must not be negative")
		case c.v > c.hi:
			return invalid(c.field, c.v, fmt.Sprintf("must be at most %v (%s)", c.hi, c.maxName))
		}
	}
	if s.httpClientNil {
		return invalid("HTTPClient", nil, "must not be nil")
	}
	if s.logger == nil {
		return invalid("Logger", nil, "must not be nil")
	}
	return nil
}

// checkEndpoint validates the endpoint (one trailing slash already
// removed): an absolute http or https base URL, without the /v1/batch path
// the client appends (or its /v1), a second trailing slash, a query or a
// fragment.
func checkEndpoint(endpoint string) error {
	shown := redactURL(endpoint)
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid("Endpoint", shown, "must be an absolute http or https URL, such as "+DefaultEndpoint)
	}
	if strings.HasSuffix(strings.ToLower(u.Path), "/v1/batch") {
		return invalid("Endpoint", shown, "must be the base URL of the API, such as "+DefaultEndpoint+
			", without /v1/batch (the client appends it)")
	}
	if strings.HasSuffix(strings.ToLower(u.Path), "/v1") {
		return invalid("Endpoint", shown, "must be the base URL of the API, such as "+DefaultEndpoint+
			", without /v1 (the client appends /v1/batch)")
	}
	if strings.HasSuffix(endpoint, "/") {
		return invalid("Endpoint", shown, "must not end in // (the client would post to //v1/batch); "+
			"give the base URL, such as "+DefaultEndpoint)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(endpoint, "#") {
		return invalid("Endpoint", shown, "must be the base URL of the API, such as "+DefaultEndpoint+
			", without a query or fragment")
	}
	return nil
}

// redactURL hides the user information (user name and password) of a URL,
// parseable or not, so that it can be logged.
func redactURL(raw string) string {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + len("://")
	}
	end := len(raw)
	if i := strings.IndexAny(raw[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndex(raw[start:end], "@")
	if at < 0 {
		return raw
	}
	return raw[:start] + "xxxxx" + raw[start+at:]
}
