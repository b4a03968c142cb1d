package analytics

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// OAuth (R50, S45b) under fake time: a fake auth server (fakeAuth) and the
// fake tracking API share one RoundTripper, routed by host. What is
// asserted is what reached them and the callbacks.

var (
	testKeyOnce          sync.Once
	testKey, otherKey    *rsa.PrivateKey
	testKeyPEM, pkcs8PEM []byte
)

func testKeys(t testing.TB) {
	t.Helper()
	testKeyOnce.Do(func() {
		var err error
		if testKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if otherKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		testKeyPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(testKey)})
		der, err := x509.MarshalPKCS8PrivateKey(testKey)
		if err != nil {
			panic(err)
		}
		pkcs8PEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	})
}

const (
	testAuthServer = "http://auth.test"
	testClientID   = "client-7"
	testKeyID      = "key-3"
)

// tokenRequest is one request as the fake auth server received it.
type tokenRequest struct {
	at        time.Time
	form      url.Values
	kid       string
	claims    jwt.MapClaims
	assertion string
	verified  bool // the assertion's RS256 signature matched the public key
	issued    string
}

// fakeAuth is an in-process auth server. It verifies every client
// assertion with pub (answering 401 invalid_client when it does not
// match) and otherwise answers from script; a 200 reply without a body
// issues the token "tok-secret-<n>" (n counts requests from 1).
type fakeAuth struct {
	mu        sync.Mutex
	pub       *rsa.PublicKey
	expiresIn int
	ahead     time.Duration // the server's clock runs this far ahead (sent in Date)
	reqs      []tokenRequest
	script    func(n int) reply
}

func newFakeAuth(replies ...reply) *fakeAuth {
	fa := &fakeAuth{pub: &testKey.PublicKey, expiresIn: 3600}
	if len(replies) > 0 {
		fa.script = func(n int) reply { return replies[min(n, len(replies)-1)] }
	} else {
		fa.script = func(int) reply { return reply{} }
	}
	return fa
}

func (fa *fakeAuth) RoundTrip(req *http.Request) (*http.Response, error) {
	raw, _ := io.ReadAll(req.Body)
	_ = req.Body.Close()
	form, _ := url.ParseQuery(string(raw))
	tr := tokenRequest{at: time.Now(), form: form, assertion: form.Get("client_assertion")}
	tok, err := jwt.Parse(tr.assertion, func(tok *jwt.Token) (any, error) {
		tr.kid, _ = tok.Header["kid"].(string)
		return fa.pub, nil
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience(testAuthServer), jwt.WithIssuer(testClientID), jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return time.Now().Add(fa.ahead) }))
	if tok != nil {
		tr.claims, _ = tok.Claims.(jwt.MapClaims)
	}
	tr.verified = err == nil
	fa.mu.Lock()
	n := len(fa.reqs)
	rep := fa.script(n)
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		rep = reply{status: 400, body: `{"error":"invalid_request","error_description":"Token is expired"}`}
	case !tr.verified:
		rep = reply{status: 401, body: `{"error":"invalid_client","error_description":"assertion signature does not verify"}`}
	}
	status := rep.status
	if status == 0 {
		status = 200
	}
	if status == 200 && rep.body == "" && rep.err == nil {
		tr.issued = fmt.Sprintf("tok-secret-%d", n+1)
		rep.body = fmt.Sprintf(`{"access_token":%q,"token_type":"Bearer","expires_in":%d}`, tr.issued, fa.expiresIn)
	}
	fa.reqs = append(fa.reqs, tr)
	fa.mu.Unlock()
	if rep.hold > 0 {
		t := time.NewTimer(rep.hold)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		}
	}
	if rep.err != nil {
		return nil, rep.err
	}
	h := http.Header{"Date": {time.Now().Add(fa.ahead).UTC().Format(http.TimeFormat)}}
	for k, v := range rep.header {
		h.Set(k, v)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(rep.body)), Request: req}, nil
}

func (fa *fakeAuth) requests() []tokenRequest {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	return append([]tokenRequest(nil), fa.reqs...)
}

// router sends token requests to the auth server, the rest to the API.
type router struct {
	auth *fakeAuth
	api  *fakeAPI
}

