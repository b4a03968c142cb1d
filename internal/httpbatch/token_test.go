package httpbatch

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// R50: expires_in is read as a number or a string, bounded, with a
// default for anything unusable.
func TestTokenLifetime(t *testing.T) {
	for raw, want := range map[string]time.Duration{
		`3600`: time.Hour, `"60"`: time.Minute, `1.5`: 1500 * time.Millisecond,
		`0`: defaultTokenLifetime, `-3`: defaultTokenLifetime, `"x"`: defaultTokenLifetime, ``: defaultTokenLifetime,
		`999999999`: maxTokenLifetime,
	} {
		assert.Equal(t, want, tokenLifetime(json.RawMessage(raw)), raw)
	}
}

// R50: a 429 from the auth server is waited out as Retry-After says, else
// as X-RateLimit-Reset (seconds, or a Unix time), capped.
func TestRateLimitWait(t *testing.T) {
	now := time.Unix(2_000_000_000, 0)
	h := func(k, v string) http.Header { return http.Header{k: {v}} }
	assert.Equal(t, 7*time.Second, rateLimitWait(h("Retry-After", "7"), now))
	assert.Equal(t, 9*time.Second, rateLimitWait(h("X-Ratelimit-Reset", "9"), now))
	assert.Equal(t, 30*time.Second, rateLimitWait(h("X-Ratelimit-Reset", strconv.FormatInt(now.Unix()+30, 10)), now))
	assert.Equal(t, MaxRetryAfter, rateLimitWait(h("X-Ratelimit-Reset", "99999999999999999999"), now))
	assert.Zero(t, rateLimitWait(h("X-Ratelimit-Reset", strconv.FormatInt(now.Unix()-5, 10)), now))
	assert.Zero(t, rateLimitWait(http.Header{}, now))
}

// Every assertion gets a fresh random version 4 UUID as its jti.
func TestNewJTI(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := newJTI(), newJTI()
	assert.Regexp(t, uuid, a)
	assert.Regexp(t, uuid, b)
	assert.NotEqual(t, a, b)
}
