// Command http-server is an HTTP server that tracks one event per request
// with github.com/relaykit/analytics-go and shuts down without losing them.
//
// On SIGTERM (what orchestrators send) or Ctrl-C it stops in this order:
//
//  1. http.Server.Shutdown with a deadline: no new requests, and the
//     handlers still running finish, so their events are enqueued;
//  2. analytics Client.Close with a deadline: what is queued is uploaded,
//     and whatever has no outcome when the deadline ends is handed back.
//
// Closing the client first would make the last handlers' Track calls fail
// with ErrClosed.
//
// With no configuration it sends to a local recording endpoint on
// 127.0.0.1 and prints how many events that endpoint received. To send to a
// real source, set both variables:
//
//	ANALYTICS_WRITE_KEY=<write key> ANALYTICS_ENDPOINT=https://api.segment.io go run ./examples/http-server
//
// Then, from another terminal:
//
//	curl -H 'X-User-ID: user-42' http://127.0.0.1:8080/pricing
//	kill -TERM <pid>   # or Ctrl-C
//
// With -dead-letters file, the events that were not delivered (failed, or
// handed back at the Close deadline) are kept in file, one JSON object per
// line, and sent again at the next start with their messageId and
// timestamp (see deadletters.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticstest"
)

func main() {
	if err := run(); err != nil {
		log.Printf("http-server: %v", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	shutdownTimeout := flag.Duration("shutdown-timeout", 10*time.Second, "how long in-flight HTTP requests may take to finish at shutdown")
	closeTimeout := flag.Duration("close-timeout", 10*time.Second, "how long the analytics client may take to deliver what is queued at shutdown")
	deadLetterPath := flag.String("dead-letters", "", "file where undelivered events are kept, one JSON object per line, and sent again at the next start (default: off)")
	flag.Parse()

	writeKey, endpoint := os.Getenv("ANALYTICS_WRITE_KEY"), os.Getenv("ANALYTICS_ENDPOINT")
	var local *analyticstest.Server
	switch {
	case writeKey == "" && endpoint == "":
		srv, err := analyticstest.StartServer()
		if err != nil {
			return err
		}
		defer srv.Close()
		local, writeKey, endpoint = srv, "example-write-key", srv.URL()
		log.Printf("ANALYTICS_WRITE_KEY and ANALYTICS_ENDPOINT are not set: sending to a local test endpoint at %s", endpoint)
	case writeKey == "" || endpoint == "":
		return errors.New("set both ANALYTICS_WRITE_KEY and ANALYTICS_ENDPOINT, or neither to use a local test endpoint")
	}

	var (
		dead   *deadLetters
		resend []analytics.Message
	)
	if *deadLetterPath != "" {
		var err error
		if dead, resend, err = openDeadLetters(*deadLetterPath); err != nil {
			return err
		}
	}

	// One client for the whole process, shared by every request.
	client, err := analytics.New(writeKey,
		analytics.WithEndpoint(endpoint),
		analytics.WithOnError(func(err error, events []analytics.Message) {
			// Runs on the client's goroutines: keep it short. The error
			// text already starts with "analytics:".
			log.Printf("%d event(s) not delivered: %v", len(events), err)
			if dead != nil {
				dead.write(err, events)
			}
		}),
	)
	if err != nil {
		return err
	}
	for _, m := range resend {
		// EnqueueContext waits for room instead of returning ErrQueueFull.
		if err := client.EnqueueContext(context.Background(), m); err != nil {
			log.Printf("dead letter %s not sent again: %v", m.ID(), err)
		}
	}
	if len(resend) > 0 {
		log.Printf("sending %d kept event(s) again", len(resend))
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", r.URL.Path)
		// Track never blocks and does no I/O. An error means this one event
		// was not taken (queue full, invalid event): log it, never fail
		// the request because of analytics.
		err := client.Track(analytics.Track{
			UserID:      r.Header.Get("X-User-ID"),
			AnonymousID: anonymousID(r),
			Event:       "Request Handled",
			Properties: analytics.Properties{
				"method": r.Method,
				"path":   r.URL.Path,
			},
		})
		if err != nil {
			log.Printf("event not tracked: %v", err)
		}
	})

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// Catch the signal before announcing the address: a SIGTERM that comes
	// right after the announcement must start the orderly shutdown, not
	// kill the process.
	sig, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	// The address goes to stdout so that scripts (and the example's test)
	// can find the port when -addr ends in :0.
	fmt.Printf("listening on http://%s\n", ln.Addr())

	select {
	case <-sig.Done():
		log.Printf("signal received: shutting down")
	case err := <-serveErr:
		// The server failed on its own; still close the client below.
		log.Printf("http server: %v", err)
	}
	stop()

	// 1. Stop the HTTP server: no new connections, wait for running
	// handlers (they may still call Track).
	ctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Printf("http server shutdown: %v", err)
	}
	fmt.Println("http server stopped")

	// 2. Close the analytics client: deliver what is queued, within the
	// deadline; events still without an outcome are handed back to
	// OnError with ErrShutdownInterrupted.
	ctx, cancel = context.WithTimeout(context.Background(), *closeTimeout)
	defer cancel()
	closeErr := client.Close(ctx)
	switch {
	case closeErr == nil:
		fmt.Println("analytics client closed: every event has an outcome")
	case errors.Is(closeErr, analytics.ErrShutdownInterrupted):
		fmt.Printf("analytics client closed at its deadline: %v\n", closeErr)
	default:
		return closeErr
	}
	if dead != nil {
		if err := dead.close(); err != nil {
			return err
		}
	}
	st := client.Stats()
	fmt.Printf("delivered %d, failed %d, handed back %d\n", st.Delivered, st.Failed, st.HandedBack)
	if local != nil {
		fmt.Printf("the local endpoint received %d event(s)\n", len(local.MessageIDs()))
	}
	return nil
}

// anonymousID identifies a visitor without a user id. A real server would
// use a cookie; the example uses the client's IP address so that every
// event passes validation (a Track needs UserID or AnonymousID).
func anonymousID(r *http.Request) string {
	if r.Header.Get("X-User-ID") != "" {
		return ""
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
