// Command driver runs one SDK through the comparison workload and prints
// one JSON line with what it measured from inside its own process.
//
// Workload (identical for every SDK): N track calls from one goroutine, each
// with a user id from a fixed set of 1000 and four properties built by the
// caller ({"plan":"pro","amount":i,"currency":"EUR","trial":false}); then
// Close with a generous deadline. properties.amount is the loop index, which
// the sink uses as the per-run event identity (lost/duplicate counting).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	posthog "github.com/posthog/posthog-go"
	ours "github.com/relaykit/analytics-go"
	segment "gopkg.in/segmentio/analytics-go.v3"

	"github.com/relaykit/analytics-go/bench/internal/rusage"
	"github.com/relaykit/analytics-go/bench/sink"
)

const (
	writeKey  = "bench-write-key"
	eventName = "Order Completed"
	numUsers  = 1000
)

// Result is the driver's one JSON line.
type Result struct {
	SDK          string  `json:"sdk"`
	N            int     `json:"n"`
	WallS        float64 `json:"wall_s"`       // New → Close returned
	EnqueueS     float64 `json:"enqueue_s"`    // New → last track call returned
	DrainS       float64 `json:"drain_s"`      // segment/posthog -drain: wait before Close
	TrackErrors  int64   `json:"track_errors"` // track calls that returned an error
	FirstError   string  `json:"first_error,omitempty"`
	CloseError   string  `json:"close_error,omitempty"`
	CloseTimeout bool    `json:"close_timeout"` // Close did not return within -timeout
	CPUUserUS    int64   `json:"cpu_user_us"`
	CPUSysUS     int64   `json:"cpu_sys_us"`
	CPUUSPerEv   float64 `json:"cpu_us_per_event"` // (user+sys) / N
	Mallocs      uint64  `json:"mallocs"`
	AllocBytes   uint64  `json:"alloc_bytes"`
	MallocsPerEv float64 `json:"mallocs_per_event"`
	BytesPerEv   float64 `json:"bytes_per_event"`
	NumGC        uint32  `json:"num_gc"`
	PeakRSSKB    int64   `json:"peak_rss_kb"`
	GOMAXPROCS   int     `json:"gomaxprocs"`

	// From the sink, fetched after every measurement above was taken.
	Delivered   int64   `json:"delivered"`    // sink: distinct events (by sequence number)
	EventsPerS  float64 `json:"events_per_s"` // Delivered / WallS
	SinkEvents  int64   `json:"sink_events"`  // sink: events received incl. repeats
	SinkStatErr string  `json:"sink_stat_err,omitempty"`

	// SDK-side accounting.
	Ours      *ours.Stats `json:"ours_stats,omitempty"`
	CBSuccess int64       `json:"cb_success,omitempty"` // segment/posthog Callback.Success calls
	CBFailure int64       `json:"cb_failure,omitempty"` // segment/posthog Callback.Failure calls
}

type quiet struct{}

func (quiet) Logf(string, ...any)   {}
func (quiet) Errorf(string, ...any) {}

type counter struct{ ok, failed atomic.Int64 }

type segCallback struct{ *counter }

func (c segCallback) Success(segment.Message)        { c.ok.Add(1) }
func (c segCallback) Failure(segment.Message, error) { c.failed.Add(1) }

type phCallback struct{ *counter }

func (c phCallback) Success(posthog.APIMessage)        { c.ok.Add(1) }
func (c phCallback) Failure(posthog.APIMessage, error) { c.failed.Add(1) }

// client is the part of an SDK the workload uses.
type client struct {
	track func(i int, user string) error
	close func(ctx context.Context) error
	after func(*Result)
	// settled (segment, posthog) is how many events the Callback has seen
	// (success or final failure); nil for ours.
	settled func() int64
	// idle (segment, posthog) reports that no request is in flight and no
	// batch is waiting for a retry.
	idle func() bool
}

