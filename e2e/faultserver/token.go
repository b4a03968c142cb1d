package faultserver

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The token endpoint: an OAuth 2.0 auth server for the client-credentials
// grant with a private-key JWT client assertion (RFC 7523), as the SDK's
// WithOAuth uses it (docs/delivery.md R50). It is on when Options.Token is
// set. A token request is a form POST with grant_type=client_credentials,
// client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer,
// client_assertion=<JWT> and scope. The server verifies the assertion's RS256
// signature with TokenOptions.PublicKey and its claims; a request that fails
// verification is answered 401 {"error":"invalid_client"} whatever the
// script says. Token requests are recorded apart from the tracking API's
// requests (TokenRequests), so Requests and Delivered are unchanged.

// DefaultTokenPath is the token endpoint's path when TokenOptions.Path is
// empty.
const DefaultTokenPath = "/token"

// AssertionType is the client_assertion_type the token endpoint accepts.
const AssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// TokenOptions configures the token endpoint.
type TokenOptions struct {
	// Path is the endpoint's URL path (default DefaultTokenPath).
	Path string
	// PublicKey verifies the assertions' RS256 signatures. Required.
	PublicKey *rsa.PublicKey
	// ClientID, when set, must be the assertion's iss and sub.
	ClientID string
	// KeyID, when set, must be the assertion's kid header.
	KeyID string
	// Audience, when set, must be the assertion's aud; empty accepts any.
	Audience string
	// Scope, when set, must be the requested scope.
	Scope string
	// ExpiresIn is the expires_in of issued tokens, in seconds (default
	// 3600).
	ExpiresIn int
	// Script answers verified token requests by their index among verified
	// requests; the last entry repeats. A 200 entry with an empty Body
	// issues a fresh token ("fs-token-<n>", n counting issued tokens from
	// 1). Empty: always issue a token. Delay and CloseWithoutResponse work
	// as for the tracking API; TruncateBody and SwitchProtocols are not
	// served (the entry is answered as a plain response).
	Script []Response
	// RequireBearer makes the tracking API answer 401
	// {"code":"invalid_token"} (before Respond, Rules and Script) to a
	// request whose Authorization is not "Bearer <token>" with a token this
	// server issued and that has not expired. Request.Rejected is then
	// "invalid_token".
	RequireBearer bool
}

func (o *TokenOptions) path() string {
	if o.Path == "" {
		return DefaultTokenPath
	}
	return o.Path
}

// TokenRequest is the record of one token request.
type TokenRequest struct {
	// Index is the 0-based position among token requests.
	Index int
	// Arrived is when the handler started (monotonic).
	Arrived time.Time
	// Form holds the decoded form fields.
	Form url.Values
	// KeyID is the assertion's kid header.
	KeyID string
	// Claims holds the assertion's claims (also when verification failed,
	// if the JWT could be decoded at all).
	Claims map[string]any
	// Verified reports that the signature and the claims checked out.
	Verified bool
	// Problem says why verification failed; "" when Verified.
	Problem string
	// Status is the status answered; 0 when no status line was sent.
	Status int
	// Token is the access token issued; "" when none was.
	Token string

	finished bool // answered, or the connection was closed
}

// tokenState is the token endpoint's part of a Server, guarded by Server.mu.
type tokenState struct {
	reqs     []*TokenRequest
	verified int                  // verified requests: the script position
	issued   map[string]time.Time // token → expiry
}

// GenerateKey returns a new 2048-bit RSA key as PKCS #8 PEM (what the SDK's
// OAuthConfig.PrivateKey takes) and its public half (what
// TokenOptions.PublicKey takes), for tests and examples.
func GenerateKey() (privatePEM []byte, public *rsa.PublicKey, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, fmt.Errorf("faultserver: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("faultserver: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), &key.PublicKey, nil
}

// clone returns a copy of o whose Script may be kept while the caller's
// changes; nil for nil.
func (o *TokenOptions) clone() *TokenOptions {
	if o == nil {
		return nil
	}
	c := *o
	c.Script = append([]Response(nil), o.Script...)
	return &c
}

// serves reports whether r is for the token endpoint; a nil o (no token
// endpoint) serves nothing.
func (o *TokenOptions) serves(r *http.Request) bool {
	return o != nil && r.URL.Path == o.path()
}

// newTokenRequest reads and verifies a token request; the record says
// whether it checked out.
func newTokenRequest(r *http.Request, o *TokenOptions) *TokenRequest {
	arrived := time.Now()
	raw, _ := io.ReadAll(io.LimitReader(r.Body, maxReadBytes))
	form, _ := url.ParseQuery(string(raw))
	rec := &TokenRequest{Arrived: arrived, Form: form}
	rec.Problem = o.verify(r, form, rec)
	rec.Verified = rec.Problem == ""
	return rec
}

