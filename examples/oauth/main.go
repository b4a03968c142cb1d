// Command oauth sends events with OAuth 2.0 instead of the write key's Basic
// credentials (analytics.WithOAuth).
//
//	go run ./examples/oauth
//
// With no configuration it needs no account and no network: it starts the
// repository's fault server on 127.0.0.1 with its token endpoint on (which
// verifies the RS256 signature of every client assertion and refuses
// uploads without a token it issued), makes a fresh RSA key, and prints
// what the servers saw. To use a real workspace instead, set:
//
//	ANALYTICS_WRITE_KEY=<write key>
//	ANALYTICS_OAUTH_CLIENT_ID=<OAuth app client id>
//	ANALYTICS_OAUTH_KEY_ID=<id of the public key registered with the app>
//	ANALYTICS_OAUTH_PRIVATE_KEY_FILE=<path of the PEM private key>
//	ANALYTICS_ENDPOINT=https://api.segment.io      (optional)
//	ANALYTICS_OAUTH_AUTH_SERVER=https://oauth2.segment.io (optional)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/e2e/faultserver"
)

func main() {
	if err := run(os.Stdout, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "oauth:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, getenv func(string) string) error {
	writeKey, endpoint := getenv("ANALYTICS_WRITE_KEY"), getenv("ANALYTICS_ENDPOINT")
	oauth := analytics.OAuthConfig{
		ClientID:   getenv("ANALYTICS_OAUTH_CLIENT_ID"),
		KeyID:      getenv("ANALYTICS_OAUTH_KEY_ID"),
		AuthServer: getenv("ANALYTICS_OAUTH_AUTH_SERVER"), // empty: Segment's
	}
	var local *faultserver.Server
	if writeKey == "" {
		key, pub, err := faultserver.GenerateKey()
		if err != nil {
			return err
		}
		srv, err := faultserver.Start(faultserver.Options{Token: &faultserver.TokenOptions{
			PublicKey: pub, ClientID: "example-client", KeyID: "example-key", RequireBearer: true,
		}})
		if err != nil {
			return err
		}
		defer srv.Close()
		local, writeKey, endpoint = srv, "example-write-key", srv.URL()
		oauth.ClientID, oauth.KeyID, oauth.PrivateKey, oauth.AuthServer = "example-client", "example-key", key, srv.TokenURL()
		fmt.Fprintln(w, "ANALYTICS_WRITE_KEY is not set: using a local fault server with a token endpoint")
	} else {
		path := getenv("ANALYTICS_OAUTH_PRIVATE_KEY_FILE")
		if path == "" {
			return errors.New("set ANALYTICS_OAUTH_PRIVATE_KEY_FILE (and the client and key ids) with ANALYTICS_WRITE_KEY")
		}
		key, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		oauth.PrivateKey = key
	}

	var (
		mu       sync.Mutex
		failures []string
	)
	opts := []analytics.Option{
		analytics.WithOAuth(oauth), // checked by New: a bad key fails here, naming OAuth.PrivateKey
		analytics.WithOnError(func(err error, events []analytics.Message) {
			mu.Lock()
			defer mu.Unlock()
			// An *OAuthError (errors.Is(err, analytics.ErrOAuth)) says what to check.
			failures = append(failures, fmt.Sprintf("%d event(s): %v", len(events), err))
		}),
	}
	if endpoint != "" {
		opts = append(opts, analytics.WithEndpoint(endpoint))
	}
	client, err := analytics.New(writeKey, opts...)
	if err != nil {
		return err
	}
	for _, e := range []analytics.Message{
		analytics.Identify{UserID: "user-42", Traits: analytics.Traits{"plan": "pro"}},
		analytics.Track{UserID: "user-42", Event: "Signed Up"},
		analytics.Track{UserID: "user-42", Event: "Order Completed", Properties: analytics.Properties{"revenue": 39.95}},
	} {
		if err := client.Enqueue(e); err != nil {
			fmt.Fprintf(w, "rejected %s: %v\n", e.Type(), err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closeErr := client.Close(ctx)

	st := client.Stats()
	fmt.Fprintf(w, "delivered %d, failed %d, handed back %d\n", st.Delivered, st.Failed, st.HandedBack)
	for _, f := range failures {
		fmt.Fprintln(w, "not delivered:", f)
	}
	if local != nil {
		report(w, local)
	}
	if closeErr != nil {
		return fmt.Errorf("close: %w", closeErr)
	}
	if st.Failed > 0 {
		return fmt.Errorf("%d event(s) were not delivered", st.Failed)
	}
	return nil
}

// report prints what the local servers saw, without the tokens themselves.
func report(w io.Writer, srv *faultserver.Server) {
	for _, t := range srv.TokenRequests() {
		fmt.Fprintf(w, "token request %d: grant_type=%s, assertion signature verified: %t, kid=%v, answered %d\n",
			t.Index+1, t.Form.Get("grant_type"), t.Verified, t.KeyID, t.Status)
	}
	for _, r := range srv.Requests() {
		auth, _, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		fmt.Fprintf(w, "upload %d: %s %s, Authorization: %s <token>, %d event(s), answered %d\n",
			r.Index+1, r.Method, r.Path, auth, len(r.MessageIDs), r.Status)
	}
}
