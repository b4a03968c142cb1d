// Command driver runs one SDK through the comparison workload and prints
// one JSON line with what it measured from inside its own process.
//
// Workload (identical for every SDK): N track calls from one goroutine, each
// with a user id from a fixed set of 1000 and four properties built by the
// caller ({"plan":"pro","amount":i,"currency":"EUR","trial":false}); then
// Close with a generous deadline. properties.amount is the loop index, which
// the sink uses as the per-run event identity (lost/duplicate counting).
//
// -rate paces the calls by wall time (every millisecond or so it makes the
// calls that are due); without it they go flat out. -outcomes follows every
// event to its end (rejected, delivered, failed, handed back, abandoned,
// lost) by combining the SDK's callbacks with the sink's record of what it
// received. -sample records heap, RSS and pending events over time, to find
// the peaks during a sink outage.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
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
	// Sink distinct events when the last track call returned, and that
	// count over EnqueueS: delivery while producing, before the drain.
	DeliveredAtEnqueueEnd int64   `json:"delivered_at_enqueue_end"`
	SteadyEventsPerS      float64 `json:"steady_events_per_s"`

	// SDK-side accounting.
	Ours      *ours.Stats `json:"ours_stats,omitempty"`
	CBSuccess int64       `json:"cb_success,omitempty"` // segment/posthog Callback.Success calls
	CBFailure int64       `json:"cb_failure,omitempty"` // segment/posthog Callback.Failure calls

	// Pacing (-rate) and Close.
	RateTarget   float64          `json:"rate_target,omitempty"` // -rate, events/s (0 = flat out)
	RateAchieved float64          `json:"rate_achieved"`         // N / (first call → last call returned)
	Rejected     map[string]int64 `json:"rejected,omitempty"`    // track errors by reason
	CloseS       float64          `json:"close_s"`               // Close called → returned (or its deadline)

	// -outcomes: every event's end, from the SDK's callbacks and the sink's
	// /seen. Each accepted event is delivered (at the sink), failed or
	// handed back (the app was told through OnError/Callback.Failure),
	// abandoned or dropped (peers: Callback.Failure while Close runs, or
	// ErrTooManyRequests), or nothing at all.
	Outcomes  *Outcomes `json:"outcomes,omitempty"`
	Samples   int       `json:"samples,omitempty"`     // -sample: samples taken
	PeakHeapB uint64    `json:"peak_heap_b,omitempty"` // -sample: most heap object bytes in any sample
	PeakRSSB  uint64    `json:"peak_rss_b,omitempty"`  // -sample: most resident bytes in any sample

	// ours-durable: the disk buffer directory's size (files' apparent
	// sizes), the most seen in samples every 100 ms and what Close left.
	DiskPeakB int64 `json:"disk_peak_b,omitempty"`
	DiskLeftB int64 `json:"disk_left_b,omitempty"`
}

// Outcomes is the per-event accounting of a run (-outcomes).
type Outcomes struct {
	AtSink     int64 `json:"at_sink"`     // events the sink recorded (distinct)
	Rejected   int64 `json:"rejected"`    // the enqueue call returned an error
	Failed     int64 `json:"failed"`      // told: OnError with a failure (ours), Callback.Failure before Close (peers)
	HandedBack int64 `json:"handed_back"` // told: OnError with ErrShutdownInterrupted (ours), and KeptOnDisk
	Abandoned  int64 `json:"abandoned"`   // peers: Callback.Failure while Close ran (their Close gives up on retries)
	Dropped    int64 `json:"dropped"`     // peers: Callback.Failure with ErrTooManyRequests (1000 sends in flight)
	// KeptOnDisk (ours-durable): handed back without a callback, kept on
	// disk by Close for the next start (Stats.OnDisk): counted by the
	// client, not per event.
	KeptOnDisk int64 `json:"kept_on_disk,omitempty"`
	// Lost: the sink never got it and the app was not told, or (peers) it
	// was abandoned or dropped. The count of events, not at the sink, that
	// were neither rejected, failed nor handed back.
	Lost int64 `json:"lost"`
	// ToldButAtSink: failed or handed back, yet the sink has it (a lost
	// acknowledgement).
	ToldButAtSink int64 `json:"told_but_at_sink"`

	// Outage (the sink reported a window): the backlog is every accepted
	// event enqueued before the sink recovered that the sink had not
	// recorded by then. BacklogDeliveredS is how long after the recovery the
	// last of them reached the sink; BacklogUndelivered never did.
	OutageS            float64 `json:"outage_s,omitempty"`
	Backlog            int64   `json:"backlog,omitempty"`
	BacklogDeliveredS  float64 `json:"backlog_delivered_s,omitempty"`
	BacklogUndelivered int64   `json:"backlog_undelivered,omitempty"`
	OutagePeakHeapB    uint64  `json:"outage_peak_heap_b,omitempty"`      // -sample: most heap object bytes during the outage
	OutagePeakRSSB     uint64  `json:"outage_peak_rss_b,omitempty"`       // -sample: most resident bytes during the outage
	OutagePeakPending  int64   `json:"outage_peak_pending,omitempty"`     // -sample: most accepted-but-unsettled events during the outage
	OutagePeakPendingE int64   `json:"outage_peak_pending_end,omitempty"` // pending at the outage's end
}

