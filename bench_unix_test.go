//go:build unix

package analytics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// okTransport answers every request 200 at once, without a network. It
// reports through httptrace, as net/http's transport does, when it has
// written the body, so the client reuses its body buffers as it does
// against a real server.
type okTransport struct{}

func (okTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	if trace != nil && trace.GetConn != nil {
		trace.GetConn(req.URL.Host)
	}
	_, _ = io.Copy(io.Discard, req.Body)
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{})
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// BenchmarkTrackTrickle is the whole client at a steady, moderate rate: one
// Track every 5 µs, batching and upload to an in-process API that answers
// at once. The consumers keep up, so this shows what the client costs
// besides the calls themselves (waking consumers, batching, encoding the
// body). cpu-ns/op is the process's CPU time per event, from getrusage,
// minus the caller's pacing loop.
func BenchmarkTrackTrickle(b *testing.B) {
	c, err := New("wk", WithEndpoint("http://api.test"), WithHTTPClient(&http.Client{Transport: okTransport{}}))
	if err != nil {
		b.Fatal(err)
	}
	props := Properties{"plan": "pro", "amount": 42, "currency": "EUR", "trial": false}
	const pace = 5 * time.Microsecond
	var pacing time.Duration
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		for time.Since(t0) < pace {
		}
		pacing += time.Since(t0)
		if err := c.Track(Track{UserID: "user-1234", Event: "Order Completed", Properties: props}); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0-pacing)/float64(b.N), "cpu-ns/op")
	if got := c.Stats().Delivered; got != int64(b.N) {
		b.Fatalf("delivered %d of %d", got, b.N)
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEnqueueContextBlocked is a backfill: producers call
// EnqueueContext flat out into a small client (QueueCapacity 1 000) whose
// consumers deliver in process, so the producers spend most calls near a
// full client and many of them blocked. ns/op is per event, delivered; cpu-ns/op is the process's CPU time per
// event (getrusage).
func BenchmarkEnqueueContextBlocked(b *testing.B) {
	for _, producers := range []int{1, 4} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			c, err := New("wk", WithEndpoint("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: okTransport{}}),
				WithQueueCapacity(1000), WithConsumers(2))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			cpu0 := processCPU()
			b.ResetTimer()
			for p := 0; p < producers; p++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						if err := c.EnqueueContext(ctx, Track{UserID: "user-1234", Event: "Order Completed",
							Properties: Properties{"plan": "pro", "amount": i, "currency": "EUR", "trial": false}}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := c.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			if got := c.Stats().Delivered; got != int64(b.N) {
				b.Fatalf("delivered %d of %d", got, b.N)
			}
			_ = c.Close(ctx)
		})
	}
}
