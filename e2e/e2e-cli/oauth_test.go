package main

import (
	"strings"
	"testing"

	"github.com/relaykit/analytics-go/e2e/faultserver"
)

func oauthServer(t *testing.T) (*faultserver.Server, []byte) {
	t.Helper()
	priv, pub, err := faultserver.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	fs, err := faultserver.Start(faultserver.Options{Token: &faultserver.TokenOptions{
		PublicKey: pub, ClientID: "cli-client", KeyID: "cli-key", Scope: "tracking_api:write", RequireBearer: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fs.Close)
	return fs, priv
}

// config.oauth turns on OAuth: uploads carry the token the auth server
// issued for a verified assertion.
func TestOAuthConfig(t *testing.T) {
	fs, priv := oauthServer(t)
	cfg := map[string]any{"flushAt": 1, "oauth": map[string]any{
		"clientId": "cli-client", "keyId": "cli-key", "privateKeyPem": string(priv), "authServer": fs.TokenURL(),
	}}
	res := runCLI(t, "", "--input", input(t, fs.URL(), cfg, seq(track("o1"), track("o2"))))
	if !res.out.Success || res.out.Delivered != 2 {
		t.Fatalf("want both delivered: %s (stderr %s)", res.line, res.stderr)
	}
	toks := fs.TokenRequests()
	if len(toks) != 1 || !toks[0].Verified {
		t.Fatalf("want one verified token request, got %+v", toks)
	}
	for _, r := range fs.Requests() {
		if got := r.Header.Get("Authorization"); got != "Bearer "+toks[0].Token {
			t.Errorf("request %d Authorization %q", r.Index, got)
		}
	}
}

// A key the auth server does not know fails the events with kind oauth.
func TestOAuthInvalidClient(t *testing.T) {
	fs, _ := oauthServer(t)
	other, _, err := faultserver.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"oauth": map[string]any{
		"clientId": "cli-client", "keyId": "cli-key", "privateKeyPem": string(other), "authServer": fs.TokenURL(),
	}}
	res := runCLI(t, "", "--input", input(t, fs.URL(), cfg, seq(track("o1"))))
	if res.out.Success || len(res.out.Events) != 1 {
		t.Fatalf("want a failure: %s", res.line)
	}
	ev := res.out.Events[0]
	if ev.Outcome != "failed" || ev.Kind != "oauth" || !strings.Contains(ev.Error, "invalid_client") {
		t.Errorf("event %+v: want failed, kind oauth, invalid_client", ev)
	}
	if strings.Contains(res.line+res.stderr, "PRIVATE KEY") {
		t.Error("the key leaked into the output")
	}
	if n := len(fs.Requests()); n != 0 {
		t.Errorf("%d uploads without a token", n)
	}
}

// Bad config.oauth values are rejected before any request, naming the field.
func TestOAuthInvalidConfig(t *testing.T) {
	fs, priv := oauthServer(t)
	good := func() map[string]any {
		return map[string]any{"clientId": "c", "keyId": "k", "privateKeyPem": string(priv), "authServer": fs.TokenURL()}
	}
	cases := []struct {
		name  string
		edit  func(m map[string]any) any
		field string
	}{
		{"not an object", func(map[string]any) any { return "x" }, "config.oauth"},
		{"clientId number", func(m map[string]any) any { m["clientId"] = 5; return m }, "config.oauth.clientId"},
		{"no clientId", func(m map[string]any) any { delete(m, "clientId"); return m }, "config.oauth.clientId"},
		{"no keyId", func(m map[string]any) any { delete(m, "keyId"); return m }, "config.oauth.keyId"},
		{"bad pem", func(m map[string]any) any { m["privateKeyPem"] = "not a key"; return m }, "config.oauth.privateKeyPem"},
		{"bad authServer", func(m map[string]any) any { m["authServer"] = "ftp://x"; return m }, "config.oauth.authServer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := map[string]any{"oauth": tc.edit(good())}
			res := runCLI(t, "", "--input", input(t, fs.URL(), cfg, seq(track(""))))
			assertFailureShape(t, res, tc.field)
			if len(fs.Requests())+len(fs.TokenRequests()) != 0 {
				t.Error("requests for an invalid config")
			}
		})
	}
}
