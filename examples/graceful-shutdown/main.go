// Command graceful-shutdown shows how to stop an analytics client without
// losing events: send, then Close with a deadline on SIGTERM (or when done
// sending), and look at what was delivered and what was handed back.
//
// By default it starts a local fault-injecting server on 127.0.0.1 that
// answers the batch holding order-11 with "429 Retry-After: 30", so that
// batch is still waiting when the Close deadline ends and is handed back
// (OnError with ErrShutdownInterrupted). Set ANALYTICS_ENDPOINT and
// ANALYTICS_WRITE_KEY to send to a real endpoint instead.
//
//	go run ./examples/graceful-shutdown
//	go run ./examples/graceful-shutdown -events 1000 -interval 20ms   # then kill -TERM it
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/e2e/faultserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "graceful-shutdown:", err)
		os.Exit(1)
	}
}

func run() error {
	events := flag.Int("events", 15, "number of events to send")
	interval := flag.Duration("interval", 0, "pause between events")
	deadline := flag.Duration("deadline", 2*time.Second, "how long Close may take")
	flag.Parse()

	// SIGTERM (what orchestrators send) or Ctrl-C stops the sending loop.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	endpoint, writeKey := os.Getenv("ANALYTICS_ENDPOINT"), os.Getenv("ANALYTICS_WRITE_KEY")
	if endpoint == "" || writeKey == "" {
		srv, err := faultserver.Start(faultserver.Options{
			Rules: []faultserver.Rule{{
				MessageID: "order-11",
				Responses: []faultserver.Response{faultserver.RetryAfter(429, "30")},
			}},
		})
		if err != nil {
			return err
		}
		defer srv.Close()
		endpoint, writeKey = srv.URL(), "example-write-key"
		fmt.Println("endpoint: local fault server (the batch with order-11 gets 429 Retry-After: 30)")
	} else {
		fmt.Println("endpoint: ANALYTICS_ENDPOINT")
	}

	var (
		mu                           sync.Mutex
		delivered, failed, handedOut []string
	)
	client, err := analytics.New(writeKey,
		analytics.WithEndpoint(endpoint),
		analytics.WithFlushAt(5),
		analytics.WithConsumers(1),
		analytics.WithOnSuccess(func(msgs []analytics.Message) {
			mu.Lock()
			defer mu.Unlock()
			delivered = append(delivered, ids(msgs)...)
		}),
		analytics.WithOnError(func(err error, msgs []analytics.Message) {
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, analytics.ErrShutdownInterrupted) {
				// Not a delivery failure: the client gave the events back.
				// A real program would persist them and send them again.
				handedOut = append(handedOut, ids(msgs)...)
				return
			}
			failed = append(failed, ids(msgs)...)
		}),
	)
	if err != nil {
		return err
	}

	sent := 0
send:
	for i := 1; i <= *events; i++ {
		select {
		case <-ctx.Done():
			fmt.Println("signal received: stop sending")
			break send
		default:
		}
		err := client.Track(analytics.Track{
			MessageID:  fmt.Sprintf("order-%d", i),
			UserID:     "user-42",
			Event:      "Order Completed",
			Properties: analytics.Properties{"order": i},
		})
		if err != nil {
			fmt.Printf("order-%d rejected: %v\n", i, err)
			continue
		}
		sent++
		if *interval > 0 {
			t := time.NewTimer(*interval)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
	}
	fmt.Printf("sent %d events\n", sent)

	// Close uploads what is queued with the normal retry policy, but no
	// longer than the deadline; then it hands back whatever has no
	// disposition yet.
	fmt.Printf("closing with a %v deadline\n", *deadline)
	closeCtx, cancel := context.WithTimeout(context.Background(), *deadline)
	defer cancel()
	switch err := client.Close(closeCtx); {
	case err == nil:
		fmt.Println("close: every event has a disposition")
	case errors.Is(err, analytics.ErrShutdownInterrupted):
		fmt.Println("close: deadline reached; events without a disposition were handed back")
	default:
		return err
	}

	mu.Lock()
	defer mu.Unlock()
	fmt.Printf("delivered: %d %s\n", len(delivered), list(delivered))
	fmt.Printf("failed: %d %s\n", len(failed), list(failed))
	fmt.Printf("handed back: %d %s\n", len(handedOut), list(handedOut))
	if len(handedOut) > 0 {
		fmt.Println("handed-back events were not lost: store them and send them again on the next start")
	}
	return nil
}

func ids(msgs []analytics.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID()
	}
	return out
}

// list renders ids sorted by their number, e.g. "[order-1 order-2]".
func list(ids []string) string {
	s := append([]string(nil), ids...)
	num := func(id string) int {
		n, _ := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
		return n
	}
	sort.Slice(s, func(i, j int) bool { return num(s[i]) < num(s[j]) })
	return "[" + strings.Join(s, " ") + "]"
}
