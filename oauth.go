package analytics

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/relaykit/analytics-go/internal/httpbatch"
	"go.uber.org/zap"
)

// OAuth 2.0 for the tracking API (R50). With WithOAuth, uploads carry
// "Authorization: Bearer <token>" instead of the write key's Basic
// credentials. Tokens come from the client-credentials grant of the auth
// server, authenticated with a private-key JWT assertion (RS256). One
// goroutine per client (tokenSource.run) fetches the first token at New and
// refreshes it at half its lifetime; consumers only read the cached token.
// A batch for which no token is available yet waits in the waiting room,
// holding no consumer, until the token source has a token (or fails for
// good, and then the batch fails with an *OAuthError).

const (
	// DefaultAuthServer is the auth server of OAuthConfig when AuthServer is
	// empty: Segment's.
	DefaultAuthServer = "https://oauth2.segment.io"
	// DefaultOAuthScope is the scope requested when OAuthConfig.Scope is
	// empty.
	DefaultOAuthScope = "tracking_api:write"
)

// OAuthConfig configures OAuth 2.0 for the tracking API; see WithOAuth.
// Its String and GoString methods never print PrivateKey.
type OAuthConfig struct {
	// ClientID is the OAuth application's client id; it is the iss and sub
	// of the client assertion. Required.
	ClientID string
	// KeyID is the id of the public key registered with the auth server;
	// it is the kid header of the client assertion. Required.
	KeyID string
	// PrivateKey is the RSA private key in PEM form (PKCS #1 "RSA PRIVATE
	// KEY" or PKCS #8 "PRIVATE KEY"), used to sign the client assertion
	// with RS256. Required. It is never logged nor put in an error.
	PrivateKey []byte
	// AuthServer is the base URL of the auth server (default
	// DefaultAuthServer). Tokens are requested from AuthServer + "/token";
	// one trailing slash is dropped. It is also the aud of the assertion.
	AuthServer string
	// Scope is the scope requested (default DefaultOAuthScope).
	Scope string
	// HTTPClient sends the token requests (default: the client used for
	// uploads, see WithHTTPClient). Each token request is bounded by
	// HTTPTimeout.
	HTTPClient *http.Client
}

// String describes c without the private key.
func (c OAuthConfig) String() string {
	return fmt.Sprintf("OAuthConfig{ClientID:%q KeyID:%q PrivateKey:[%d bytes, redacted] AuthServer:%q Scope:%q}",
		c.ClientID, c.KeyID, len(c.PrivateKey), c.AuthServer, c.Scope)
}

// GoString is String, so %#v does not print the private key either.
func (c OAuthConfig) GoString() string { return c.String() }

// ErrOAuth matches every *OAuthError: no access token could be had.
var ErrOAuth = errors.New("analytics: oauth token unavailable")

// OAuthError is a failed token request (R50). A permanent one is what
// OnError receives for batches that could not get a token; transient ones
// are retried and logged as warnings. It matches ErrOAuth
// with errors.Is. It never contains the private key, the assertion or a
// token.
type OAuthError struct {
	// StatusCode is the auth server's status; 0 when no response came.
	StatusCode int
	// Code is the OAuth "error" of the response (e.g. "invalid_client").
	Code string
	// Description is a bounded excerpt of the response's
	// "error_description" (or of its text).
	Description string
	// Permanent reports a failure that retrying will not heal (a 400, 401,
	// 403 or 415, a key that cannot sign, an unusable AuthServer URL):
	// batches fail with it rather than wait.
	Permanent bool
	// Err is the transport or signing error, if any.
	Err error
}

// Error says what failed and what to check.
func (e *OAuthError) Error() string {
	var b strings.Builder
	b.WriteString("analytics: oauth token request failed")
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, ": status %d", e.StatusCode)
	}
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Description != "" {
		b.WriteString(": " + e.Description)
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	if hint := e.hint(); hint != "" {
		b.WriteString(" (" + hint + ")")
	}
	return b.String()
}

func (e *OAuthError) hint() string {
	switch {
	case e.Code == "invalid_client" || e.StatusCode == http.StatusUnauthorized:
		return "the auth server rejected the client: check ClientID and KeyID, and that the public key registered for KeyID matches PrivateKey"
	case e.Code == "invalid_scope":
		return "check Scope"
	case e.StatusCode == http.StatusForbidden:
		return "the client is not allowed this scope or workspace"
	case e.Permanent && e.StatusCode == 0:
		return "check AuthServer and PrivateKey"
	case e.Permanent:
		return "check the OAuth configuration"
	}
	return ""
}