func newClient(ctx context.Context, sdk, endpoint string, drain bool) (*client, error) {
	switch sdk {
	case "ours", "ours-block":
		// Defaults except the endpoint (FlushAt 250, 8 consumers, queue
		// 10 000, no gzip, silent logger). Track never blocks: with a full
		// queue it returns ErrQueueFull and the event is dropped.
		//
		// "ours-block" is the same client used through its blocking mode,
		// EnqueueContext, which waits for queue room (until the -timeout
		// deadline) like segment's and posthog's Enqueue do implicitly (they
		// block on a 100-slot channel).
		c, err := ours.New(writeKey, ours.WithEndpoint(endpoint))
		if err != nil {
			return nil, err
		}
		track := func(i int, user string) error {
			return c.Track(ours.Track{UserID: user, Event: eventName, Properties: ours.Properties{
				"plan": "pro", "amount": i, "currency": "EUR", "trial": false,
			}})
		}
		if sdk == "ours-block" {
			track = func(i int, user string) error {
				return c.EnqueueContext(ctx, ours.Track{UserID: user, Event: eventName, Properties: ours.Properties{
					"plan": "pro", "amount": i, "currency": "EUR", "trial": false,
				}})
			}
		}
		return &client{
			track: track,
			close: c.Close,
			after: func(r *Result) { s := c.Stats(); r.Ours = &s },
		}, nil
	case "segment":
		// Defaults (BatchSize 250, Interval 5 s, default transport, 10
		// attempts with backo 100 ms×2 capped at 10 s) except the endpoint,
		// a silent logger and a counting callback.
		cnt := &counter{}
		tr := newTracker()
		c, err := segment.NewWithConfig(writeKey, segment.Config{
			Endpoint:  endpoint,
			Logger:    quiet{},
			Callback:  segCallback{cnt},
			Transport: tr.transport(drain),
		})
		if err != nil {
			return nil, err
		}
		return &client{
			track: func(i int, user string) error {
				return c.Enqueue(segment.Track{UserId: user, Event: eventName, Properties: segment.Properties{
					"plan": "pro", "amount": i, "currency": "EUR", "trial": false,
				}})
			},
			close:   closeWithDeadline(c.Close),
			after:   func(r *Result) { r.CBSuccess, r.CBFailure = cnt.ok.Load(), cnt.failed.Load() },
			settled: func() int64 { return cnt.ok.Load() + cnt.failed.Load() },
			idle:    tr.idle,
		}, nil
	case "posthog":
		// Defaults (BatchSize 250, Interval 5 s, default transport, 10
		// attempts with backo 100 ms×2 capped at 10 s, no feature-flag
		// poller since no PersonalApiKey) except the endpoint, a silent
		// logger and a counting callback.
		cnt := &counter{}
		tr := newTracker()
		c, err := posthog.NewWithConfig(writeKey, posthog.Config{
			Endpoint:  endpoint,
			Logger:    quiet{},
			Callback:  phCallback{cnt},
			Transport: tr.transport(drain),
		})
		if err != nil {
			return nil, err
		}
		return &client{
			track: func(i int, user string) error {
				return c.Enqueue(posthog.Capture{DistinctId: user, Event: eventName, Properties: posthog.Properties{
					"plan": "pro", "amount": i, "currency": "EUR", "trial": false,
				}})
			},
			close:   closeWithDeadline(c.Close),
			after:   func(r *Result) { r.CBSuccess, r.CBFailure = cnt.ok.Load(), cnt.failed.Load() },
			settled: func() int64 { return cnt.ok.Load() + cnt.failed.Load() },
			idle:    tr.idle,
		}, nil
	}
	return nil, fmt.Errorf("unknown -sdk %q (ours, ours-block, segment, posthog)", sdk)
}

