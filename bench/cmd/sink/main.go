// Command sink runs the benchmark sink (package sink) on a loopback port,
// with an optional fault mode and an optional outage.
// It prints "LISTEN <base URL>" on stdout once it accepts connections, and
// its final stats as one JSON line on stdout when it gets SIGTERM/SIGINT.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/relaykit/analytics-go/bench/sink"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	fault := flag.String("fault", "none", "fault mode: none, 500, 429, lostack, limiter")
	rate := flag.Float64("rate", 0.2, "fraction of requests that get the fault")
	limit := flag.Float64("limit", 15000, "fault limiter: events/s the token bucket admits")
	seed := flag.Uint64("seed", 1, "RNG seed for fault decisions")
	outage := flag.Duration("outage", 0, "fail every request for this long (0 = no outage)")
	outageAfter := flag.Duration("outage-after", 2*time.Second, "start the outage this long after the first batch request")
	outageMode := flag.String("outage-mode", "500", "outage: 500 (answer 500) or reset (reset every connection, as if nothing listened)")
	flag.Parse()

	srv, err := sink.New(sink.Config{Fault: *fault, Rate: *rate, Seed: *seed, Limit: *limit,
		Outage: *outage, OutageAfter: *outageAfter, OutageMode: *outageMode})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ConnState: srv.ConnState,
		ErrorLog: log.New(io.Discard, "", 0)} // aborted handlers and resets are expected in a reset outage
	go func() {
		if err := hs.Serve(srv.Listener(ln)); err != nil && err != http.ErrServerClosed {
			log.Fatal(err)
		}
	}()
	fmt.Printf("LISTEN http://%s\n", ln.Addr())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = hs.Shutdown(ctx)
	_ = json.NewEncoder(os.Stdout).Encode(srv.Stats())
}
