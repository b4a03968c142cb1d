package analytics

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// idAPI answers 503 until up, then 200, and records the messageIds of the
// batches it accepted. It is fakeAPI without the per-request JSON decoding,
// which would be most of this test's CPU time for 100 000 events.
type idAPI struct {
	up time.Time

	mu       sync.Mutex
	ids      map[string]int
	requests int
}

func (a *idAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(req.Body)
	_ = req.Body.Close()
	status := http.StatusServiceUnavailable
	a.mu.Lock()
	a.requests++
	if !time.Now().Before(a.up) {
		status = http.StatusOK
		key := []byte(`"messageId":"`)
		for i := bytes.Index(body, key); i >= 0; i = bytes.Index(body, key) {
			body = body[i+len(key):]
			a.ids[string(body[:bytes.IndexByte(body, '"')])]++
		}
	}
	a.mu.Unlock()
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("")), Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// TestDurableOutageSmallSegments is the scenario in which acknowledgement
// reclaim once spun forever holding the log's lock (Track blocked, Close
// never returned): 64 KiB segments, room for 1 M events, 100 000 events
// tracked through 15 s of 503s, then 200s. All of them must be delivered
// within 20 s of the recovery, Track must stay under 50 ms (real time:
// the bubble's clock stands still during a call; the 99.9th percentile,
// as a loaded machine can take a core away from any call), and Close with
// a 1 s deadline must return within 1.5 s. Under the race detector it runs
// 20 000 events with ten times the time bounds. A watchdog outside the bubble
// fails the test if it makes no progress for 60 s of real time (a spin
// would never let fake time advance).
//
// It runs twice: with room in memory for every event (capacity 1 M), and
// with a QueueCapacity of 10 000 (a third of the default, below the run's
// events even under the race detector), where most events are on disk
// only during the outage and are read back after it (R70).
func TestDurableOutageSmallSegments(t *testing.T) {
	if testing.Short() {
		t.Skip("100 000 events")
	}
	for _, capacity := range []int{MaxQueueCapacity, 10_000} {
		t.Run(fmt.Sprintf("capacity=%d", capacity), func(t *testing.T) { durableOutage(t, capacity) })
	}
}

func durableOutage(t *testing.T, capacity int) {
	n := int64(100_000)
	if raceEnabled {
		n = 20_000 // the race detector makes each call several times slower
	}
	dir := t.TempDir()
	var progress atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		last, idle := int64(-1), 0
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			if p := progress.Load(); p != last {
				last, idle = p, 0
			} else if idle++; idle == 60 {
				fmt.Fprintf(os.Stderr, "TestDurableOutageSmallSegments: no progress for 60 s at step %d\n", p)
				os.Exit(2)
			}
		}
	}()
	synctest.Test(t, func(t *testing.T) {
		recovery := time.Now().Add(15 * time.Second)
		api := &idAPI{up: recovery, ids: map[string]int{}}
		var succeeded, failed atomic.Int64
		c := newTestClient(t, api, nil, WithDiskBuffer(dir, WithSegmentSize(64<<10)), WithQueueCapacity(capacity),
			WithOnSuccess(func(m []Message) { succeeded.Add(int64(len(m))) }),
			WithOnError(func(_ error, m []Message) { failed.Add(int64(len(m))) }))
		calls := make([]time.Duration, 0, n)
		for i := int64(0); i < n; i++ {
			if i%(n/100) == 0 {
				time.Sleep(150 * time.Millisecond) // 100 steps: the 15 s outage
			}
			r0 := realNow()
			if err := c.Track(track(fmt.Sprintf("m%06d", i))); err != nil {
				t.Fatalf("Track #%d: %v", i, err)
			}
			calls = append(calls, realNow()-r0)
			progress.Add(1)
		}
		slices.Sort(calls)
		p999, slowest := calls[n*999/1000], calls[n-1]
		// On a loaded 2-core machine a call can lose its core for a while:
		// the bound is on the 99.9th percentile, and a blocked Track (the
		// old livelock) fails the test far beyond the bound on the slowest.
		bound, worst := 50*time.Millisecond, time.Second
		if raceEnabled {
			bound, worst = 10*bound, 10*worst
		}
		if p999 > bound || slowest > worst {
			t.Errorf("Track (real time): 99.9th percentile %v, slowest %v", p999, slowest)
		}
		for c.Stats().Delivered < n && time.Since(recovery) < 20*time.Second {
			time.Sleep(100 * time.Millisecond)
			progress.Add(1)
		}
		st := c.Stats()
		if st.Delivered != n {
			t.Errorf("%d of %d delivered 20 s after the recovery (stats %+v)", st.Delivered, n, st)
		}
		closeStart := time.Now()
		_ = closeClient(t, c, time.Second)
		if d := time.Since(closeStart); d > 1500*time.Millisecond {
			t.Errorf("Close(1 s) took %v", d)
		}
		if succeeded.Load() != n || failed.Load() != 0 {
			t.Errorf("callbacks: %d successes, %d failures, want %d and 0", succeeded.Load(), failed.Load(), n)
		}
		api.mu.Lock()
		if int64(len(api.ids)) != n {
			t.Errorf("the server got %d distinct messageIds, want %d", len(api.ids), n)
		}
		api.mu.Unlock()
		if capacity < int(n) && st.Spilled < n-int64(capacity)-DefaultConsumers*DefaultFlushAt {
			t.Errorf("%d events went to disk only, want at least %d", st.Spilled, n-int64(capacity)-DefaultConsumers*DefaultFlushAt)
		}
		t.Logf("delivered %d, %v after the recovery, %d requests; Track p99.9 %v, slowest %v; spilled %d",
			st.Delivered, time.Since(recovery), api.requests, p999, slowest, st.Spilled)
	})
	if segs := segments(t, dir); len(segs) != 0 {
		t.Errorf("%d segments left after every event was delivered", len(segs))
	}
}