// Per-event outcome codes (-outcomes).
const (
	evNone uint8 = iota
	evRejected
	evFailed
	evHandedBack
	evAbandoned
	evDropped
)

// ledger records each event's outcome (-outcomes); callbacks run on the
// SDKs' goroutines.
type ledger struct {
	mu      sync.Mutex
	out     []uint8
	closing atomic.Bool // Close has been called (peers: failures now mean abandoned)
}

func (l *ledger) set(i int, o uint8) {
	if l == nil || i < 0 {
		return
	}
	l.mu.Lock()
	if i < len(l.out) {
		l.out[i] = o
	}
	l.mu.Unlock()
}

// amountOf returns properties.amount of a message the SDK hands back.
func amountOf(p map[string]any) int {
	if v, ok := p["amount"].(int); ok {
		return v
	}
	return -1
}

type quiet struct{}

func (quiet) Logf(string, ...any)   {}
func (quiet) Errorf(string, ...any) {}

type counter struct{ ok, failed atomic.Int64 }

// peerOutcome classifies a peer's Callback.Failure: ErrTooManyRequests is a
// drop, a failure while Close runs is an abandoned retry, anything else a
// failure after its attempts ran out.
func peerOutcome(lg *ledger, err, tooMany error) uint8 {
	switch {
	case errors.Is(err, tooMany):
		return evDropped
	case lg.closing.Load():
		return evAbandoned
	}
	return evFailed
}

type segCallback struct {
	*counter
	lg *ledger
}

func (c segCallback) Success(segment.Message) { c.ok.Add(1) }
func (c segCallback) Failure(m segment.Message, err error) {
	c.failed.Add(1)
	if c.lg == nil {
		return
	}
	o := peerOutcome(c.lg, err, segment.ErrTooManyRequests)
	switch t := m.(type) {
	case segment.Track:
		c.lg.set(amountOf(t.Properties), o)
	case *segment.Track:
		c.lg.set(amountOf(t.Properties), o)
	}
}

type phCallback struct {
	*counter
	lg *ledger
}

func (c phCallback) Success(posthog.APIMessage) { c.ok.Add(1) }
func (c phCallback) Failure(m posthog.APIMessage, err error) {
	c.failed.Add(1)
	if c.lg == nil {
		return
	}
	o := peerOutcome(c.lg, err, posthog.ErrTooManyRequests)
	switch t := m.(type) {
	case posthog.CaptureInApi:
		c.lg.set(amountOf(t.Properties), o)
	case *posthog.CaptureInApi:
		c.lg.set(amountOf(t.Properties), o)
	}
}

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
	// pending is how many accepted events have no outcome yet.
	pending func(accepted int64) int64
}

