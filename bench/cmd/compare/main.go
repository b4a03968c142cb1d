// Command compare runs the SDK comparison: for every run it starts a fresh
// sink process, runs one driver process against it, collects the driver's
// JSON line and the sink's stats, and stops the sink. SDKs are interleaved
// within a round (ours, segment, posthog, …) so drift in machine load
// spreads over all of them. It prints one Markdown table of medians (the
// classic comparison) and then the scenario tables (scenarios.go).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relaykit/analytics-go/bench/sink"
)

// driverResult mirrors the driver's JSON line (fields the report uses).
type driverResult struct {
	SDK              string           `json:"sdk"`
	N                int              `json:"n"`
	WallS            float64          `json:"wall_s"`
	EnqueueS         float64          `json:"enqueue_s"`
	SteadyEventsPerS float64          `json:"steady_events_per_s"`
	TrackErrors      int64            `json:"track_errors"`
	CloseError       string           `json:"close_error"`
	CloseTimeout     bool             `json:"close_timeout"`
	CPUUSPerEv       float64          `json:"cpu_us_per_event"`
	MallocsPerEv     float64          `json:"mallocs_per_event"`
	BytesPerEv       float64          `json:"bytes_per_event"`
	PeakRSSKB        int64            `json:"peak_rss_kb"`
	Delivered        int64            `json:"delivered"`
	EventsPerS       float64          `json:"events_per_s"`
	Ours             json.RawMessage  `json:"ours_stats"`
	CBSuccess        int64            `json:"cb_success"`
	CBFailure        int64            `json:"cb_failure"`
	RateAchieved     float64          `json:"rate_achieved"`
	Rejected         map[string]int64 `json:"rejected"`
	CloseS           float64          `json:"close_s"`
	PeakHeapB        uint64           `json:"peak_heap_b"`
	PeakRSSB         uint64           `json:"peak_rss_b"`
	Outcomes         *outcomes        `json:"outcomes"`
}

// outcomes mirrors the driver's Outcomes.
type outcomes struct {
	AtSink             int64   `json:"at_sink"`
	Rejected           int64   `json:"rejected"`
	Failed             int64   `json:"failed"`
	HandedBack         int64   `json:"handed_back"`
	Abandoned          int64   `json:"abandoned"`
	Dropped            int64   `json:"dropped"`
	Lost               int64   `json:"lost"`
	ToldButAtSink      int64   `json:"told_but_at_sink"`
	OutageS            float64 `json:"outage_s"`
	Backlog            int64   `json:"backlog"`
	BacklogDeliveredS  float64 `json:"backlog_delivered_s"`
	BacklogUndelivered int64   `json:"backlog_undelivered"`
	OutagePeakHeapB    uint64  `json:"outage_peak_heap_b"`
	OutagePeakRSSB     uint64  `json:"outage_peak_rss_b"`
	OutagePeakPending  int64   `json:"outage_peak_pending"`
}

// record is one run: what the driver and the sink reported.
type record struct {
	Scenario string          `json:"scenario,omitempty"` // "" for the classic table
	Round    int             `json:"round"`              // run index within (N, fault)
	Fault    string          `json:"fault"`
	N        int             `json:"n"`
	SDK      string          `json:"sdk"`
	Driver   json.RawMessage `json:"driver"`
	Sink     sink.Stats      `json:"sink"`
	d        driverResult
}

func (r *record) lost() int64 { return int64(r.N) - r.Sink.DistinctSeq }
func (r *record) dups() int64 { return r.Sink.Events - r.Sink.DistinctSeq }
func (r *record) sinkCPU() float64 {
	return float64(r.Sink.CPUUserUS+r.Sink.CPUSysUS) / float64(r.N)
}

type options struct {
	bin, outDir   string
	sdks          []string
	ns            []int
	runs          int
	faults        []string
	faultN        int
	timeout       time.Duration
	seed          uint64
	driverProfile string
	classic       bool
	sc            scenarioOptions
}

