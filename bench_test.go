package analytics

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaykit/analytics-go/internal/wire"
)

// blockedTransport holds every request until the client shuts down, so
// benchmarks measure the caller's cost alone.
type blockedTransport struct{}

func (blockedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// discardQueued empties the queue outside the timer, as delivery would: the
// events get their disposition and their slabs go back for reuse, so a
// benchmark's live heap stays at QueueCapacity as in a real, draining client.
func (q *queue) discardQueued() {
	var buf [64]event // no allocation of its own, so tests can count the caller's
	for {
		q.mu.Lock()
		n := 0
		for q.n > 0 && n < len(buf) {
			buf[n] = q.popLocked()
			n++
		}
		q.mu.Unlock()
		if n == 0 {
			return
		}
		q.discharge(buf[:n])
		q.places.taken(n, true)
		releaseEvents(buf[:n])
	}
}

// BenchmarkTrack is the hot path with the uploader blocked: validate, stamp,
// encode once, enqueue. The caller's own four-entry map is built outside the
// loop's measured work only in the "prebuilt" variant.
func BenchmarkTrack(b *testing.B) {
	for _, tc := range []struct {
		name               string
		prebuilt           bool
		onError, onSuccess bool
		defaults           bool
	}{
		{"prebuilt-properties", true, false, false, false},
		{"caller-builds-properties", false, false, false, false},
		{"prebuilt-properties-with-onerror", true, true, false, false},
		{"caller-builds-properties-with-onerror", false, true, false, false},
		{"prebuilt-properties-with-onsuccess", true, false, true, false},
		{"prebuilt-properties-with-defaults", true, false, false, true},
		{"prebuilt-properties-with-defaults-and-onerror", true, true, false, true},
		{"prebuilt-properties-with-defaults-and-onsuccess", true, false, true, true},
	} {
		prebuilt := tc.prebuilt
		b.Run(tc.name, func(b *testing.B) {
			opts := []Option{WithEndpoint("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: blockedTransport{}}), WithConsumers(1)}
			if tc.onError {
				opts = append(opts, WithOnError(func(error, []Message) {}))
			}
			if tc.onSuccess {
				opts = append(opts, WithOnSuccess(func([]Message) {}))
			}
			if tc.defaults {
				opts = append(opts, benchDefaults()...)
			}
			c, err := New("wk", opts...)
			if err != nil {
				b.Fatal(err)
			}
			props := Properties{"plan": "pro", "amount": 42, "currency": "EUR", "trial": false}
			runtime.LockOSThread() // cpu-ns/op: this thread's CPU time, not the time it waited for a core
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, cpu := threadCPU(), time.Duration(0)
			for i := 0; i < b.N; i++ {
				if i%DefaultQueueCapacity == DefaultQueueCapacity-1 {
					b.StopTimer()
					cpu += threadCPU() - cpu0
					c.q.discardQueued()
					cpu0 = threadCPU()
					b.StartTimer()
				}
				p := props
				if !prebuilt {
					p = Properties{"plan": "pro", "amount": i, "currency": "EUR", "trial": false}
				}
				if err := c.Track(Track{UserID: "user-1234", Event: "Order Completed", Properties: p}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if cpu += threadCPU() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel()
			_ = c.Close(ctx)
		})
	}
}

// benchDefaults are a typical default context (app, os, device) and two
// default properties.
func benchDefaults() []Option {
	return []Option{WithDefaultContext(map[string]any{
		"app":    map[string]any{"name": "shop", "version": "1.2.3", "build": "4567"},
		"os":     map[string]any{"name": "linux", "version": "6.1"},
		"device": map[string]any{"type": "server"},
	}), WithDefaultProperties(map[string]any{"env": "prod", "region": "eu-west-1"})}
}

// failingTransport answers every request 503 at once: an outage.
type failingTransport struct{}

func (failingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("")), Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// BenchmarkHeldEvents measures the heap each event costs while the client
// holds it: n events accepted during an outage (every request answered
// 503, so they are queued or wait for a retry), the live heap after a GC
// compared with the heap before the client was created. heap-B/event is
// the metric; run with -benchtime 1x (each iteration holds n events).
func BenchmarkHeldEvents(b *testing.B) {
	for _, n := range []int{10000, 50000} {
		for _, cb := range []string{"none", "onerror", "onsuccess"} {
			b.Run(fmt.Sprintf("%s/%d", cb, n), func(b *testing.B) {
				var perEvent float64
				for i := 0; i < b.N; i++ {
					perEvent += heldHeap(b, n, cb)
				}
				b.ReportMetric(perEvent/float64(b.N), "heap-B/event")
			})
		}
	}
}

func heldHeap(b testing.TB, n int, cb string) float64 {
	opts := []Option{WithEndpoint("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: failingTransport{}}),
		WithQueueCapacity(n + 1000), WithMaxRetries(100)}
	var handedBack atomic.Int64
	countHandedBack := WithOnError(func(_ error, ms []Message) { handedBack.Add(int64(len(ms))) })
	switch cb {
	case "onerror":
		opts = append(opts, countHandedBack)
	case "onsuccess":
		opts = append(opts, WithOnSuccess(func([]Message) {}), countHandedBack)
	}
	var before, after runtime.MemStats
	// Twice: the first collection moves sync.Pool contents (slabs, body
	// buffers, batches of the previous round) to the victim caches, the
	// second frees them. Otherwise they count in before and the client
	// reuses them, so what it holds is undercounted by how much the
	// previous round left.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	c, err := New("wk", opts...)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		err := c.Track(Track{UserID: "user-" + strconv.Itoa(i%1000), Event: "Order Completed",
			Properties: Properties{"plan": "pro", "amount": i, "currency": "EUR", "trial": false}})
		if err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if held := c.Stats().Pending; held != int64(n) {
		b.Fatalf("%d events held, want %d", held, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_ = c.Close(ctx)
	for deadline := time.Now().Add(time.Minute); cb != "none" && handedBack.Load() < int64(n); {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d held events handed back after a minute", handedBack.Load(), n)
		}
		time.Sleep(time.Millisecond) // hand-back callbacks may outlast Close's grace
	}
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// BenchmarkCallbackMessages compares the two ways a callback can get an
// event's message: a copy made at enqueue (what the client does with
// OnSuccess registered: "copy", the extra cost of an enqueue call with the
// copy over one without) and rebuilding it from the event's JSON when the
// outcome is known ("rebuild", per event, on a consumer). With OnSuccess
// every delivered event needs its message, so the cheaper one per event
// wins; with OnError alone only failed events do, so rebuilding costs
// nothing on the path that matters.
func BenchmarkCallbackMessages(b *testing.B) {
	m := Track{UserID: "user-1234", Event: "Order Completed", Properties: Properties{"plan": "pro", "amount": 42, "currency": "EUR", "trial": false}}
	for _, keep := range []bool{false, true} {
		name := "enqueue-without-copy"
		if keep {
			name = "enqueue-with-copy"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				sc := getScratch()
				sc.use(nil, false)
				if _, err := prepareMessage(sc, m, keep); err != nil {
					b.Fatal(err)
				}
				putScratch(sc)
			}
		})
	}
	sc := getScratch()
	sc.use(nil, false)
	if _, err := prepareMessage(sc, m, false); err != nil {
		b.Fatal(err)
	}
	data := append([]byte(nil), sc.Enc.Bytes()...)
	putScratch(sc)
	b.Run("rebuild", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := rebuildMessage(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTrackParallel is the hot path from all cores at once.
func BenchmarkTrackParallel(b *testing.B) {
	c, err := New("wk", WithEndpoint("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: blockedTransport{}}),
		WithQueueCapacity(b.N+1), WithConsumers(1)) // no discarding here: parallel timers cannot stop
	if err != nil {
		b.Fatal(err)
	}
	props := Properties{"plan": "pro", "amount": 42, "currency": "EUR", "trial": false}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Track(Track{UserID: "user-1234", Event: "Order Completed", Properties: props}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_ = c.Close(ctx)
}

func benchBatch(n int) *batch {
	b := &batch{}
	for i := 0; i < n; i++ {
		e := &wire.Encoder{}
		e.Reset(nil, libraryJSON)
		m := Track{MessageID: NewMessageID(), UserID: "user-" + strconv.Itoa(i), Event: "Order Completed", Timestamp: time.Now(),
			Properties: Properties{"plan": "pro", "amount": i, "currency": "EUR", "trial": false}}
		if err := m.appendJSON(e); err != nil {
			panic(err)
		}
		b.events = append(b.events, event{msg: m, data: e.Bytes()})
		b.bytes += len(e.Bytes()) + 1
	}
	return b
}

// BenchmarkEncodeBody builds the body of a 250-event batch, with and
// without gzip, and with and without the per-event sentAt (R59). B/event
// is the body's JSON per event, wire-B/event what goes on the wire.
func BenchmarkEncodeBody(b *testing.B) {
	bt := benchBatch(250)
	sentAt := time.Date(2026, 5, 1, 10, 0, 0, 123456789, time.UTC) // a fraction, as most instants have
	for _, gz := range []bool{false, true} {
		for _, on := range []bool{false, true} {
			name := "plain"
			if gz {
				name = "gzip"
			}
			b.Run(fmt.Sprintf("%s/eventSentAt=%t", name, on), func(b *testing.B) {
				s := &sender{frame: wire.NewFrame("wk", nil, on)}
				var plain []byte
				var zipped bytes.Buffer
				zw, _ := gzip.NewWriterLevel(&zipped, gzip.BestSpeed) // as internal/httpbatch compresses
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					plain = s.frame.Encode(plain, bt, sentAt)
					if gz {
						zipped.Reset()
						zw.Reset(&zipped)
						_, _ = zw.Write(plain)
						_ = zw.Close()
					}
				}
				b.ReportMetric(float64(len(plain))/250, "B/event")
				sent := len(plain)
				if gz {
					sent = zipped.Len()
				}
				b.ReportMetric(float64(sent)/250, "wire-B/event")
			})
		}
	}
}

// BenchmarkEncodeEvent is the per-event JSON encoding alone.
func BenchmarkEncodeEvent(b *testing.B) {
	m := Track{MessageID: "0b9a3c7e-4d8f-4f6a-9c1e-2b3d4f5a6b7c", UserID: "user-1234", Event: "Order Completed", Timestamp: time.Now(),
		Properties: Properties{"plan": "pro", "amount": 42, "currency": "EUR", "trial": false}}
	e := &wire.Encoder{}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e.Reset(nil, libraryJSON)
		_ = m.appendJSON(e)
	}
}
