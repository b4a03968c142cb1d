// Command quickstart sends a few events with github.com/relaykit/analytics-go
// and prints what happened to them.
//
//	go run ./examples/quickstart
//
// With no configuration it needs no account and no network: it starts a
// recording tracking endpoint on 127.0.0.1 and prints what that endpoint
// received. To send to a real source instead, set both variables:
//
//	ANALYTICS_WRITE_KEY=<write key> ANALYTICS_ENDPOINT=https://api.segment.io go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticstest"
)

func main() {
	if err := run(os.Stdout, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run sends the events and reports to w. getenv reads the configuration
// (os.Getenv in main).
func run(w io.Writer, getenv func(string) string) error {
	writeKey, endpoint := getenv("ANALYTICS_WRITE_KEY"), getenv("ANALYTICS_ENDPOINT")
	var local *analyticstest.Server
	switch {
	case writeKey == "" && endpoint == "":
		srv, err := analyticstest.StartServer()
		if err != nil {
			return err
		}
		defer srv.Close()
		local, writeKey, endpoint = srv, "quickstart-write-key", srv.URL()
		fmt.Fprintf(w, "ANALYTICS_WRITE_KEY and ANALYTICS_ENDPOINT are not set: sending to a local test endpoint at %s\n", endpoint)
	case writeKey == "" || endpoint == "":
		return errors.New("set both ANALYTICS_WRITE_KEY and ANALYTICS_ENDPOINT, or neither to use a local test endpoint")
	default:
		fmt.Fprintf(w, "sending to %s\n", endpoint)
	}

	// Callbacks run on the client's goroutines: keep them short.
	var (
		mu       sync.Mutex
		failures []string
	)
	client, err := analytics.New(writeKey,
		analytics.WithEndpoint(endpoint),
		analytics.WithOnError(func(err error, events []analytics.Message) {
			mu.Lock()
			defer mu.Unlock()
			failures = append(failures, fmt.Sprintf("%d event(s): %v", len(events), err))
		}),
	)
	if err != nil {
		return err
	}

	events := []analytics.Message{
		analytics.Identify{UserID: "user-42", Traits: analytics.Traits{"name": "Ada Lovelace", "plan": "pro"}},
		analytics.Track{UserID: "user-42", Event: "Signed Up", Properties: analytics.Properties{"plan": "pro"}},
		analytics.Page{UserID: "user-42", Name: "Pricing", Properties: analytics.Properties{"path": "/pricing"}},
		analytics.Track{UserID: "user-42", Event: "Order Completed", Properties: analytics.Properties{"revenue": 39.95, "currency": "EUR"}},
	}
	for _, e := range events {
		if err := client.Enqueue(e); err != nil {
			fmt.Fprintf(w, "rejected %s: %v\n", e.Type(), err) // never sent, no callback
		}
	}

	// Shutdown: deliver what is queued, but wait at most 10 s.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closeErr := client.Close(ctx)

	st := client.Stats()
	fmt.Fprintf(w, "delivered %d, failed %d, handed back %d, in %d request(s)\n", st.Delivered, st.Failed, st.HandedBack, st.Requests)
	mu.Lock()
	for _, f := range failures {
		fmt.Fprintln(w, "not delivered:", f)
	}
	mu.Unlock()
	if closeErr != nil {
		return fmt.Errorf("close: %w", closeErr)
	}
	if local != nil {
		report(w, local)
	}
	if st.Failed > 0 {
		return fmt.Errorf("%d event(s) were not delivered", st.Failed)
	}
	return nil
}

// report prints what the local endpoint received.
func report(w io.Writer, srv *analyticstest.Server) {
	for i, r := range srv.Requests() {
		fmt.Fprintf(w, "request %d: %s %s, User-Agent %s, answered %d, %d event(s):\n",
			i+1, r.Method, r.Path, r.Header.Get("User-Agent"), r.Status, len(r.Events))
		for _, e := range r.Events {
			fmt.Fprintf(w, "  %-8s %-18s messageId=%v %s\n", e["type"], label(e), e["messageId"], fields(e))
		}
	}
}

// label is the event name of a track or the page name of a page.
func label(e map[string]any) string {
	for _, k := range []string{"event", "name"} {
		if s, ok := e[k].(string); ok {
			return fmt.Sprintf("%q", s)
		}
	}
	return ""
}

// fields renders the properties or traits in key order.
func fields(e map[string]any) string {
	for _, k := range []string{"properties", "traits"} {
		m, ok := e[k].(map[string]any)
		if !ok {
			continue
		}
		keys := make([]string, 0, len(m))
		for key := range m {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		s := k + ":"
		for _, key := range keys {
			s += fmt.Sprintf(" %s=%v", key, m[key])
		}
		return s
	}
	return ""
}
