package analytics_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticstest"
	"github.com/relaykit/analytics-go/e2e/faultserver"
)

// The examples send to a recording endpoint on 127.0.0.1 started by
// analyticstest, so they run anywhere; a real program passes its write key
// and, if it is not the default, its endpoint.

// Create a client once, send events from anywhere, and Close it with a
// deadline at shutdown.
func Example() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	client, err := analytics.New("WRITE_KEY",
		analytics.WithEndpoint(srv.URL()), // omit for the default endpoint
		analytics.WithOnError(func(err error, events []analytics.Message) {
			fmt.Printf("%d event(s) not delivered: %v\n", len(events), err)
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}

	if err := client.Track(analytics.Track{
		UserID:     "user-42",
		Event:      "Order Completed",
		Properties: analytics.Properties{"revenue": 39.95, "currency": "EUR"},
	}); err != nil {
		fmt.Println("track:", err) // rejected: never sent, no callback
	}
	if err := client.Identify(analytics.Identify{
		UserID: "user-42",
		Traits: analytics.Traits{"plan": "pro"},
	}); err != nil {
		fmt.Println("identify:", err)
	}

	// At shutdown: deliver what is queued, but wait at most 10 s.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Close(ctx); err != nil {
		fmt.Println("close:", err)
	}

	for _, e := range srv.Events() {
		fmt.Println(e["type"], e["userId"])
	}
	// Output:
	// track user-42
	// identify user-42
}