func newClient(ctx context.Context, sdk, endpoint string, drain bool, lg *ledger) (*client, error) {
	capacityOpt := []ours.Option{}
	if base, capText, ok := strings.Cut(sdk, ":"); ok && strings.HasPrefix(base, "ours") {
		// "ours-block:50000": the same client with QueueCapacity 50 000.
		n, err := strconv.Atoi(capText)
		if err != nil {
			return nil, fmt.Errorf("-sdk %q: queue capacity: %w", sdk, err)
		}
		sdk = base
		capacityOpt = append(capacityOpt, ours.WithQueueCapacity(n))
	}
	switch sdk {
	case "ours", "ours-block", "ours-durable":
		// Defaults except the endpoint (FlushAt 250, 8 consumers, queue
		// 30 000, no gzip, silent logger). Track never blocks: with a full
		// queue it returns ErrQueueFull and the event is dropped.
		//
		// "ours-block" is the same client used through its blocking mode,
		// EnqueueContext, which waits for queue room (until the -timeout
		// deadline) like segment's and posthog's Enqueue do implicitly (they
		// block on a 100-slot channel).
		opts := append([]ours.Option{ours.WithEndpoint(endpoint)}, capacityOpt...)
		// "ours-durable" adds the disk buffer (default fsync policy: every
		// second) in a fresh temporary directory, removed after the run;
		// its size is sampled while the run goes on.
		var disk *diskMeter
		if sdk == "ours-durable" {
			dir, err := os.MkdirTemp("", "bench-durable-*")
			if err != nil {
				return nil, err
			}
			opts = append(opts, ours.WithDiskBuffer(dir))
			disk = startDiskMeter(dir)
		}
		if lg != nil {
			// Only with -outcomes: how the app is told what failed.
			opts = append(opts, ours.WithOnError(func(err error, evs []ours.Message) {
				o := evFailed
				if errors.Is(err, ours.ErrShutdownInterrupted) {
					o = evHandedBack
				}
				for _, m := range evs {
					switch t := m.(type) {
					case ours.Track:
						lg.set(amountOf(t.Properties), o)
					case *ours.Track:
						lg.set(amountOf(t.Properties), o)
					}
				}
			}))
		}
		if f := os.Getenv("BENCH_ATTEMPT_LOG"); f != "" { // diagnosis only
			attemptLog = startAttemptLog(f)
			opts = append(opts, ours.WithHTTPClient(&http.Client{Transport: attemptLog}))
		}
		c, err := ours.New(writeKey, opts...)
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
			after: func(r *Result) {
				s := c.Stats()
				r.Ours = &s
				if disk != nil {
					r.DiskPeakB, r.DiskLeftB = disk.stop()
				}
			},
			pending: func(int64) int64 { return c.Stats().Pending },
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
			Callback:  segCallback{cnt, lg},
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
			pending: func(acc int64) int64 { return acc - cnt.ok.Load() - cnt.failed.Load() },
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
			Callback:  phCallback{cnt, lg},
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
			pending: func(acc int64) int64 { return acc - cnt.ok.Load() - cnt.failed.Load() },
		}, nil
	case "floor", "floor-http":
		return newFloorClient(endpoint, sdk == "floor-http"), nil // floor.go
	}
	return nil, fmt.Errorf("unknown -sdk %q (ours, ours-block, ours-durable, segment, posthog, floor, floor-http)", sdk)
}