// Is reports ErrOAuth.
func (e *OAuthError) Is(target error) bool { return target == ErrOAuth }

// Unwrap returns Err.
func (e *OAuthError) Unwrap() error { return e.Err }

// oauthSettings is a validated OAuthConfig.
type oauthSettings struct {
	clientID, keyID, scope string
	audience, tokenURL     string
	key                    *rsa.PrivateKey
	httpClient             *http.Client // nil: the upload client
}

func newOAuthSettings(c OAuthConfig) (*oauthSettings, error) {
	if strings.TrimSpace(c.ClientID) == "" {
		return nil, invalid("OAuth.ClientID", `""`, "must not be empty")
	}
	if strings.TrimSpace(c.KeyID) == "" {
		return nil, invalid("OAuth.KeyID", `""`, "must not be empty")
	}
	redacted := fmt.Sprintf("%d bytes", len(c.PrivateKey))
	key, err := jwt.ParseRSAPrivateKeyFromPEM(c.PrivateKey)
	if err != nil {
		return nil, invalid("OAuth.PrivateKey", redacted, "must be an RSA private key in PEM form (PKCS #1 or PKCS #8): "+err.Error())
	}
	if _, err := jwt.SigningMethodRS256.Sign("probe", key); err != nil {
		return nil, invalid("OAuth.PrivateKey", redacted, "cannot sign with RS256: "+err.Error())
	}
	server := c.AuthServer
	if server == "" {
		server = DefaultAuthServer
	}
	server = strings.TrimSuffix(server, "/")
	if u, err := url.Parse(server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, invalid("OAuth.AuthServer", server, "must be an absolute http or https URL")
	}
	scope := c.Scope
	if scope == "" {
		scope = DefaultOAuthScope
	}
	return &oauthSettings{
		clientID: c.ClientID, keyID: c.KeyID, scope: scope,
		audience: server, tokenURL: server + "/token",
		key: key, httpClient: c.HTTPClient,
	}, nil
}

// tokenSource keeps the client's one access token (R50). Its goroutine
// (run) is the only one that requests tokens; consumers read the cached
// header and report tokens the tracking API refused. Safe for concurrent
// use.
type tokenSource struct {
	req     *httpbatch.TokenConfig // the token request (internal/httpbatch)
	timeout time.Duration          // per token request (HTTPTimeout)
	policy  backoffPolicy
	log     *zap.Logger
	room    *waitingRoom // woken when waiting batches may go on

	mu      sync.Mutex
	header  string        // "Bearer <token>"; "" when there is none
	expires time.Time     // monotonic: the token is not used from then on
	next    time.Time     // monotonic: when run requests the next token
	failure *OAuthError   // the last request failed: why (nil after a success)
	skew    time.Duration // local clock minus the auth server's (its Date header)

	bo      *backoff.ExponentialBackOff // run only: delays between failed requests
	wake    chan struct{}               // cap 1: next may have moved earlier
	cancel  context.CancelFunc
	stopped chan struct{}
}

// newTokenSource is the token source of o: its requests go through o's
// http.Client, or upload without one, each bounded by timeout; failed
// requests are retried after policy's delays, and batches waiting for a
// token wait in room.
func newTokenSource(o *oauthSettings, upload *http.Client, timeout time.Duration, policy backoffPolicy, log *zap.Logger, room *waitingRoom) *tokenSource {
	client := o.httpClient
	if client == nil {
		client = upload
	}
	req := &httpbatch.TokenConfig{
		Client: client, Timeout: timeout, URL: o.tokenURL, Audience: o.audience,
		ClientID: o.clientID, KeyID: o.keyID, Key: o.key, Scope: o.scope,
		UserAgent: LibraryName + "/" + Version, Log: log,
	}
	return &tokenSource{
		req: req, timeout: timeout, policy: policy, log: log, room: room,
		wake: make(chan struct{}, 1), stopped: make(chan struct{}),
	}
}

// start runs the token goroutine until parent ends or stop is called.
func (t *tokenSource) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	t.cancel = cancel
	go t.run(ctx)
}

