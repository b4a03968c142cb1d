package analytics

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"
)

// discardDurable is discardQueued for a durable client: the discarded
// events are acknowledged on disk as delivery would, so whole segments are
// reclaimed and the directory stays small.
func (c *Client) discardDurable() {
	var buf [64]event
	for {
		q := c.q
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
		c.disk.ack(buf[:n])
		q.discharge(buf[:n])
		q.places.taken(n, true)
		releaseEvents(buf[:n])
	}
}

func benchTrackMode(b *testing.B, opts ...Option) {
	opts = append([]Option{WithEndpoint("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: blockedTransport{}}), WithConsumers(1)}, opts...)
	c, err := New("wk", opts...)
	if err != nil {
		b.Fatal(err)
	}
	props := Properties{"plan": "pro", "amount": 42, "currency": "EUR", "trial": false}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpu := threadCPU(), time.Duration(0)
	held := c.Config().QueueCapacity // memory mode's or durable mode's default
	for i := 0; i < b.N; i++ {
		if i%held == held-1 {
			b.StopTimer()
			cpu += threadCPU() - cpu0
			if c.disk != nil {
				c.discardDurable()
			} else {
				c.q.discardQueued()
			}
			cpu0 = threadCPU()
			b.StartTimer()
		}
		if err := c.Track(Track{UserID: "user-1234", Event: "Order Completed", Properties: props}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if cpu += threadCPU() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	}
	if c.disk != nil {
		b.ReportMetric(float64(c.disk.diskLog.Written())/float64(b.N), "disk-B/event")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_ = c.Close(ctx)
}

// BenchmarkTrackMemory and BenchmarkTrackDurable are one Track call in
// memory mode and in durable mode (one write(2) more), uploader blocked;
// run them together: go test -bench 'Track(Memory|Durable)' -benchmem.
// cpu-ns/op is the calling thread's CPU time per call (Linux), which a
// busy machine does not inflate as it does ns/op. disk-B/event is the
// bytes written per event: its record (8-byte header, a kind byte and the
// JSON) and its share of the acknowledgement records.
func BenchmarkTrackMemory(b *testing.B) { benchTrackMode(b) }

func BenchmarkTrackDurable(b *testing.B) {
	for _, p := range []struct {
		name string
		opt  DiskOption
	}{{"fsync-interval", WithFsync(FsyncInterval)}, {"fsync-every-batch", WithFsync(FsyncEveryBatch)}, {"fsync-never", WithFsync(FsyncNever)}} {
		b.Run(p.name, func(b *testing.B) { benchTrackMode(b, WithDiskBuffer(b.TempDir(), p.opt)) })
	}
	// the portable writer (one write(2) per event), which Linux does not use
	b.Run("fsync-interval-write2", func(b *testing.B) {
		benchTrackMode(b, WithDiskBuffer(b.TempDir()), optionFunc(func(s *settings) { s.disk.noMmap = true }))
	})
}

// TestDurableTrackZeroAllocs: durable mode adds no allocation to an
// enqueue call without callbacks.
func TestDurableTrackZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	c, err := New("wk", WithEndpoint("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: blockedTransport{}}),
		WithConsumers(1), WithQueueCapacity(5000), WithDiskBuffer(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		_ = c.Track(Track{UserID: "u1", Event: "Played", Properties: Properties{"plan": "pro", "n": 7, "ok": true}})
		_ = c.Identify(Identify{UserID: "u1", Traits: Traits{"name": "Ada"}})
		c.discardDurable()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per round of two durable enqueue calls (and one ack)", allocs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_ = c.Close(ctx)
}

// BenchmarkTrackDurableLatency times every durable Track call (fsync per
// interval, uploader blocked, memory emptied every QueueCapacity events as
// in BenchmarkTrackDurable) and reports the 50th, 99th and 99.9th
// percentiles in µs: the figure the append path's cost is judged by.
func BenchmarkTrackDurableLatency(b *testing.B) {
	c, err := New("wk", WithEndpoint("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: blockedTransport{}}),
		WithConsumers(1), WithDiskBuffer(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	props := Properties{"plan": "pro", "amount": 42, "currency": "EUR", "trial": false}
	held := c.Config().QueueCapacity
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%held == held-1 {
			b.StopTimer()
			c.discardDurable()
			b.StartTimer()
		}
		t0 := time.Now()
		if err := c.Track(Track{UserID: "user-1234", Event: "Order Completed", Properties: props}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	at := func(p float64) float64 { return float64(lat[int(float64(len(lat)-1)*p)]) / 1e3 }
	b.ReportMetric(at(0.5), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
	b.ReportMetric(at(0.999), "p99.9-µs")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_ = c.Close(ctx)
}