func main() {
	var o options
	var sdks, ns, faults string
	flag.StringVar(&o.bin, "bin", "bin", "directory with the sink and driver binaries")
	flag.StringVar(&o.outDir, "out", "results", "directory for the raw JSONL and the Markdown table")
	flag.StringVar(&sdks, "sdks", "ours,segment,posthog,ours-block", "SDKs in the order they run within a round")
	flag.StringVar(&ns, "n", "200000,1000000", "event counts of the no-fault runs")
	flag.IntVar(&o.runs, "runs", 3, "no-fault runs per (SDK, N); the table shows medians")
	flag.StringVar(&faults, "faults", "500,429,lostack", "fault modes, one run each at -fault-n (\"\" for none)")
	flag.IntVar(&o.faultN, "fault-n", 200000, "event count of the fault runs")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "driver Close deadline")
	flag.Uint64Var(&o.seed, "seed", 1, "base seed of the sink's fault RNG (same for every SDK in a round)")
	flag.BoolVar(&o.classic, "classic", true, "run the classic comparison (-n, -runs, -faults)")
	scenarioFlags(&o.sc)
	flag.Parse()
	o.sdks = split(sdks)
	for _, s := range split(ns) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			log.Fatalf("bad -n %q", s)
		}
		o.ns = append(o.ns, n)
	}
	o.faults = split(faults)

	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		log.Fatal(err)
	}
	stamp := time.Now().Format("20060102-150405")
	jsonl, err := os.Create(filepath.Join(o.outDir, stamp+".jsonl"))
	if err != nil {
		log.Fatal(err)
	}
	defer jsonl.Close()

	type plan struct {
		n, round int
		fault    string
	}
	var plans []plan
	for _, n := range o.ns {
		if !o.classic {
			break
		}
		for r := 0; r < o.runs; r++ {
			plans = append(plans, plan{n, r, sink.FaultNone})
		}
	}
	for _, f := range o.faults {
		if !o.classic {
			break
		}
		plans = append(plans, plan{o.faultN, 0, f})
	}

	start := time.Now()
	var recs []*record
	for _, p := range plans {
		for _, sdk := range o.sdks {
			rec, err := runOne(&o, spec{sdk: sdk, n: p.n, fault: p.fault, round: p.round})
			if err != nil {
				log.Fatalf("%s n=%d fault=%s: %v", sdk, p.n, p.fault, err)
			}
			line, _ := json.Marshal(rec)
			jsonl.Write(append(line, '\n'))
			recs = append(recs, rec)
			fmt.Fprintf(os.Stderr, "%-8s n=%-8d fault=%-7s run=%d wall=%7.2fs delivered=%-8d lost=%-7d dups=%-6d cpu=%.2fµs/ev\n",
				sdk, p.n, p.fault, p.round+1, rec.d.WallS, rec.Sink.DistinctSeq, rec.lost(), rec.dups(), rec.d.CPUUSPerEv)
		}
	}

	var md bytes.Buffer
	if len(recs) > 0 {
		fmt.Fprintf(&md, "Go %s, GOMAXPROCS %d, %s/%s; medians of %d no-fault runs, 1 run per fault; classic bench time %s.\n\n",
			runtime.Version(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, o.runs, time.Since(start).Round(time.Second))
		writeTable(&md, &o, recs)
		writeNotes(&md, recs)
	}
	srecs, err := runScenarios(&o, jsonl)
	if err != nil {
		log.Fatal(err)
	}
	writeScenarios(&md, &o, srecs)
	os.Stdout.Write(md.Bytes())
	_ = os.WriteFile(filepath.Join(o.outDir, stamp+".md"), md.Bytes(), 0o644)
	fmt.Fprintf(os.Stderr, "raw results: %s\n", jsonl.Name())
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// spec is one run: the SDK, the workload and the sink's behaviour.
type spec struct {
	sdk      string
	n        int
	fault    string
	round    int
	scenario string   // "" for the classic table
	sinkArgs []string // extra sink flags
	drvArgs  []string // extra driver flags
}

// runOne starts a sink, runs one driver against it and stops the sink.
func runOne(o *options, sp spec) (*record, error) {
	sdk, n, fault, round := sp.sdk, sp.n, sp.fault, sp.round
	sk := exec.Command(filepath.Join(o.bin, "sink"), append([]string{"-fault", fault,
		"-seed", strconv.FormatUint(o.seed+uint64(round), 10)}, sp.sinkArgs...)...)
	sk.Stderr = os.Stderr
	out, err := sk.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := sk.Start(); err != nil {
		return nil, err
	}
	defer func() { // stop the sink we started (by its pid) if still running
		if sk.ProcessState == nil {
			_ = sk.Process.Kill()
			_ = sk.Wait()
		}
	}()
	br := bufio.NewReader(out)
	first, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "LISTEN ") {
		return nil, fmt.Errorf("sink did not start: %q %v", first, err)
	}
	base := strings.TrimSpace(strings.TrimPrefix(first, "LISTEN "))

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout+time.Minute)
	defer cancel()
	drv := exec.CommandContext(ctx, filepath.Join(o.bin, "driver"), append([]string{
		"-sdk", sdk, "-n", strconv.Itoa(n), "-endpoint", base, "-timeout", o.timeout.String()}, sp.drvArgs...)...)
	drv.Stderr = os.Stderr
	line, err := drv.Output()
	if err != nil {
		return nil, fmt.Errorf("driver: %v", err)
	}
	rec := &record{Scenario: sp.scenario, Round: round, Fault: fault, N: n, SDK: sdk, Driver: bytes.TrimSpace(line)}
	if err := json.Unmarshal(line, &rec.d); err != nil {
		return nil, fmt.Errorf("driver output %q: %v", line, err)
	}

	resp, err := http.Get(base + "/stats")
	if err != nil {
		return nil, err
	}
	err = json.NewDecoder(resp.Body).Decode(&rec.Sink)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	_ = sk.Process.Signal(syscall.SIGTERM)
	_, _ = io.Copy(io.Discard, br)
	_ = sk.Wait()
	return rec, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