// writeHeapProfile writes the live heap (after a GC) to path: what the
// client holds in the middle of a flat-out run.
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		log.Fatal(err)
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		log.Fatal(err)
	}
	f.Close()
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
	sdk := flag.String("sdk", "ours", "SDK: ours, ours-block, ours-durable, segment, posthog, floor (no SDK: the HTTP exchange and a minimal encoder), floor-http (the HTTP exchange alone)")
	n := flag.Int("n", 200000, "number of track calls")
	endpoint := flag.String("endpoint", "", "sink base URL, e.g. http://127.0.0.1:8080")
	statsURL := flag.String("stats", "", "sink stats URL (default <endpoint>/stats; \"-\" to skip)")
	timeout := flag.Duration("timeout", 10*time.Minute, "deadline for the whole run (enqueue, drain and Close)")
	closeTimeout := flag.Duration("close-timeout", 0, "deadline for Close alone (0: what is left of -timeout)")
	rate := flag.Float64("rate", 0, "pace the track calls at this many events/s by wall time (0: flat out)")
	outcomes := flag.Bool("outcomes", false, "follow every event to its end (registers ours' OnError; needs the sink's /seen)")
	sample := flag.Duration("sample", 0, "sample heap, RSS and pending events at this interval (0: off)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile (New → Close) to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile (every allocation sampled) to this file")
	heapprofile := flag.String("heapprofile", "", "flat out: write a heap profile (live objects after a GC) at the middle call to this file")
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
	var lg *ledger
	var enqMS []int32 // -outcomes: ms since t0 at which event i was offered
	if *outcomes {
		lg = &ledger{out: make([]uint8, *n)}
		enqMS = make([]int32, *n)
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
	if *heapprofile != "" && *memprofile == "" {
		runtime.MemProfileRate = 512 // fine enough to see per-consumer buffers
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	ru0 := rusage.Self()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	c, err := newClient(ctx, *sdk, *endpoint, *drain, lg)
	if err != nil {
		log.Fatal(err)
	}
	res := Result{SDK: *sdk, N: *n, GOMAXPROCS: runtime.GOMAXPROCS(0), RateTarget: *rate}

	var accepted atomic.Int64 // kept only with -sample (pending events of the peers)
	var queueFull int64       // rejections with ErrQueueFull itself: the classic run's hot path stays a counter
	var smp *sampler
	if *sample > 0 {
		smp = startSampler(*sample, func() int64 {
			if c.pending == nil {
				return 0
			}
			return c.pending(accepted.Load())
		})
	}

	call := func(i int, ms int32) {
		err := c.track(i, users[i%numUsers])
		if enqMS != nil {
			enqMS[i] = ms
		}
		if err == nil {
			if smp != nil {
				accepted.Add(1)
			}
			return
		}
		if res.TrackErrors == 0 {
			res.FirstError = err.Error()
			res.Rejected = map[string]int64{}
		}
		res.TrackErrors++
		if err == ours.ErrQueueFull {
			queueFull++
		} else {
			res.Rejected[reason(err)]++
		}
		lg.set(i, evRejected)
	}
	tp := time.Now() // pacing starts once the client exists
	if *rate > 0 {
		// Every iteration makes the calls that are due by now, then sleeps
		// until the next one is due (at least 1 ms): bursts of ~rate/1000.
		for i := 0; i < *n; {
			el := time.Since(tp)
			due := min(int(el.Seconds()**rate)+1, *n)
			ms := int32(time.Since(t0) / time.Millisecond)
			for ; i < due; i++ {
				call(i, ms)
			}
			if i < *n {
				next := time.Duration(float64(i) / *rate * 1e9)
				time.Sleep(max(next-time.Since(tp), time.Millisecond))
			}
		}
	} else {
		var ms int32
		for i := 0; i < *n; i++ {
			if enqMS != nil && i%256 == 0 {
				ms = int32(time.Since(t0) / time.Millisecond)
			}
			call(i, ms)
			if i == *n/2 && *heapprofile != "" {
				writeHeapProfile(*heapprofile)
			}
		}
	}
	tEnq := time.Now()
	if *statsURL != "-" {
		// What the sink holds when the producer stops: the delivery rate
		// while producing, without the drain that follows (the retry tail).
		if st, err := fetchStats(*statsURL); err == nil {
			res.DeliveredAtEnqueueEnd = st.DistinctSeq
			if d := tEnq.Sub(t0).Seconds(); d > 0 {
				res.SteadyEventsPerS = float64(st.DistinctSeq) / d
			}
		}
	}
	if queueFull > 0 {
		res.Rejected[reason(ours.ErrQueueFull)] += queueFull
	}
	if d := tEnq.Sub(tp); d > 0 {
		res.RateAchieved = float64(*n) / d.Seconds()
	}
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
	cctx := ctx
	if *closeTimeout > 0 {
		var ccancel context.CancelFunc
		cctx, ccancel = context.WithTimeout(ctx, *closeTimeout)
		defer ccancel()
	}
	if lg != nil {
		lg.closing.Store(true)
	}
	tc := time.Now()
	attemptLog.note("close")
	cerr := c.close(cctx)
	t1 := time.Now()
	attemptLog.note("closed")
	attemptLog.write()
	res.CloseS = t1.Sub(tc).Seconds()
	ru1 := rusage.Self()
	runtime.ReadMemStats(&m1)
	if *cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	var samples []sampleT
	if smp != nil {
		samples = smp.stop()
		res.Samples = len(samples)
		for _, x := range samples {
			res.PeakHeapB = max(res.PeakHeapB, x.heap)
			res.PeakRSSB = max(res.PeakRSSB, x.rss)
		}
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
			if lg != nil {
				seenURL := strings.TrimSuffix(*statsURL, "/stats") + "/seen"
				if sinkStart, seen, err := fetchSeen(seenURL); err != nil {
					res.SinkStatErr = err.Error()
				} else {
					res.Outcomes = account(lg, seen, sinkStart, t0, enqMS, st, samples)
					if res.Ours != nil && res.Ours.OnDisk > 0 {
						// ours-durable: events Close kept on disk get no
						// callback; the client counts them (Stats.OnDisk)
						// and the next start sends them. They are among the events neither at
						// the sink nor told: handed back, not lost.
						k := min(res.Ours.OnDisk, res.Outcomes.Lost)
						res.Outcomes.KeptOnDisk = k
						res.Outcomes.HandedBack += k
						res.Outcomes.Lost -= k
					}
				}
			}
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		log.Fatal(err)
	}
}

// reason names a track error for the rejected-by-reason counts.
func reason(err error) string {
	switch {
	case errors.Is(err, ours.ErrQueueFull):
		return "queue full"
	case errors.Is(err, ours.ErrClosed), errors.Is(err, segment.ErrClosed), errors.Is(err, posthog.ErrClosed):
		return "closed"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return err.Error()
}

// account combines the ledger with the sink's first-seen times.
func account(lg *ledger, seen []uint32, sinkStart, t0 time.Time, enqMS []int32, st sink.Stats, samples []sampleT) *Outcomes {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	o := &Outcomes{}
	var recovery, outStart time.Time
	if st.OutageEndUnixNS != 0 {
		outStart = time.Unix(0, st.OutageStartUnixNS)
		recovery = time.Unix(0, st.OutageEndUnixNS)
		o.OutageS = recovery.Sub(outStart).Seconds()
	}
	var lastBacklog time.Time
	for i, ev := range lg.out {
		var at time.Time // zero: never at the sink
		if i < len(seen) && seen[i] != 0 {
			at = sinkStart.Add(time.Duration(seen[i]-1) * time.Millisecond)
			o.AtSink++
		}
		switch ev {
		case evRejected:
			o.Rejected++
			continue
		case evFailed:
			o.Failed++
		case evHandedBack:
			o.HandedBack++
		case evAbandoned:
			o.Abandoned++
		case evDropped:
			o.Dropped++
		}
		told := ev == evFailed || ev == evHandedBack
		switch {
		case at.IsZero() && !told:
			o.Lost++
		case !at.IsZero() && told:
			o.ToldButAtSink++
		}
		if !recovery.IsZero() && t0.Add(time.Duration(enqMS[i])*time.Millisecond).Before(recovery) &&
			(at.IsZero() || at.After(recovery)) {
			o.Backlog++
			if at.IsZero() {
				o.BacklogUndelivered++
			} else if at.After(lastBacklog) {
				lastBacklog = at
			}
		}
	}
	if !lastBacklog.IsZero() {
		o.BacklogDeliveredS = lastBacklog.Sub(recovery).Seconds()
	}
	if !recovery.IsZero() {
		for _, x := range samples {
			if x.t.Before(outStart) || x.t.After(recovery) {
				continue
			}
			o.OutagePeakHeapB = max(o.OutagePeakHeapB, x.heap)
			o.OutagePeakRSSB = max(o.OutagePeakRSSB, x.rss)
			o.OutagePeakPending = max(o.OutagePeakPending, x.pending)
			o.OutagePeakPendingE = x.pending
		}
	}
	return o
}

// sampleT is one -sample observation.
type sampleT struct {
	t         time.Time
	heap, rss uint64
	pending   int64
}

type sampler struct {
	stopc chan struct{}
	done  chan []sampleT
}

// startSampler records heap object bytes (runtime/metrics, no stop-the-world),
// resident bytes (/proc/self/statm) and pending events every interval.
func startSampler(every time.Duration, pending func() int64) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan []sampleT, 1)}
	go func() {
		ms := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var out []sampleT
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			metrics.Read(ms)
			var heap uint64
			if ms[0].Value.Kind() == metrics.KindUint64 {
				heap = ms[0].Value.Uint64()
			}
			out = append(out, sampleT{t: time.Now(), heap: heap, rss: rss(), pending: pending()})
			select {
			case <-tk.C:
			case <-s.stopc:
				s.done <- out
				return
			}
		}
	}()
	return s
}

func (s *sampler) stop() []sampleT { close(s.stopc); return <-s.done }

// rss returns the resident set size from /proc/self/statm (0 elsewhere).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

func fetchSeen(url string) (time.Time, []uint32, error) {
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return time.Time{}, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return time.Time{}, nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || len(b) < 8 {
		return time.Time{}, nil, fmt.Errorf("GET %s: %d bytes, %v", url, len(b), err)
	}
	start := time.Unix(0, int64(binary.LittleEndian.Uint64(b)))
	seen := make([]uint32, (len(b)-8)/4)
	for i := range seen {
		seen[i] = binary.LittleEndian.Uint32(b[8+4*i:])
	}
	return start, seen, nil
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