// answered records the status answered to the request.
func (r *TokenRequest) answered(status int) { r.Status = status }

// finish records that the server is done with the request.
func (r *TokenRequest) finish() { r.finished = true }

// answer records rec and decides its answer: a 401 when it failed
// verification, else the script's entry, with a fresh token in a 200 whose
// Body is empty. The caller holds Server.mu.
func (t *tokenState) answer(rec *TokenRequest, o *TokenOptions) Response {
	rec.Index = len(t.reqs)
	t.reqs = append(t.reqs, rec)
	if !rec.Verified {
		body, _ := json.Marshal(map[string]string{"error": "invalid_client", "error_description": rec.Problem})
		return Reply(http.StatusUnauthorized, string(body))
	}
	var resp Response
	if len(o.Script) > 0 {
		resp = pick(o.Script, t.verified)
	}
	t.verified++
	if resp.StatusCode() == http.StatusOK && resp.Body == "" && !resp.CloseWithoutResponse {
		if t.issued == nil {
			t.issued = make(map[string]time.Time)
		}
		expiresIn := o.ExpiresIn
		if expiresIn <= 0 {
			expiresIn = 3600
		}
		rec.Token = fmt.Sprintf("fs-token-%d", len(t.issued)+1)
		t.issued[rec.Token] = time.Now().Add(time.Duration(expiresIn) * time.Second)
		body, _ := json.Marshal(map[string]any{"access_token": rec.Token, "token_type": "Bearer", "expires_in": expiresIn, "scope": rec.Form.Get("scope")})
		resp.Body = string(body)
	}
	return resp
}

// records returns a copy of the records of all token requests so far. The
// caller holds Server.mu.
func (t *tokenState) records() []TokenRequest {
	out := make([]TokenRequest, len(t.reqs))
	for i, r := range t.reqs {
		out[i] = *r
	}
	return out
}

// finished reports whether at least n token requests have been answered
// (or abandoned). The caller holds Server.mu.
func (t *tokenState) finished(n int) bool {
	if len(t.reqs) < n {
		return false
	}
	for _, r := range t.reqs[:n] {
		if !r.finished {
			return false
		}
	}
	return true
}

// admits applies o.RequireBearer to a tracking API request whose
// Authorization header is authorization: false when the request has no
// token this endpoint issued that is unexpired at now. A nil o admits
// everything. The caller holds Server.mu.
func (t *tokenState) admits(o *TokenOptions, authorization string, now time.Time) bool {
	if o == nil || !o.RequireBearer {
		return true
	}
	token, found := strings.CutPrefix(authorization, "Bearer ")
	expiry, issued := t.issued[token]
	return found && issued && now.Before(expiry)
}

// verify checks the form and the client assertion of a token request; it
// returns "" when they are good, else what is wrong. It records the
// assertion's kid and claims in rec.
func (o *TokenOptions) verify(r *http.Request, form url.Values, rec *TokenRequest) string {
	if r.Method != http.MethodPost {
		return "method must be POST"
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		return "Content-Type must be application/x-www-form-urlencoded"
	}
	if form.Get("grant_type") != "client_credentials" {
		return "grant_type must be client_credentials"
	}
	if form.Get("client_assertion_type") != AssertionType {
		return "client_assertion_type must be " + AssertionType
	}
	if o.Scope != "" && form.Get("scope") != o.Scope {
		return "scope must be " + o.Scope
	}
	if o.PublicKey == nil {
		return "the server has no public key"
	}
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuedAt(), jwt.WithExpirationRequired(), jwt.WithLeeway(5*time.Second))
	claims := jwt.MapClaims{}
	tok, err := parser.ParseWithClaims(form.Get("client_assertion"), claims, func(t *jwt.Token) (any, error) {
		return o.PublicKey, nil
	})
	if tok != nil {
		rec.KeyID, _ = tok.Header["kid"].(string)
		rec.Claims = claims
	}
	if err != nil {
		return "client assertion rejected: " + err.Error()
	}
	if o.KeyID != "" && rec.KeyID != o.KeyID {
		return fmt.Sprintf("unknown kid %q", rec.KeyID)
	}
	iss, _ := claims["iss"].(string)
	sub, _ := claims["sub"].(string)
	if o.ClientID != "" && (iss != o.ClientID || sub != o.ClientID) {
		return fmt.Sprintf("iss %q and sub %q must be the client id", iss, sub)
	}
	if jti, _ := claims["jti"].(string); jti == "" {
		return "jti is missing"
	}
	if o.Audience != "" {
		aud, _ := claims.GetAudience()
		found := false
		for _, a := range aud {
			found = found || a == o.Audience
		}
		if !found {
			return fmt.Sprintf("aud %v must be %q", aud, o.Audience)
		}
	}
	return ""
}
