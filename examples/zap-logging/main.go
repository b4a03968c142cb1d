// Command zap-logging shows what the SDK logs, with zap's development
// logger (console format, debug level, on stderr), during a run against a
// local fault-injecting server that rate limits, fails and rejects:
//
//   - batch 1 (order-1…order-3): 429 Retry-After: 1, then 500, then 429 with
//     an unparseable Retry-After ("soon": a warning with the raw value), then
//     200 — delivered;
//   - batch 2 (bad-1): 400 with an error body — failed, logged as an error
//     with the server's message.
//
// The program's own results go to stdout; the SDK's logs go to stderr.
//
//	go run ./examples/zap-logging
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/e2e/faultserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "zap-logging:", err)
		os.Exit(1)
	}
}

func run() error {
	logger, err := zap.NewDevelopment()
	if err != nil {
		return err
	}
	defer func() { _ = logger.Sync() }()

	srv, err := faultserver.Start(faultserver.Options{
		Rules: []faultserver.Rule{{
			MessageID: "bad-1",
			Responses: []faultserver.Response{faultserver.Reply(400, `{"code":"invalid_payload","message":"event bad-1 is malformed"}`)},
		}},
		Script: []faultserver.Response{
			faultserver.RetryAfter(429, "1"),
			{Status: 500, Body: `{"message":"internal error"}`},
			faultserver.RetryAfter(429, "soon"),
			{Status: 200, Body: "{}"},
		},
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	var (
		mu      sync.Mutex
		results []string
	)
	client, err := analytics.New("example-write-key",
		analytics.WithEndpoint(srv.URL()),
		analytics.WithLogger(logger.Named("analytics")),
		analytics.WithFlushAt(3),
		analytics.WithConsumers(1),
		analytics.WithMaxRetries(3),
		analytics.WithOnSuccess(func(msgs []analytics.Message) {
			mu.Lock()
			defer mu.Unlock()
			results = append(results, "delivered: "+join(msgs))
		}),
		analytics.WithOnError(func(err error, msgs []analytics.Message) {
			mu.Lock()
			defer mu.Unlock()
			var httpErr *analytics.HTTPError
			if errors.As(err, &httpErr) {
				results = append(results, fmt.Sprintf("failed: %s (HTTP %d, %s)", join(msgs), httpErr.StatusCode, httpErr.Kind))
				return
			}
			results = append(results, "not delivered: "+join(msgs))
		}),
	)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 1; i <= 3; i++ {
		if err := client.Track(analytics.Track{MessageID: fmt.Sprintf("order-%d", i), UserID: "user-42", Event: "Order Completed"}); err != nil {
			return err
		}
	}
	if err := client.Flush(ctx); err != nil {
		return err
	}
	if err := client.Track(analytics.Track{MessageID: "bad-1", UserID: "user-42", Event: "Order Completed"}); err != nil {
		return err
	}
	if err := client.Close(ctx); err != nil {
		return err
	}

	mu.Lock()
	defer mu.Unlock()
	for _, r := range results {
		fmt.Println(r)
	}
	st := client.Stats()
	fmt.Printf("requests: %d, counted retries: %d, rate-limited responses: %d\n", st.Requests, st.Retries, st.RateLimited)
	return nil
}

func join(msgs []analytics.Message) string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID()
	}
	return strings.Join(ids, " ")
}