func (r router) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == "auth.test" {
		return r.auth.RoundTrip(req)
	}
	return r.api.RoundTrip(req)
}

func oauthConfig() OAuthConfig {
	return OAuthConfig{ClientID: testClientID, KeyID: testKeyID, PrivateKey: testKeyPEM, AuthServer: testAuthServer + "/"}
}

func newOAuthClient(t testing.TB, fa *fakeAuth, api *fakeAPI, cb *callbacks, opts ...Option) *Client {
	t.Helper()
	all := append([]Option{WithOAuth(oauthConfig())}, opts...)
	return newTestClient(t, router{auth: fa, api: api}, cb, all...)
}

func authHeaders(reqs []seen) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.header.Get("Authorization")
	}
	return out
}

// R50: the wire format of the token request and its assertion; every
// upload of every consumer carries the one token, fetched once.
func TestOAuthOneTokenForAllBatchesAndConsumers(t *testing.T) {
	testKeys(t)
	synctest.Test(t, func(t *testing.T) {
		fa := newFakeAuth(reply{hold: 300 * time.Millisecond}) // batches queue up behind the first fetch
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newOAuthClient(t, fa, api, cb, WithConsumers(4), WithFlushAt(1))
		for i := range 12 {
			mustTrack(t, c, fmt.Sprintf("m%d", i))
		}
		require.NoError(t, flush(t, c, time.Minute))
		for i := range 8 {
			mustTrack(t, c, fmt.Sprintf("n%d", i))
		}
		require.NoError(t, closeClient(t, c, time.Minute))

		toks := fa.requests()
		require.Equal(t, 1, len(toks), "one token request for 20 batches on 4 consumers")
		tr := toks[0]
		assert.True(t, tr.verified, "assertion signature")
		assert.Equal(t, "client_credentials", tr.form.Get("grant_type"))
		assert.Equal(t, "urn:ietf:params:oauth:client-assertion-type:jwt-bearer", tr.form.Get("client_assertion_type"))
		assert.Equal(t, "tracking_api:write", tr.form.Get("scope"))
		assert.Equal(t, testKeyID, tr.kid)
		assert.Equal(t, testClientID, tr.claims["iss"])
		assert.Equal(t, testClientID, tr.claims["sub"])
		assert.Equal(t, testAuthServer, tr.claims["aud"], "aud is the auth server without the trailing slash")
		assert.NotEmpty(t, tr.claims["jti"])
		iat, _ := tr.claims["iat"].(float64)
		exp, _ := tr.claims["exp"].(float64)
		assert.InDelta(t, 60, exp-iat, 0.5, "short-lived assertion")

		reqs := api.requests()
		require.Equal(t, 20, len(reqs))
		for i, h := range authHeaders(reqs) {
			assert.Equal(t, "Bearer tok-secret-1", h, "request %d", i)
			assert.Equal(t, "http://api.test/v1/batch", reqs[i].url)
		}
		assert.Len(t, cb.delivered(), 20)
		assert.Empty(t, cb.errors())
	})
}

// R50: each token request carries a fresh jti; the token is refreshed at
// half its lifetime, before it expires, without any upload asking for it.
func TestOAuthRefreshBeforeExpiry(t *testing.T) {
	testKeys(t)
	synctest.Test(t, func(t *testing.T) {
		fa := newFakeAuth()
		fa.expiresIn = 100
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newOAuthClient(t, fa, api, cb, WithFlushAt(1))
		mustTrack(t, c, "e1")
		require.NoError(t, flush(t, c, time.Minute))
		time.Sleep(70 * time.Second)
		mustTrack(t, c, "e2")
		require.NoError(t, flush(t, c, time.Minute))
		time.Sleep(60 * time.Second)
		mustTrack(t, c, "e3")
		require.NoError(t, closeClient(t, c, time.Minute))

		toks := fa.requests()
		require.Equal(t, 3, len(toks), "fetch at start, refresh at 50 s and 100 s")
		assert.Equal(t, 50*time.Second, toks[1].at.Sub(toks[0].at))
		assert.Equal(t, 50*time.Second, toks[2].at.Sub(toks[1].at))
		assert.NotEqual(t, toks[0].claims["jti"], toks[1].claims["jti"])
		assert.Equal(t, []string{"Bearer tok-secret-1", "Bearer tok-secret-2", "Bearer tok-secret-3"}, authHeaders(api.requests()))
		assert.Equal(t, []string{"e1", "e2", "e3"}, cb.delivered())
	})
}

