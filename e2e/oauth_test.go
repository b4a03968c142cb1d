package e2e

import (
	"crypto/rsa"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaykit/analytics-go/e2e/faultserver"
)

// OAuth end to end (R50): the e2e-cli with config.oauth against the
// faultserver's token endpoint, which verifies every client assertion's
// RS256 signature with the public key.

const (
	oauthClientID = "e2e-client"
	oauthKeyID    = "e2e-key"
)

var (
	oauthKeyOnce sync.Once
	oauthKeyPEM  []byte
	oauthPub     *rsa.PublicKey
	oauthKeyErr  error
)

func oauthKey(t testing.TB) ([]byte, *rsa.PublicKey) {
	t.Helper()
	oauthKeyOnce.Do(func() { oauthKeyPEM, oauthPub, oauthKeyErr = faultserver.GenerateKey() })
	if oauthKeyErr != nil {
		t.Fatalf("generate key: %v", oauthKeyErr)
	}
	return oauthKeyPEM, oauthPub
}

// runOAuthScenario is runScenario with the token endpoint on (tok; its
// PublicKey, ClientID and KeyID are filled in) and config.oauth
// pointing at it. A privateKeyPem already in sc's config.oauth is kept.
func runOAuthScenario(t testing.TB, sc scenario, tok faultserver.TokenOptions) *result {
	t.Helper()
	keyPEM, pub := oauthKey(t)
	tok.PublicKey, tok.ClientID, tok.KeyID = pub, oauthClientID, oauthKeyID
	sc.server.Token = &tok
	srv := serve(t, sc.respond, sc.server) // aud is checked by the tests: the URL is known only now
	in := sc.in
	in.APIHost = srv.URL()
	conf := map[string]any{}
	for k, v := range in.Config {
		conf[k] = v
	}
	o := map[string]any{"clientId": oauthClientID, "keyId": oauthKeyID, "privateKeyPem": string(keyPEM), "authServer": srv.URL()}
	if given, ok := conf["oauth"].(map[string]any); ok {
		for k, v := range given {
			o[k] = v
		}
	}
	conf["oauth"] = o
	in.Config = conf
	run := runCLI(t, in, sc.run)
	r := &result{cliRun: run, srv: srv, reqs: srv.settled(t)}
	if !sc.noInv {
		checkInvariants(t, r, sc.inv)
	}
	return r
}

// One token for every batch of every consumer; the server requires it.
func TestOAuthTokenReuse(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		idList := ids("oauth-reuse", 12)
		r := runOAuthScenario(t, scenario{
			in: input{Sequences: one(tracks(idList...)...), Config: cfg("flushAt", 1, "consumers", 4)},
		}, faultserver.TokenOptions{RequireBearer: true, Scope: "tracking_api:write"})
		expectAll(t, r, outDelivered)
		expectCount(t, r.reqs, 12)
		toks := r.srv.TokenRequests()
		if len(toks) != 1 || !toks[0].Verified {
			t.Fatalf("want one verified token request, got %+v", toks)
		}
		claims := toks[0].Claims
		if claims["iss"] != oauthClientID || claims["sub"] != oauthClientID || claims["aud"] != r.srv.URL() || toks[0].KeyID != oauthKeyID {
			t.Errorf("assertion kid %q claims %v", toks[0].KeyID, claims)
		}
		for _, q := range r.reqs {
			if q.Rejected != "" {
				t.Errorf("request #%d rejected: %s", q.Index, q.Rejected)
			}
		}
	})
}

// Transient token failures (503, then 429 with Retry-After: 1) are retried
// while the batch waits; it goes out once, with the token.
func TestOAuthTokenTransientFailures(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runOAuthScenario(t, scenario{
			in: input{Sequences: one(track("oauth-tr-1")), Config: cfg("flushAt", 1, "maxRetries", 0)},
		}, faultserver.TokenOptions{Script: []faultserver.Response{{Status: 503}, ra(429, "1"), {}}})
		expectOutcome(t, r, "oauth-tr-1", outDelivered, "", 200)
		reqs := r.batchReqs("oauth-tr-1")
		expectCount(t, reqs, 1)
		expectXRC(t, reqs, "")
		toks := r.srv.TokenRequests()
		if len(toks) != 3 {
			t.Fatalf("want 3 token requests, got %d", len(toks))
		}
		expectGapW(t, "token retry after 503", toks[1].Arrived.Sub(toks[0].Arrived), 1)
		expectGapAbout(t, "token retry after 429 Retry-After: 1", toks[2].Arrived.Sub(toks[1].Arrived), time.Second)
		if got := reqs[0].Header.Get("Authorization"); got != "Bearer "+toks[2].Token {
			t.Errorf("Authorization %q, want the token of the third request", got)
		}
	})
}