type metric struct {
	name  string
	get   func(*record) float64
	ratio bool // also show median(sdk / segment in the same round)
	fmt   string
}

var metrics = []metric{
	{"wall s", func(r *record) float64 { return r.d.WallS }, false, "%.2f"},
	{"delivered ev/s", func(r *record) float64 { return r.d.EventsPerS }, true, "%.0f"},
	{"CPU µs/ev", func(r *record) float64 { return r.d.CPUUSPerEv }, true, "%.2f"},
	{"allocs/ev", func(r *record) float64 { return r.d.MallocsPerEv }, true, "%.1f"},
	{"bytes/ev", func(r *record) float64 { return r.d.BytesPerEv }, true, "%.0f"},
	{"peak RSS MB", func(r *record) float64 { return float64(r.d.PeakRSSKB) / 1024 }, true, "%.1f"},
	{"lost", func(r *record) float64 { return float64(r.lost()) }, false, "%.0f"},
	{"dups", func(r *record) float64 { return float64(r.dups()) }, false, "%.0f"},
	{"rejected", func(r *record) float64 { return float64(r.d.TrackErrors) }, false, "%.0f"},
	{"sink CPU µs/ev", func(r *record) float64 { return r.sinkCPU() }, false, "%.2f"},
	{"gate viol.", func(r *record) float64 { return float64(r.Sink.GateViolations) }, false, "%.0f"},
}

func writeTable(w io.Writer, o *options, recs []*record) {
	type key struct {
		n     int
		fault string
	}
	var keys []key
	for _, r := range recs {
		k := key{r.N, r.Fault}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	head := []string{"SDK", "N", "fault"}
	for _, m := range metrics {
		head = append(head, m.name)
	}
	for _, m := range metrics {
		if m.ratio {
			head = append(head, strings.Split(m.name, " ")[0]+" ×seg")
		}
	}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, k := range keys {
		for _, sdk := range o.sdks {
			var mine []*record
			seg := map[int]*record{}
			for _, r := range recs {
				if r.N == k.n && r.Fault == k.fault {
					if r.SDK == sdk {
						mine = append(mine, r)
					}
					if r.SDK == "segment" {
						seg[r.Round] = r
					}
				}
			}
			if len(mine) == 0 {
				continue
			}
			row := []string{sdk, strconv.Itoa(k.n), k.fault}
			for _, m := range metrics {
				var xs []float64
				for _, r := range mine {
					xs = append(xs, m.get(r))
				}
				row = append(row, fmt.Sprintf(m.fmt, median(xs)))
			}
			for _, m := range metrics {
				if !m.ratio {
					continue
				}
				var xs []float64
				for _, r := range mine {
					if s := seg[r.Round]; s != nil && m.get(s) != 0 {
						xs = append(xs, m.get(r)/m.get(s))
					}
				}
				if len(xs) == 0 {
					row = append(row, "–")
				} else {
					row = append(row, fmt.Sprintf("%.2f", median(xs)))
				}
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
}

// writeNotes lists SDK-side accounting for every fault run and for any run
// whose Close failed, so losses can be attributed.
func writeNotes(w io.Writer, recs []*record) {
	fmt.Fprintf(w, "\nPer-run details (fault runs and runs with rejected events or a Close error):\n\n")
	for _, r := range recs {
		if r.Fault == sink.FaultNone && r.d.TrackErrors == 0 && r.d.CloseError == "" {
			continue
		}
		var sdkSide string
		if len(r.d.Ours) > 0 && string(r.d.Ours) != "null" {
			sdkSide = "Stats=" + string(r.d.Ours)
		} else {
			sdkSide = fmt.Sprintf("callbacks ok=%d failed=%d", r.d.CBSuccess, r.d.CBFailure)
		}
		st, _ := json.Marshal(r.Sink.Status)
		closeErr := ""
		if r.d.CloseError != "" {
			closeErr = " close_error=" + strconv.Quote(r.d.CloseError)
		}
		fmt.Fprintf(w, "- %s n=%d fault=%s run=%d: sink requests=%d status=%s recorded_events=%d; rejected=%d; %s%s\n",
			r.SDK, r.N, r.Fault, r.Round+1, r.Sink.Requests, st, r.Sink.Events, r.d.TrackErrors, sdkSide, closeErr)
	}
}