// closeWithDeadline adapts a Close without a context: it waits for it at
// most until ctx ends.
func closeWithDeadline(closeFn func() error) func(context.Context) error {
	return func(ctx context.Context) error {
		done := make(chan error, 1)
		go func() { done <- closeFn() }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func main() {
	sdk := flag.String("sdk", "ours", "SDK: ours, ours-block, segment, posthog")
	n := flag.Int("n", 200000, "number of track calls")
	endpoint := flag.String("endpoint", "", "sink base URL, e.g. http://127.0.0.1:8080")
	statsURL := flag.String("stats", "", "sink stats URL (default <endpoint>/stats; \"-\" to skip)")
	timeout := flag.Duration("timeout", 10*time.Minute, "deadline for the whole run (enqueue, drain and Close)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile (New → Close) to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile (every allocation sampled) to this file")
	drain := flag.Bool("drain", true, "segment/posthog: before Close, wait until every dispatched batch has a final "+
		"outcome (their Close aborts batches waiting for a retry)")
	flag.Parse()
	if *endpoint == "" {
		log.Fatal("-endpoint is required")
	}
	*endpoint = strings.TrimSuffix(*endpoint, "/")
	if *statsURL == "" {
		*statsURL = *endpoint + "/stats"
	}

	users := make([]string, numUsers)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer f.Close()
	}

	if *memprofile != "" {
		runtime.MemProfileRate = 1 // slows the run: use for the profile, not the numbers
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	ru0 := rusage.Self()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	c, err := newClient(ctx, *sdk, *endpoint, *drain)
	if err != nil {
		log.Fatal(err)
	}
	res := Result{SDK: *sdk, N: *n, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	for i := 0; i < *n; i++ {
		if err := c.track(i, users[i%numUsers]); err != nil {
			if res.TrackErrors == 0 {
				res.FirstError = err.Error()
			}
			res.TrackErrors++
		}
	}
	tEnq := time.Now()
	if *drain && c.settled != nil {
		// Their Close aborts batches that wait for a retry. Wait until every
		// dispatched batch has a final outcome: at most one open batch (< 250
		// events, flushed by Close) is unsettled, no request is in flight
		// and no batch's last attempt failed.
		want := int64(*n - 250)
		for !(c.settled() > want && c.idle()) && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		res.DrainS = time.Since(tEnq).Seconds()
	}
	cerr := c.close(ctx)
	t1 := time.Now()
	ru1 := rusage.Self()
	runtime.ReadMemStats(&m1)
	if *cpuprofile != "" {
		pprof.StopCPUProfile()
	}

	if *memprofile != "" {
		f, err := os.Create(*memprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			log.Fatal(err)
		}
		f.Close()
	}
	if cerr != nil {
		res.CloseError = cerr.Error()
		res.CloseTimeout = errors.Is(cerr, context.DeadlineExceeded)
	}
	res.WallS = t1.Sub(t0).Seconds()
	res.EnqueueS = tEnq.Sub(t0).Seconds()
	res.CPUUserUS = (ru1.User - ru0.User).Microseconds()
	res.CPUSysUS = (ru1.Sys - ru0.Sys).Microseconds()
	res.CPUUSPerEv = float64(res.CPUUserUS+res.CPUSysUS) / float64(*n)
	res.Mallocs = m1.Mallocs - m0.Mallocs
	res.AllocBytes = m1.TotalAlloc - m0.TotalAlloc
	res.MallocsPerEv = float64(res.Mallocs) / float64(*n)
	res.BytesPerEv = float64(res.AllocBytes) / float64(*n)
	res.NumGC = m1.NumGC - m0.NumGC
	res.PeakRSSKB = ru1.MaxRSSKB
	c.after(&res)

	if *statsURL != "-" {
		if st, err := fetchStats(*statsURL); err != nil {
			res.SinkStatErr = err.Error()
		} else {
			res.Delivered = st.DistinctSeq
			res.SinkEvents = st.Events
			if res.WallS > 0 {
				res.EventsPerS = float64(st.DistinctSeq) / res.WallS
			}
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		log.Fatal(err)
	}
}

func fetchStats(url string) (sink.Stats, error) {
	var st sink.Stats
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}