// A key the auth server does not know: the events fail with kind oauth,
// nothing is uploaded, and the run ends promptly.
func TestOAuthInvalidClient(t *testing.T) {
	t.Parallel()
	other, _, err := faultserver.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	retry(t, func(t testing.TB) {
		r := runOAuthScenario(t, scenario{
			in: input{Sequences: one(tracks("oauth-ic-1", "oauth-ic-2")...), Config: cfg("flushAt", 1,
				"oauth", map[string]any{"privateKeyPem": string(other)})},
		}, faultserver.TokenOptions{})
		expectCount(t, r.reqs, 0)
		for _, id := range []string{"oauth-ic-1", "oauth-ic-2"} {
			expectOutcome(t, r, id, outFailed, "oauth", -1)
			if e := r.ev(t, id); !strings.Contains(e.Error, "invalid_client") || !strings.Contains(e.Error, "KeyID") {
				t.Errorf("event %s: error %q should name invalid_client and what to check", id, e.Error)
			}
		}
		if toks := r.srv.TokenRequests(); len(toks) != 1 || toks[0].Verified {
			t.Errorf("want one rejected token request, got %d", len(toks))
		}
		if strings.Contains(r.stdout+r.stderr, "PRIVATE KEY") {
			t.Error("the private key reached the output")
		}
	})
}

// Close during a token wait hands the batch back within its deadline.
func TestOAuthCloseDuringTokenWait(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runOAuthScenario(t, scenario{
			in: input{Sequences: []sequence{{Events: tracks("oauth-cl-1")}}, Config: cfg("flushAt", 1, "closeTimeoutMs", 800)},
		}, faultserver.TokenOptions{Script: []faultserver.Response{{Status: 503}}})
		expectCount(t, r.reqs, 0)
		expectOutcome(t, r, "oauth-cl-1", outHandedBack, kindShutdown, -1)
		if d := r.end.Sub(r.start); d > 3*time.Second {
			timingf(t, "the run took %v with an 0.8 s Close deadline", d)
		}
	})
}

// 401 from the tracking API drops the token: the refused batch fails, the
// next one carries a new token.
func TestOAuth401Refetch(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runOAuthScenario(t, scenario{
			in: input{Sequences: []sequence{
				{Events: tracks("oauth-401-1"), Flush: true},
				{Events: tracks("oauth-401-2"), Flush: true},
			}, Config: cfg("flushAt", 1)},
			respond: script(faultserver.Reply(401, `{"message":"token expired"}`), ok200),
		}, faultserver.TokenOptions{})
		expectOutcome(t, r, "oauth-401-1", outFailed, kindNonRetryable, 401)
		expectOutcome(t, r, "oauth-401-2", outDelivered, "", 200)
		need(t, r.reqs, 2)
		expectCount(t, r.reqs, 2)
		if a, b := r.reqs[0].Header.Get("Authorization"), r.reqs[1].Header.Get("Authorization"); a != "Bearer fs-token-1" || b != "Bearer fs-token-2" {
			t.Errorf("Authorization %q then %q, want fs-token-1 then fs-token-2", a, b)
		}
	})
}

// With --debug the SDK logs, but never the key, an assertion or a token.
func TestOAuthDebugLogsNoSecrets(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runOAuthScenario(t, scenario{
			in:      input{Sequences: one(track("oauth-log-1")), Config: cfg("flushAt", 1)},
			respond: script(status(511), ok200),
			run:     runOptions{debug: true},
		}, faultserver.TokenOptions{})
		expectOutcome(t, r, "oauth-log-1", outDelivered, "", 200)
		if !strings.Contains(r.stderr, "oauth token obtained") {
			t.Errorf("want the token fetch in the debug log:\n%s", tail(r.stderr))
		}
		keyPEM, _ := oauthKey(t)
		lines := strings.Split(string(keyPEM), "\n")
		secrets := []string{"fs-token-", lines[len(lines)/2]}
		for _, tr := range r.srv.TokenRequests() {
			secrets = append(secrets, tr.Form.Get("client_assertion"))
		}
		for _, s := range secrets {
			if strings.Contains(r.stderr+r.stdout, s) {
				t.Errorf("a secret (%.12s…) reached the output", s)
			}
		}
	})
}

