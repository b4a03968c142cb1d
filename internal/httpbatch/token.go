package httpbatch

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
)

// OAuth token requests (R50): the client-credentials grant, authenticated
// with a private-key JWT assertion (RS256, RFC 7523). When to request a
// token and what to do with it is the caller's.

const (
	// assertionType is the client_assertion_type of a private-key JWT
	// (RFC 7523).
	assertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
	// assertionBackdate and assertionLifetime place the assertion's iat a
	// little in the past and its exp shortly after, so small clock
	// differences do not reject it and a leaked assertion is soon useless.
	assertionBackdate = 5 * time.Second
	assertionLifetime = 60 * time.Second
	// defaultTokenLifetime is assumed when a token response has no usable
	// expires_in.
	defaultTokenLifetime = 2 * time.Minute
	// maxTokenLifetime bounds a server's expires_in.
	maxTokenLifetime = 24 * time.Hour
	// maxTokenBody bounds how much of a token response is read.
	maxTokenBody = 64 << 10
)

// TokenConfig is what a token request needs.
type TokenConfig struct {
	Client    *http.Client
	Timeout   time.Duration // bounds each request
	URL       string        // the auth server's token endpoint
	Audience  string        // the aud of the assertion
	ClientID  string        // the iss and sub of the assertion
	KeyID     string        // the kid header of the assertion
	Key       *rsa.PrivateKey
	Scope     string
	UserAgent string
	Log       *zap.Logger // for panics of the HTTP client and its bodies; nil: none
}

// Token is the result of one token request.
type Token struct {
	// Header is the Authorization header ("Bearer <token>"); "" when the
	// request failed.
	Header string
	// Lifetime is the token's lifetime (expires_in, bounded; a default
	// when the server gave none).
	Lifetime time.Duration
	// RetryIn is, for a rate limit, how long the server asked to wait
	// (Retry-After or X-RateLimit-Reset); 0: the caller's backoff.
	RetryIn time.Duration
	// Skew is the local clock minus the server's (its Date header, to the
	// second), valid when HasSkew.
	Skew    time.Duration
	HasSkew bool
	// Failure says why no token came; nil on success.
	Failure *TokenFailure
}

// TokenFailure is a failed token request. It never contains the private
// key, the assertion or a token.
type TokenFailure struct {
	Status      int    // the auth server's status; 0 when no response came
	Code        string // the OAuth "error" of the response, bounded
	Description string // a bounded excerpt of "error_description" (or of the text)
	// Permanent reports a failure that retrying will not heal: a 400, 401,
	// 403 or 415, a key that cannot sign, an unusable URL, a transport
	// error that is deterministic on the client.
	Permanent bool
	Err       error // the transport or signing error, if any
}