// Flush waits until everything enqueued before it has been delivered (or
// has failed), without closing the client: for example at the end of a
// batch job step or of a serverless invocation.
func ExampleClient_Flush() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	client, err := analytics.New("WRITE_KEY", analytics.WithEndpoint(srv.URL()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close(context.Background())

	for _, page := range []string{"Home", "Pricing", "Sign Up"} {
		_ = client.Page(analytics.Page{AnonymousID: "anon-7", Name: page})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Flush(ctx); err != nil {
		fmt.Println("flush:", err)
	}
	fmt.Println("received:", len(srv.Events()), "delivered:", client.Stats().Delivered)
	// Output:
	// received: 3 delivered: 3
}

// When Close's deadline passes before every event got a disposition, the
// remaining events are handed back through OnError with an error matching
// ErrShutdownInterrupted, and Close says how many. Here the endpoint holds
// its response longer than the 200 ms deadline.
func ExampleClient_Close() {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done(): // the client cancelled the request
		}
	}))
	defer srv.Close()
	defer close(release)

	var (
		mu         sync.Mutex
		handedBack int
	)
	client, err := analytics.New("WRITE_KEY",
		analytics.WithEndpoint(srv.URL),
		analytics.WithOnError(func(err error, events []analytics.Message) {
			if errors.Is(err, analytics.ErrShutdownInterrupted) {
				mu.Lock()
				handedBack += len(events) // not a delivery failure: keep or re-send them
				mu.Unlock()
			}
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = client.Track(analytics.Track{UserID: "user-42", Event: "Report Exported"})
	_ = client.Track(analytics.Track{UserID: "user-42", Event: "Logged Out"})

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = client.Close(ctx)
	fmt.Println("shutdown interrupted:", errors.Is(err, analytics.ErrShutdownInterrupted))
	mu.Lock()
	fmt.Println("handed back:", handedBack)
	mu.Unlock()
	fmt.Println("second Close:", client.Close(context.Background()))
	// Output:
	// shutdown interrupted: true
	// handed back: 2
	// second Close: analytics: client closed
}

// OnError receives events that were not delivered. errors.As finds the
// server's answer; a 400 is not retried.
func ExampleWithOnError() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	srv.SetResponse(http.StatusBadRequest, `{"message":"invalid write key"}`)

	client, err := analytics.New("WRITE_KEY",
		analytics.WithEndpoint(srv.URL()),
		analytics.WithOnError(func(err error, events []analytics.Message) {
			// Runs on a consumer goroutine: keep it short, never block.
			var he *analytics.HTTPError
			if errors.As(err, &he) {
				fmt.Printf("%d event(s) failed: status %d (%s): %s\n", len(events), he.StatusCode, he.Kind, he.Message)
			}
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = client.Track(analytics.Track{UserID: "user-42", Event: "Signed Up"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("close:", client.Close(ctx)) // failures are reported through OnError only
	fmt.Println("requests:", len(srv.Requests()))
	// Output:
	// 1 event(s) failed: status 400 (non-retryable): invalid write key
	// close: <nil>
	// requests: 1
}

// A custom *http.Client sets a proxy, TLS settings or connection limits.
// The client is copied; the SDK adds its redirect policy to the copy and
// bounds each attempt with WithHTTPTimeout.
func ExampleWithHTTPClient() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	transport := &http.Transport{
		// A fixed proxy would be http.ProxyURL(proxyURL), and
		// http.ProxyFromEnvironment honours HTTPS_PROXY and NO_PROXY.
		// ProxyURL(nil) connects directly.
		Proxy:               http.ProxyURL(nil),
		MaxIdleConnsPerHost: 4,
	}
	defer transport.CloseIdleConnections()
	httpClient := &http.Client{Transport: transport, Timeout: 30 * time.Second}

	client, err := analytics.New("WRITE_KEY",
		analytics.WithEndpoint(srv.URL()),
		analytics.WithHTTPClient(httpClient),
		analytics.WithHTTPTimeout(5*time.Second), // per attempt
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = client.Group(analytics.Group{UserID: "user-42", GroupID: "acme", Traits: analytics.Traits{"seats": 12}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = client.Close(ctx)

	cfg := client.Config()
	fmt.Println("custom client:", cfg.CustomHTTPClient, "attempt timeout:", cfg.HTTPTimeout)
	fmt.Println("delivered:", client.Stats().Delivered)
	// Output:
	// custom client: true attempt timeout: 5s
	// delivered: 1
}

// WithGzip compresses request bodies and sends Content-Encoding: gzip.
func ExampleWithGzip() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	client, err := analytics.New("WRITE_KEY", analytics.WithEndpoint(srv.URL()), analytics.WithGzip(true))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = client.Screen(analytics.Screen{UserID: "user-42", Name: "Settings"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = client.Close(ctx)

	for _, r := range srv.Requests() {
		fmt.Println("Content-Encoding:", r.Header.Get("Content-Encoding"), "events:", len(r.Events))
	}
	// Output:
	// Content-Encoding: gzip events: 1
}

// The client is silent by default. With a zap logger it reports failures,
// hand-backs, queue-full drops and unparseable Retry-After headers; it never
// logs the write key or event payloads. zap.NewExample writes JSON to
// stdout without timestamps; a service would pass its own logger, for
// example from zap.NewProduction.
func ExampleWithLogger() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	srv.SetResponse(http.StatusForbidden, `{"message":"source disabled"}`)

	// Warnings and errors only: debug lines carry the random port.
	logger := zap.NewExample(zap.IncreaseLevel(zap.WarnLevel))
	defer func() { _ = logger.Sync() }()

	client, err := analytics.New("WRITE_KEY", analytics.WithEndpoint(srv.URL()), analytics.WithLogger(logger))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = client.Track(analytics.Track{UserID: "user-42", Event: "Signed Up", Properties: analytics.Properties{"email": "ada@example.com"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = client.Close(ctx)
	// Output:
	// {"level":"error","msg":"events not delivered","events":1,"error":"analytics: non-retryable response 403 Forbidden: source disabled (check the write key)"}
}

// EnqueueContext is the blocking mode for backfills and batch jobs that must
// not drop events: when the queue is full it waits for room instead of
// returning ErrQueueFull, until its context ends. Track and the other
// methods never block.
func ExampleClient_EnqueueContext() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	client, err := analytics.New("WRITE_KEY",
		analytics.WithEndpoint(srv.URL()),
		analytics.WithQueueCapacity(10), // small, so that the backfill has to wait
		analytics.WithFlushAt(20),
	)
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 100; i++ {
		err := client.EnqueueContext(ctx, analytics.Track{
			UserID:    fmt.Sprintf("user-%d", i),
			Event:     "Order Imported",
			Timestamp: time.Date(2025, 1, 1, 0, i, 0, 0, time.UTC), // historical
		})
		if err != nil { // ctx ended (matches ErrQueueFull and ctx.Err()) or closed
			fmt.Println("backfill stopped:", err)
			break
		}
	}
	if err := client.Close(ctx); err != nil {
		fmt.Println("close:", err)
	}
	st := client.Stats()
	fmt.Println("received:", len(srv.Events()), "delivered:", st.Delivered, "dropped:", st.RejectedQueueFull)
	// Output:
	// received: 100 delivered: 100 dropped: 0
}

// Default context and properties are merged into every event; the event's
// own keys win.
func ExampleWithDefaultContext() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	client, err := analytics.New("WRITE_KEY", analytics.WithEndpoint(srv.URL()),
		analytics.WithDefaultContext(map[string]any{"app": map[string]any{"name": "shop", "version": "1.2.3"}}),
		analytics.WithDefaultProperties(map[string]any{"env": "prod", "plan": "free"}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = client.Track(analytics.Track{UserID: "user-42", Event: "Signed Up", Properties: analytics.Properties{"plan": "pro"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Close(ctx); err != nil {
		fmt.Println("Close:", err)
	}

	tr := srv.Tracks()[0]
	fmt.Println(tr.Properties["env"], tr.Properties["plan"], tr.Context["app"].(map[string]any)["name"])
	// Output:
	// prod pro shop
}

// WithSlog sends the client's logs to a log/slog logger.
func ExampleWithSlog() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := analytics.New("WRITE_KEY", analytics.WithSlog(logger))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = client.Close(context.Background()) }()
	// …
}

// Send with an OAuth 2.0 token instead of the write key's credentials. Here
// the auth server and the tracking API are the repository's fault server,
// which verifies the client assertion's signature and refuses uploads
// without a token it issued; a real program reads its PEM key from a file
// or a secret store and leaves AuthServer empty (Segment's).
func ExampleWithOAuth() {
	key, pub, err := faultserver.GenerateKey()
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := faultserver.Start(faultserver.Options{Token: &faultserver.TokenOptions{
		PublicKey: pub, ClientID: "my-client", KeyID: "my-key", RequireBearer: true,
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	client, err := analytics.New("my-write-key",
		analytics.WithEndpoint(srv.URL()),
		analytics.WithOAuth(analytics.OAuthConfig{
			ClientID:   "my-client",
			KeyID:      "my-key",
			PrivateKey: key,            // PEM, RSA (PKCS #1 or #8)
			AuthServer: srv.TokenURL(), // empty: https://oauth2.segment.io
		}),
		analytics.WithOnError(func(err error, events []analytics.Message) {
			if errors.Is(err, analytics.ErrOAuth) {
				fmt.Println("no token:", err) // an *OAuthError says what to check
			}
		}),
	)
	if err != nil {
		fmt.Println(err) // a bad key fails here: *ConfigError, Field "OAuth.PrivateKey"
		return
	}
	_ = client.Track(analytics.Track{UserID: "user-42", Event: "Signed Up"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Close(ctx); err != nil {
		fmt.Println(err)
	}
	tok := srv.TokenRequests()[0]
	fmt.Println("assertion verified:", tok.Verified, "kid:", tok.KeyID)
	fmt.Println("upload answered:", srv.Requests()[0].Status)
	// Output:
	// assertion verified: true kid: my-key
	// upload answered: 200
}

// Dead letters: OnError writes the events it gets as JSON lines (here to a
// bytes.Buffer; in a service, a file opened with os.O_APPEND), and the next
// start reads them back with UnmarshalMessage and enqueues them again. They
// keep their messageId and timestamp, so the API drops any repeat.
func ExampleUnmarshalMessage() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	srv.SetResponse(http.StatusServiceUnavailable, `{}`) // the API is down

	var (
		mu         sync.Mutex
		deadLetter bytes.Buffer // a file in a real service
	)
	client, err := analytics.New("WRITE_KEY",
		analytics.WithEndpoint(srv.URL()),
		analytics.WithMaxRetries(0), // give up at once, for the example
		analytics.WithOnError(func(err error, events []analytics.Message) {
			mu.Lock()
			defer mu.Unlock()
			enc := json.NewEncoder(&deadLetter) // one JSON object per line
			for _, m := range events {
				_ = enc.Encode(m) // handle the error in real code
			}
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = client.Track(analytics.Track{UserID: "user-42", Event: "Order Completed",
		Properties: analytics.Properties{"order_id": 1001, "total": 129.5}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = client.Close(ctx)
	firstID := srv.Requests()[0].Events[0]["messageId"]

	// The next start: the API is back.
	srv.SetResponse(http.StatusOK, `{}`)
	client, err = analytics.New("WRITE_KEY", analytics.WithEndpoint(srv.URL()))
	if err != nil {
		fmt.Println(err)
		return
	}
	lines := bufio.NewScanner(&deadLetter)
	for lines.Scan() {
		m, err := analytics.UnmarshalMessage(lines.Bytes())
		if err != nil {
			fmt.Println("skipping a line:", err)
			continue
		}
		if err := client.Enqueue(m); err != nil {
			fmt.Println("not enqueued:", err)
		}
	}
	_ = client.Close(ctx)
	for _, tr := range srv.Tracks() {
		fmt.Println("delivered:", tr.Event, tr.Properties["order_id"], tr.MessageID == firstID)
	}
	// Output:
	// delivered: Order Completed 1001 true
}