// The official Node client (@segment/analytics-node, e2e/node) and the
// e2e-cli, each with config.oauth against its own token endpoint: both
// token requests verify, with the same form fields, the same assertion
// header fields and claims, and both uploads carry the issued token. This
// is the wire format R50 follows.
func TestReferenceNodeOAuth(t *testing.T) {
	t.Parallel()
	node, refScript := nodeRef(t)
	needCLI(t)
	retry(t, func(t testing.TB) {
		sc := func() scenario {
			return scenario{in: input{Sequences: one(track("ref-oauth-1")), Config: cfg("flushAt", 1, "timeout", 10)}, noInv: true}
		}
		ours := runOAuthScenario(t, sc(), faultserver.TokenOptions{RequireBearer: true, Scope: "tracking_api:write"})

		keyPEM, pub := oauthKey(t)
		srv := serve(t, nil, faultserver.Options{Token: &faultserver.TokenOptions{
			PublicKey: pub, ClientID: oauthClientID, KeyID: oauthKeyID, RequireBearer: true, Scope: "tracking_api:write",
		}})
		in := sc().in
		in.WriteKey, in.APIHost = defaultWriteKey, srv.URL()
		in.Config["oauth"] = map[string]any{"clientId": oauthClientID, "keyId": oauthKeyID, "privateKeyPem": string(keyPEM), "authServer": srv.URL()}
		out, stderr := runNode(t, node, refScript, in)
		if !out.Success {
			t.Fatalf("node client did not deliver: %+v\n%s", out, stderr)
		}

		theirs := srv.TokenRequests()
		mine := ours.srv.TokenRequests()
		if len(theirs) == 0 || len(mine) == 0 {
			t.Fatalf("token requests: node %d, ours %d", len(theirs), len(mine))
		}
		a, b := theirs[0], mine[0]
		if !a.Verified || !b.Verified {
			t.Errorf("verified: node %v (%s), ours %v (%s)", a.Verified, a.Problem, b.Verified, b.Problem)
		}
		if ka, kb := formKeys(a), formKeys(b); ka != kb {
			t.Errorf("form fields: node %s, ours %s", ka, kb)
		}
		for _, k := range []string{"grant_type", "client_assertion_type", "scope"} {
			if a.Form.Get(k) != b.Form.Get(k) {
				t.Errorf("form %s: node %q, ours %q", k, a.Form.Get(k), b.Form.Get(k))
			}
		}
		if ca, cb := claimKeys(a.Claims), claimKeys(b.Claims); ca != cb {
			t.Errorf("assertion claims: node %s, ours %s", ca, cb)
		}
		for _, k := range []string{"iss", "sub"} {
			if a.Claims[k] != b.Claims[k] {
				t.Errorf("claim %s: node %v, ours %v", k, a.Claims[k], b.Claims[k])
			}
		}
		if a.KeyID != b.KeyID {
			t.Errorf("kid: node %q, ours %q", a.KeyID, b.KeyID)
		}
		for who, reqs := range map[string][]faultserver.Request{"node": srv.settled(t), "ours": ours.reqs} {
			if len(reqs) == 0 {
				t.Errorf("%s: no upload", who)
			}
			for _, q := range reqs {
				if q.Rejected != "" || !strings.HasPrefix(q.Header.Get("Authorization"), "Bearer fs-token-") {
					t.Errorf("%s: upload #%d Authorization %q rejected %q", who, q.Index, q.Header.Get("Authorization"), q.Rejected)
				}
			}
		}
	})
}

func formKeys(r faultserver.TokenRequest) string {
	keys := make([]string, 0, len(r.Form))
	for k := range r.Form {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func claimKeys(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}