// S45b, R50: 511 drops the token; the batch is retried (counted) with a
// fresh one. Without OAuth, 511 stays non-retryable (S5, see
// TestStatusRetryBehaviour).
func TestOAuth511RetriedWithFreshToken(t *testing.T) {
	testKeys(t)
	synctest.Test(t, func(t *testing.T) {
		fa := newFakeAuth()
		api := newFakeAPI(sequence(reply{status: 511, body: `{"message":"token revoked"}`}, reply{status: 200}))
		cb := &callbacks{}
		c := newOAuthClient(t, fa, api, cb, WithMaxRetries(3))
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))

		reqs := api.requests()
		require.Equal(t, 2, len(reqs))
		assert.Equal(t, []string{"Bearer tok-secret-1", "Bearer tok-secret-2"}, authHeaders(reqs))
		assert.Equal(t, []string{"-", "1"}, retryCounts(reqs))
		assert.Equal(t, reqs[0].ids, reqs[1].ids)
		lo, hi := window(1)
		within(t, "gap_1", gap(reqs, 0), lo, hi)
		assert.Equal(t, 2, len(fa.requests()))
		assert.Equal(t, []string{"m1"}, cb.delivered())
		assert.Empty(t, cb.errors())
		assert.Equal(t, int64(1), c.Stats().Retries)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R50: a 511 that keeps coming spends MaxRetries like any counted retry.
func TestOAuth511ExhaustsRetries(t *testing.T) {
	testKeys(t)
	synctest.Test(t, func(t *testing.T) {
		fa := newFakeAuth()
		api := newFakeAPI(sequence(reply{status: 511}))
		cb := &callbacks{}
		c := newOAuthClient(t, fa, api, cb, WithMaxRetries(2))
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		assert.Equal(t, 3, len(api.requests()))
		require.Len(t, cb.errors(), 1)
		err := cb.errors()[0].err
		assert.ErrorIs(t, err, ErrRetriesExhausted)
		he := requireHTTPStatus(t, err, 511)
		assert.Equal(t, KindRetryable, he.Kind)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R50: 400, 401 and 403 drop the token and fail as before; the next batch
// carries a new token. Consumers refused with the same token cause one new
// request, not one each.
func TestOAuthRefusedTokenIsRefetched(t *testing.T) {
	testKeys(t)
	for _, status := range []int{400, 401, 403} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fa := newFakeAuth()
				api := newFakeAPI(func(n int, r seen) reply {
					if r.header.Get("Authorization") == "Bearer tok-secret-1" {
						// staggered: later refusals arrive after the new token
						return reply{status: status, hold: time.Duration(n+1) * 100 * time.Millisecond}
					}
					return reply{status: 200}
				})
				cb := &callbacks{}
				c := newOAuthClient(t, fa, api, cb, WithConsumers(4), WithFlushAt(1))
				for i := range 4 {
					mustTrack(t, c, fmt.Sprintf("a%d", i))
				}
				require.NoError(t, flush(t, c, time.Minute))
				mustTrack(t, c, "b")
				require.NoError(t, flush(t, c, time.Minute))

				reqs := api.requests()
				require.Equal(t, 5, len(reqs), "no retry of the refused batches")
				assert.Equal(t, "Bearer tok-secret-2", reqs[4].header.Get("Authorization"))
				assert.Equal(t, 2, len(fa.requests()))
				assert.Equal(t, 4, len(cb.errors()))
				for _, e := range cb.errors() {
					requireHTTPStatus(t, e.err, status)
				}
				assert.Equal(t, []string{"b"}, cb.delivered())
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
}

// R50: transient token failures are retried while the batch waits (it is
// not attempted and spends no retry); a 429 is waited out as its headers
// say.
func TestOAuthTokenEndpointTransientFailures(t *testing.T) {
	testKeys(t)
	lo1, hi1 := window(1)
	cases := []struct {
		name   string
		first  reply
		lo, hi time.Duration
	}{
		{"500", reply{status: 500}, lo1, hi1},
		{"503", reply{status: 503, body: "maintenance"}, lo1, hi1},
		{"429 Retry-After", reply{status: 429, header: map[string]string{"Retry-After": "7"}}, 7 * time.Second, 7 * time.Second},
		{"429 X-RateLimit-Reset", reply{status: 429, header: map[string]string{"X-RateLimit-Reset": "4"}}, 4 * time.Second, 4 * time.Second},
		{"429 no header", reply{status: 429}, lo1, hi1},
		{"transport error", reply{err: errors.New("connection reset by peer")}, lo1, hi1},
		{"200 without token", reply{status: 200, body: `{"token_type":"Bearer"}`}, lo1, hi1},
		{"200 with a malformed token", reply{status: 200, body: `{"access_token":"a\r\nX-Evil: 1","expires_in":60}`}, lo1, hi1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fa := newFakeAuth(tc.first, tc.first, reply{})
				api := newFakeAPI(nil)
				cb := &callbacks{}
				c := newOAuthClient(t, fa, api, cb, WithMaxRetries(0))
				mustTrack(t, c, "m1")
				require.NoError(t, flush(t, c, time.Minute))

				toks := fa.requests()
				require.Equal(t, 3, len(toks))
				within(t, "token retry 1", toks[1].at.Sub(toks[0].at), tc.lo, tc.hi)
				reqs := api.requests()
				require.Equal(t, 1, len(reqs), "the batch waited, it was not attempted")
				assert.Equal(t, "Bearer tok-secret-3", reqs[0].header.Get("Authorization"))
				assert.Equal(t, []string{"-"}, retryCounts(reqs))
				assert.True(t, reqs[0].at.Equal(toks[2].at), "sent as soon as the token arrived")
				assert.Equal(t, []string{"m1"}, cb.delivered())
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
}

// R50: a permanent token failure fails the waiting batches with an
// *OAuthError that says what to check; nothing is uploaded.
func TestOAuthInvalidClientFailsTyped(t *testing.T) {
	testKeys(t)
	cases := []struct {
		name   string
		setup  func(fa *fakeAuth)
		status int
		code   string
		hint   string
	}{
		{"wrong key", func(fa *fakeAuth) { fa.pub = &otherKey.PublicKey }, 401, "invalid_client", "KeyID"},
		{"400 invalid_scope", func(fa *fakeAuth) {
			fa.script = func(int) reply {
				return reply{status: 400, body: `{"error":"invalid_scope","error_description":"scope not granted"}`}
			}
		}, 400, "invalid_scope", "Scope"},
		{"403", func(fa *fakeAuth) { fa.script = func(int) reply { return reply{status: 403, body: "forbidden"} } }, 403, "", "not allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fa := newFakeAuth()
				tc.setup(fa)
				api := newFakeAPI(nil)
				cb := &callbacks{}
				c := newOAuthClient(t, fa, api, cb, WithFlushAt(1))
				mustTrack(t, c, "m1")
				mustTrack(t, c, "m2")
				require.NoError(t, flush(t, c, time.Minute))

				assert.Empty(t, api.requests())
				assert.Equal(t, 1, len(fa.requests()), "no retry within the minute")
				errs := cb.errors()
				require.Len(t, errs, 2)
				for _, e := range errs {
					var oe *OAuthError
					require.ErrorAs(t, e.err, &oe)
					assert.ErrorIs(t, e.err, ErrOAuth)
					assert.True(t, oe.Permanent)
					assert.Equal(t, tc.status, oe.StatusCode)
					assert.Equal(t, tc.code, oe.Code)
					assert.Contains(t, e.err.Error(), tc.hint)
				}
				assert.Equal(t, int64(2), c.Stats().Failed)
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
}

// R50, R37, R38: Close interrupts a wait for a token and hands the batch
// back within its deadline.
func TestOAuthCloseDuringTokenWait(t *testing.T) {
	testKeys(t)
	synctest.Test(t, func(t *testing.T) {
		fa := newFakeAuth(reply{status: 503})
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newOAuthClient(t, fa, api, cb)
		mustTrack(t, c, "m1")
		time.Sleep(3 * time.Second)
		start := time.Now()
		err := closeClient(t, c, time.Second)
		assert.LessOrEqual(t, time.Since(start), 1500*time.Millisecond)
		assert.ErrorIs(t, err, ErrShutdownInterrupted)
		assert.Empty(t, api.requests())
		require.Len(t, cb.errors(), 1)
		e := cb.errors()[0].err
		assert.ErrorIs(t, e, ErrShutdownInterrupted)
		assert.Equal(t, int64(1), c.Stats().HandedBack)
		n := len(fa.requests())
		time.Sleep(time.Minute)
		assert.Equal(t, n, len(fa.requests()), "no token request after Close")
	})
}

// R50: a token request in flight is cancelled by an interrupting Close.
func TestOAuthCloseCancelsTokenRequest(t *testing.T) {
	testKeys(t)
	synctest.Test(t, func(t *testing.T) {
		fa := newFakeAuth(reply{hold: time.Hour})
		cb := &callbacks{}
		c := newOAuthClient(t, fa, newFakeAPI(nil), cb, WithHTTPTimeout(2*time.Hour))
		mustTrack(t, c, "m1")
		start := time.Now()
		assert.ErrorIs(t, closeClient(t, c, 500*time.Millisecond), ErrShutdownInterrupted)
		assert.LessOrEqual(t, time.Since(start), time.Second)
		assert.Equal(t, 1, cb.failedWith(ErrShutdownInterrupted))
	})
}

// R50, R51: neither the private key, the assertion nor a token reaches a
// log line, an error, Config().String() or the OAuthConfig's String.
func TestOAuthSecretsNeverLogged(t *testing.T) {
	testKeys(t)
	synctest.Test(t, func(t *testing.T) {
		fa := newFakeAuth(reply{}, reply{status: 503}, reply{}, reply{status: 401, body: `{"error":"invalid_client"}`})
		api := newFakeAPI(sequence(reply{status: 511}, reply{status: 401}, reply{status: 200}))
		cb := &callbacks{}
		core, logs := observer.New(zapcore.DebugLevel)
		c := newOAuthClient(t, fa, api, cb, WithLogger(zap.New(core)), WithFlushAt(1), WithMaxRetries(5))
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		mustTrack(t, c, "m2")
		require.NoError(t, flush(t, c, time.Minute))
		require.NoError(t, closeClient(t, c, time.Second))

		var texts []string
		enc := zapcore.NewJSONEncoder(zap.NewDevelopmentEncoderConfig())
		for _, e := range logs.All() {
			buf, err := enc.EncodeEntry(e.Entry, e.Context)
			require.NoError(t, err)
			texts = append(texts, buf.String())
		}
		require.NotEmpty(t, texts)
		for _, e := range cb.errors() {
			texts = append(texts, e.err.Error(), fmt.Sprintf("%+v", e.err))
		}
		texts = append(texts, c.Config().String(), fmt.Sprintf("%v %+v %#v", oauthConfig(), oauthConfig(), oauthConfig()))
		secrets := []string{"tok-secret", pemBody(testKeyPEM)}
		for _, tr := range fa.requests() {
			secrets = append(secrets, tr.assertion)
		}
		require.Greater(t, len(fa.requests()), 2, "the scenario fetched several tokens")
		for _, text := range texts {
			for _, s := range secrets {
				assert.NotContains(t, text, s)
			}
		}
	})
}

// pemBody is a line from the middle of a PEM block.
func pemBody(p []byte) string {
	lines := strings.Split(string(p), "\n")
	return lines[len(lines)/2]
}

// R48, R50: WithOAuth is validated by New; the error names the field and
// never shows the key.
func TestWithOAuthValidation(t *testing.T) {
	testKeys(t)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ecDER, err := x509.MarshalPKCS8PrivateKey(ecKey)
	require.NoError(t, err)
	ecPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})
	cases := []struct {
		name  string
		edit  func(*OAuthConfig)
		field string
	}{
		{"no client id", func(c *OAuthConfig) { c.ClientID = " " }, "OAuth.ClientID"},
		{"no key id", func(c *OAuthConfig) { c.KeyID = "" }, "OAuth.KeyID"},
		{"no key", func(c *OAuthConfig) { c.PrivateKey = nil }, "OAuth.PrivateKey"},
		{"not PEM", func(c *OAuthConfig) { c.PrivateKey = []byte("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC") }, "OAuth.PrivateKey"},
		{"EC key", func(c *OAuthConfig) { c.PrivateKey = ecPEM }, "OAuth.PrivateKey"},
		{"truncated PEM", func(c *OAuthConfig) { c.PrivateKey = testKeyPEM[:len(testKeyPEM)/2] }, "OAuth.PrivateKey"},
		{"bad auth server", func(c *OAuthConfig) { c.AuthServer = "ftp://auth.test" }, "OAuth.AuthServer"},
		{"relative auth server", func(c *OAuthConfig) { c.AuthServer = "auth.test" }, "OAuth.AuthServer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := oauthConfig()
			tc.edit(&cfg)
			c, err := New("wk", WithOAuth(cfg))
			require.Nil(t, c)
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.field, ce.Field)
			if len(cfg.PrivateKey) > 40 {
				assert.NotContains(t, err.Error(), pemBody(cfg.PrivateKey))
			}
		})
	}
	t.Run("PKCS8 and defaults", func(t *testing.T) {
		s, err := resolve("wk", []Option{WithOAuth(OAuthConfig{ClientID: "c", KeyID: "k", PrivateKey: pkcs8PEM})})
		require.NoError(t, err)
		require.NotNil(t, s.oauth)
		assert.Equal(t, "https://oauth2.segment.io/token", s.oauth.tokenURL)
		assert.Equal(t, "https://oauth2.segment.io", s.oauth.audience)
		assert.Equal(t, "tracking_api:write", s.oauth.scope)
	})
}

// R50: an auth server whose clock is ahead rejects the first assertion as
// expired; its Date header corrects the clock and the next one is accepted.
func TestOAuthClockSkewFromDate(t *testing.T) {
	testKeys(t)
	synctest.Test(t, func(t *testing.T) {
		fa := newFakeAuth()
		fa.ahead = time.Hour
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newOAuthClient(t, fa, api, cb)
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		toks := fa.requests()
		require.Equal(t, 2, len(toks))
		assert.False(t, toks[0].verified)
		assert.True(t, toks[1].verified)
		iat0, _ := toks[0].claims["iat"].(float64)
		iat1, _ := toks[1].claims["iat"].(float64)
		within(t, "iat shift", time.Duration(iat1-iat0)*time.Second, time.Hour, time.Hour+2*time.Second)
		assert.Equal(t, []string{"m1"}, cb.delivered())
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R50: after a permanent failure the token source tries again a minute
// later, so a corrected registration is picked up without a restart.
func TestOAuthRecoversAfterPermanentFailure(t *testing.T) {
	testKeys(t)
	synctest.Test(t, func(t *testing.T) {
		fa := newFakeAuth(reply{status: 401, body: `{"error":"invalid_client"}`}, reply{})
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newOAuthClient(t, fa, api, cb, WithFlushAt(1))
		mustTrack(t, c, "m1")
		require.NoError(t, flush(t, c, time.Minute))
		assert.Equal(t, 1, cb.failedWith(ErrOAuth))
		time.Sleep(30 * time.Second)
		mustTrack(t, c, "m2") // still failing: no new request before the minute is up
		require.NoError(t, flush(t, c, time.Minute))
		assert.Equal(t, 2, cb.failedWith(ErrOAuth))
		time.Sleep(31 * time.Second)
		mustTrack(t, c, "m3")
		require.NoError(t, flush(t, c, time.Minute))
		toks := fa.requests()
		require.Equal(t, 2, len(toks))
		assert.Equal(t, 60*time.Second, toks[1].at.Sub(toks[0].at))
		assert.Equal(t, []string{"m3"}, cb.delivered())
		assert.Equal(t, []string{"Bearer tok-secret-2"}, authHeaders(api.requests()))
		require.NoError(t, closeClient(t, c, time.Second))
	})
}
