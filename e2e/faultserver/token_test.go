package faultserver

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func signAssertion(t *testing.T, pemKey []byte, kid string, claims jwt.MapClaims) string {
	t.Helper()
	key, err := jwt.ParseRSAPrivateKeyFromPEM(pemKey)
	require.NoError(t, err)
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func goodClaims(aud string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": "cid", "sub": "cid", "aud": aud, "iat": now.Add(-5 * time.Second).Unix(),
		"exp": now.Add(55 * time.Second).Unix(), "jti": "j-1"}
}

func postToken(t *testing.T, c *http.Client, base, assertion string) (int, map[string]any) {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_assertion_type": {AssertionType},
		"client_assertion": {assertion}, "scope": {"tracking_api:write"}}
	resp, err := c.Post(base+"/token", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	return resp.StatusCode, body
}

func tokenServer(t *testing.T, pub *rsa.PublicKey, opts Options) *Server {
	t.Helper()
	if opts.Token == nil {
		opts.Token = &TokenOptions{}
	}
	opts.Token.PublicKey, opts.Token.ClientID, opts.Token.KeyID = pub, "cid", "kid-1"
	return start(t, opts)
}

// The token endpoint verifies the assertion's signature and claims, issues
// tokens, and records token requests apart from the tracking API's.
func TestTokenEndpointVerifiesAndIssues(t *testing.T) {
	priv, pub, err := GenerateKey()
	require.NoError(t, err)
	other, _, err := GenerateKey()
	require.NoError(t, err)
	s := tokenServer(t, pub, Options{})
	s.SetOptions(Options{Token: &TokenOptions{PublicKey: pub, ClientID: "cid", KeyID: "kid-1", Audience: s.TokenURL(), ExpiresIn: 60}})
	c := newClient(t)

	st, body := postToken(t, c, s.URL(), signAssertion(t, priv, "kid-1", goodClaims(s.TokenURL())))
	assert.Equal(t, 200, st)
	assert.Equal(t, "fs-token-1", body["access_token"])
	assert.EqualValues(t, 60, body["expires_in"])

	cases := map[string]string{
		"wrong key": signAssertion(t, other, "kid-1", goodClaims(s.TokenURL())),
		"wrong kid": signAssertion(t, priv, "kid-2", goodClaims(s.TokenURL())),
		"wrong aud": signAssertion(t, priv, "kid-1", goodClaims("https://elsewhere")),
		"not a JWT": "abc.def.ghi",
	}
	for name, a := range cases {
		st, body := postToken(t, c, s.URL(), a)
		assert.Equal(t, 401, st, name)
		assert.Equal(t, "invalid_client", body["error"], name)
	}
	recs, err := s.WaitTokenRequests(context.Background(), 5)
	require.NoError(t, err)
	require.Len(t, recs, 5)
	assert.True(t, recs[0].Verified)
	assert.Equal(t, "kid-1", recs[0].KeyID)
	assert.Equal(t, "cid", recs[0].Claims["iss"])
	assert.Equal(t, "fs-token-1", recs[0].Token)
	for _, r := range recs[1:] {
		assert.False(t, r.Verified)
		assert.NotEmpty(t, r.Problem)
		assert.Equal(t, 401, r.Status)
	}
	assert.Empty(t, s.Requests(), "token requests are not tracking API requests")
}

// The script answers verified requests; RequireBearer guards the tracking API.
func TestTokenEndpointScriptAndRequireBearer(t *testing.T) {
	priv, pub, err := GenerateKey()
	require.NoError(t, err)
	s := tokenServer(t, pub, Options{Token: &TokenOptions{
		Script:        []Response{{Status: 503}, RetryAfter(429, "1"), {}},
		RequireBearer: true,
	}})
	c := newClient(t)
	a := signAssertion(t, priv, "kid-1", goodClaims(s.URL()))
	st, _ := postToken(t, c, s.URL(), a)
	assert.Equal(t, 503, st)
	st, _ = postToken(t, c, s.URL(), a)
	assert.Equal(t, 429, st)
	st, body := postToken(t, c, s.URL(), a)
	require.Equal(t, 200, st)
	token, _ := body["access_token"].(string)

	send := func(auth string) int {
		req, err := http.NewRequest(http.MethodPost, s.URL()+"/v1/batch", strings.NewReader(`{"batch":[]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", auth)
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, 401, send("Basic d2s6"))
	assert.Equal(t, 401, send("Bearer fs-token-99"))
	assert.Equal(t, 200, send("Bearer "+token))
	reqs := s.Requests()
	require.Len(t, reqs, 3)
	assert.Equal(t, "invalid_token", reqs[0].Rejected)
	assert.Equal(t, "", reqs[2].Rejected)
}
