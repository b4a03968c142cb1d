//go:build ignore

// firsttry delivers one batch on its first try through the public API and
// writes the coverage counters just before and just after, so that
// scripts/firsttry.sh can list the library files the delivery ran through.
// Build it with -cover (the script does).
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/coverage"
	"strings"
	"sync/atomic"
	"time"

	analytics "github.com/relaykit/analytics-go"
)

type okAPI struct{ n atomic.Int32 }

func (a *okAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	_ = req.Body.Close()
	a.n.Add(1)
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

func snapshot(dir string) {
	if err := coverage.WriteMetaDir(dir); err != nil {
		panic(err)
	}
	if err := coverage.WriteCountersDir(dir); err != nil {
		panic(err)
	}
}

func main() {
	api := &okAPI{}
	var delivered atomic.Int32
	c, err := analytics.New("wk",
		analytics.WithEndpoint("http://api.test"),
		analytics.WithHTTPClient(&http.Client{Transport: api}),
		analytics.WithFlushInterval(300*time.Millisecond),
		analytics.WithOnSuccess(func(m []analytics.Message) { delivered.Add(int32(len(m))) }),
	)
	if err != nil {
		panic(err)
	}
	for i := range 5 {
		if err := c.Track(analytics.Track{UserID: "u1", Event: fmt.Sprint("Tried ", i)}); err != nil {
			panic(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the consumers wait for FlushInterval
	snapshot(os.Args[1])
	deadline := time.Now().Add(5 * time.Second)
	for delivered.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the consumer goes back to waiting
	snapshot(os.Args[2])
	if api.n.Load() != 1 || delivered.Load() != 5 {
		panic(fmt.Sprintf("%d requests, %d delivered; want 1 and 5", api.n.Load(), delivered.Load()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}