// stop ends the token goroutine, cancelling a request in flight, and waits
// for it. A nil source is a no-op.
func (t *tokenSource) stop() {
	if t == nil {
		return
	}
	t.cancel()
	<-t.stopped
}

// token returns the header for the next attempt. Without one it returns
// "" and when to look again (a safety net: waiting batches are woken as
// soon as a token arrives), and failed when the token source failed for
// good: the batch must fail with it. A transient failure is retried by the
// token source; the batch waits meanwhile.
func (t *tokenSource) token(now time.Time) (header string, due time.Time, failed *OAuthError) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.header != "" && now.Before(t.expires) {
		return t.header, time.Time{}, nil
	}
	if t.failure == nil && t.next.After(now) {
		t.next = now // an expired token with no refresh planned: fetch now
		signal(t.wake)
	}
	if t.failure != nil && t.failure.Permanent {
		failed = t.failure
	}
	return "", later(t.next, now).Add(t.timeout), failed
}

// invalidate drops header if it is still the cached token: the tracking
// API refused it (R50). A new token is requested at once, unless the last
// request failed and its retry is already planned. Consumers that report
// the same token cause one request, not one each.
func (t *tokenSource) invalidate(header string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if header == "" || header != t.header {
		return
	}
	t.header = ""
	if t.failure == nil {
		t.next = time.Now()
		signal(t.wake)
	}
	t.log.Debug("oauth token refused by the tracking API; requesting a new one")
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// run requests a token whenever next has come, until ctx ends.
func (t *tokenSource) run(ctx context.Context) {
	defer close(t.stopped)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		t.mu.Lock()
		wait := time.Until(t.next)
		t.mu.Unlock()
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-t.wake:
			case <-timer.C:
			}
			continue
		}
		t.fetch(ctx)
		if ctx.Err() != nil {
			return
		}
	}
}

// fetch makes one token request and records its result.
func (t *tokenSource) fetch(ctx context.Context) {
	header, lifetime, retryIn, ferr := t.request(ctx)
	if ctx.Err() != nil {
		return // Close: nothing to record
	}
	now := time.Now()
	t.mu.Lock()
	switch {
	case ferr == nil:
		t.header, t.failure, t.bo = header, nil, nil
		t.expires = now.Add(lifetime - lifetime/10)
		t.next = now.Add(lifetime / 2)
	case ferr.Permanent:
		t.failure, t.bo = ferr, nil
		t.next = now.Add(t.policy.MaxInterval) // a fixed configuration is picked up later
	default:
		t.failure = ferr
		if retryIn <= 0 {
			if t.bo == nil {
				t.bo = newBackoff(t.policy)
			}
			retryIn = t.bo.NextBackOff()
		}
		t.next = now.Add(retryIn)
	}
	t.mu.Unlock()
	switch {
	case ferr == nil:
		t.log.Debug("oauth token obtained", durationField("lifetime", lifetime))
		t.room.reschedule(now, awaitsToken)
	case ferr.Permanent:
		t.log.Error("oauth token request failed; batches waiting for a token fail", zap.Error(ferr))
		t.room.reschedule(now, awaitsToken)
	default:
		t.log.Warn("oauth token request failed; retrying", zap.Error(ferr), durationField("retryIn", retryIn))
	}
}

// request makes one token request (client-credentials grant with a
// private-key JWT assertion, internal/httpbatch). On success it returns the
// Authorization header and the token's lifetime; on a failure, the error
// and, for a rate limit, how long the server asked to wait (0: use
// backoff).
func (t *tokenSource) request(ctx context.Context) (header string, lifetime, retryIn time.Duration, _ *OAuthError) {
	t.mu.Lock()
	skew := t.skew
	t.mu.Unlock()
	tok := httpbatch.RequestToken(ctx, t.req, time.Now().Add(-skew))
	if tok.HasSkew {
		t.mu.Lock()
		t.skew = tok.Skew
		t.mu.Unlock()
	}
	if f := tok.Failure; f != nil {
		return "", 0, tok.RetryIn, &OAuthError{StatusCode: f.Status, Code: f.Code, Description: f.Description, Permanent: f.Permanent, Err: f.Err}
	}
	return tok.Header, tok.Lifetime, 0, nil
}