// RequestToken makes one token request, signing the assertion at now (the
// local clock corrected by the measured skew).
func RequestToken(ctx context.Context, c *TokenConfig, now time.Time) Token {
	assertion, err := c.assertion(now)
	if err != nil {
		return Token{Failure: &TokenFailure{Permanent: true, Err: errors.New("cannot sign the client assertion with PrivateKey")}}
	}
	form := url.Values{
		"grant_type":            {"client_credentials"},
		"client_assertion_type": {assertionType},
		"client_assertion":      {assertion},
		"scope":                 {c.Scope},
	}
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.URL, strings.NewReader(form.Encode()))
	if err != nil {
		return Token{Failure: &TokenFailure{Permanent: true, Err: err}}
	}
	req.Header = http.Header{
		"Content-Type": {"application/x-www-form-urlencoded"},
		"Accept":       {"application/json"},
		"User-Agent":   {c.UserAgent},
	}
	resp, err := do(c.Client, req, c.Log) // a panic or a nil response is a transport error (do, in sender.go)
	if err != nil {
		return Token{Failure: &TokenFailure{Permanent: !transientError(err), Err: err}}
	}
	defer closeBody(resp.Body, c.Log)
	raw, ok := readBody(resp.Body, maxTokenBody, c.Log)
	if ok {
		drain(resp.Body, maxDrain, c.Log)
	}
	var t Token
	received := time.Now()
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		t.Skew, t.HasSkew = received.Sub(d).Truncate(time.Second), true
	}

	var body struct {
		AccessToken string          `json:"access_token"`
		ExpiresIn   json.RawMessage `json:"expires_in"`
		Error       string          `json:"error"`
		Description string          `json:"error_description"`
	}
	parsed := json.Unmarshal(raw, &body) == nil
	fail := &TokenFailure{Status: resp.StatusCode}
	if parsed {
		fail.Code = clip(body.Error)
		fail.Description = clip(strings.ReplaceAll(body.Description, assertion, "[assertion]"))
	} else if resp.StatusCode >= 300 {
		fail.Description = clip(strings.ReplaceAll(strings.TrimSpace(string(raw)), assertion, "[assertion]"))
	}
	t.Failure = fail
	switch s := resp.StatusCode; {
	case s >= 200 && s <= 299:
		if !parsed || body.AccessToken == "" {
			fail.Description = "the response has no access_token"
			return t
		}
		if strings.ContainsFunc(body.AccessToken, func(r rune) bool { return r <= ' ' || r > '~' }) {
			fail.Description = "the access_token is not a valid header value"
			return t
		}
		t.Header, t.Lifetime, t.Failure = "Bearer "+body.AccessToken, tokenLifetime(body.ExpiresIn), nil
	case s == http.StatusTooManyRequests:
		t.RetryIn = rateLimitWait(resp.Header, received)
	case s == http.StatusBadRequest && body.Error == "invalid_request" && clockProblem(body.Description):
		// the skew was just measured: try again
	case s == http.StatusBadRequest, s == http.StatusUnauthorized, s == http.StatusForbidden, s == http.StatusUnsupportedMediaType:
		fail.Permanent = true
	}
	return t
}

// assertion signs a fresh client assertion (RFC 7523) at now.
func (c *TokenConfig) assertion(now time.Time) (string, error) {
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss": c.ClientID,
		"sub": c.ClientID,
		"aud": c.Audience,
		"iat": now.Add(-assertionBackdate).Unix(),
		"exp": now.Add(assertionLifetime - assertionBackdate).Unix(),
		"jti": newJTI(),
	})
	tok.Header["kid"] = c.KeyID
	return tok.SignedString(c.Key)
}

// newJTI returns a random UUID (version 4), unique per assertion.
func newJTI() string {
	var u [16]byte
	_, _ = rand.Read(u[:])  // never fails (crypto/rand)
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	hex.Encode(s[9:13], u[4:6])
	hex.Encode(s[14:18], u[6:8])
	hex.Encode(s[19:23], u[8:10])
	hex.Encode(s[24:], u[10:])
	s[8], s[13], s[18], s[23] = '-', '-', '-', '-'
	return string(s[:])
}

// tokenLifetime reads expires_in (seconds, a JSON number or string).
func tokenLifetime(raw json.RawMessage) time.Duration {
	v := strings.Trim(string(raw), `"`)
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil || secs <= 0 {
		return defaultTokenLifetime
	}
	if secs >= maxTokenLifetime.Seconds() {
		return maxTokenLifetime
	}
	return time.Duration(secs * float64(time.Second))
}

// rateLimitWait is how long a 429 from the auth server asks to wait:
// Retry-After (R20, R21, capped as R24), else X-RateLimit-Reset (seconds
// to wait, or a Unix time in seconds), else 0 (backoff).
func rateLimitWait(h http.Header, now time.Time) time.Duration {
	if d, kind := parseRetryAfter(h.Get("Retry-After"), now); kind == retryAfterUsable {
		return d
	}
	v := strings.TrimSpace(h.Get("X-RateLimit-Reset"))
	if !isDigits(v) {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return MaxRetryAfter
	}
	if n > 1_000_000_000 { // a Unix time
		n -= now.Unix()
	}
	if n <= 0 {
		return 0
	}
	d, _ := secondsToDelay(strconv.FormatInt(n, 10))
	return d
}

// clockProblem reports an error_description saying the assertion's times
// were off, which a corrected clock skew heals.
func clockProblem(desc string) bool {
	d := strings.ToLower(desc)
	return strings.Contains(d, "expired") || strings.Contains(d, "before issued") || strings.Contains(d, "not yet valid")
}
