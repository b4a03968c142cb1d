package main

// The scenario tables: a service that tracks at a steady rate while the
// sink fails part of the time (paced), the blocking mode flat out under
// faults (flat), and a full outage followed by recovery (outage). Every
// scenario runs the SDKs interleaved, one fresh sink per run, like the
// classic table.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaykit/analytics-go/bench/sink"
)

type scenarioOptions struct {
	list         []string
	sdks         []string
	rate         float64
	pacedN       int
	pacedFaults  []string
	closeTimeout time.Duration
	flatN        int
	flatRuns     int
	flatSDKs     []string
	flatFault    string
	outage       time.Duration
	outageAfter  time.Duration
	outageTail   time.Duration
	outageModes  []string
	sample       time.Duration
	pacedSeeds   int
	sickRate     float64
	sickN        int
	sickFail     float64
	sickClose    time.Duration
}

// scenarioFlags registers the scenario flags; the string lists are split
// after flag.Parse by parseScenarioLists.
func scenarioFlags(o *scenarioOptions) {
	listFlag(&o.list, "scenarios", "paced,flat,outage,unhealthy", "scenario tables to run: paced, flat, outage, unhealthy (\"\" for none)")
	listFlag(&o.sdks, "scenario-sdks", "ours,segment,posthog", "SDKs of the paced and outage scenarios")
	flag.Float64Var(&o.rate, "rate", 20000, "paced and outage scenarios: producer rate, events/s")
	flag.IntVar(&o.pacedN, "paced-n", 200000, "paced scenario: events per run")
	listFlag(&o.pacedFaults, "paced-faults", "500,lostack,429", "paced scenario: sink fault modes, one run each")
	flag.DurationVar(&o.closeTimeout, "close-timeout", 10*time.Second, "paced and outage scenarios: deadline of Close")
	flag.IntVar(&o.flatN, "flat-n", 200000, "flat scenario: events per run")
	flag.IntVar(&o.flatRuns, "flat-runs", 3, "flat scenario: runs per (SDK, fault); the table shows medians")
	listFlag(&o.flatSDKs, "flat-sdks", "ours-block,ours-block:50000,segment,posthog", "flat scenario: SDKs")
	flag.StringVar(&o.flatFault, "flat-fault", "500", "flat scenario: fault mode compared with the clean run")
	flag.DurationVar(&o.outage, "outage", 30*time.Second, "outage scenario: how long the sink fails everything")
	flag.DurationVar(&o.outageAfter, "outage-after", 2*time.Second, "outage scenario: healthy time before the outage (from the first request)")
	flag.DurationVar(&o.outageTail, "outage-tail", 10*time.Second, "outage scenario: the producer goes on this long after recovery")
	listFlag(&o.outageModes, "outage-modes", "500", "outage scenario: 500 (every request answered 500) and/or reset (every connection reset)")
	flag.DurationVar(&o.sample, "sample", 100*time.Millisecond, "paced and outage scenarios: heap/RSS/pending sampling interval")
	flag.IntVar(&o.pacedSeeds, "paced-seeds", 1, "paced scenario: fault seeds (rounds) per (fault, SDK)")
	flag.Float64Var(&o.sickRate, "unhealthy-rate", 2000, "unhealthy scenario: producer rate, events/s")
	flag.IntVar(&o.sickN, "unhealthy-n", 40000, "unhealthy scenario: events per run")
	flag.Float64Var(&o.sickFail, "unhealthy-fail", 0.8, "unhealthy scenario: fraction of requests answered 500")
	flag.DurationVar(&o.sickClose, "unhealthy-close", 30*time.Second, "unhealthy scenario: deadline of Close")
}

type listValue struct{ p *[]string }

func (v listValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}
func (v listValue) Set(s string) error { *v.p = split(s); return nil }

func listFlag(p *[]string, name, def, usage string) {
	*p = split(def)
	flag.Var(listValue{p}, name, usage)
}

func (o *scenarioOptions) has(name string) bool { return slices.Contains(o.list, name) }

// outageN is the event count of an outage run: the producer runs through
// the healthy start, the outage and the tail.
func (o *scenarioOptions) outageN() int {
	return int(o.rate * (o.outageAfter + o.outage + o.outageTail).Seconds())
}

func (o *scenarioOptions) pacedArgs() []string {
	return []string{"-rate", strconv.FormatFloat(o.rate, 'f', -1, 64), "-outcomes", "-sample", o.sample.String(),
		"-drain=false", "-close-timeout", o.closeTimeout.String()}
}

func runScenarios(o *options, jsonl io.Writer) ([]*record, error) {
	sc := &o.sc
	var specs []spec
	if sc.has("paced") {
		for r := 0; r < max(sc.pacedSeeds, 1); r++ {
			for _, f := range sc.pacedFaults {
				for _, sdk := range sc.sdks {
					specs = append(specs, spec{sdk: sdk, n: sc.pacedN, fault: f, round: r, scenario: "paced", drvArgs: sc.pacedArgs()})
				}
			}
		}
	}
	if sc.has("unhealthy") {
		for _, sdk := range sc.sdks {
			specs = append(specs, spec{sdk: sdk, n: sc.sickN, fault: sink.Fault500, scenario: "unhealthy",
				sinkArgs: []string{"-rate", strconv.FormatFloat(sc.sickFail, 'f', -1, 64)},
				drvArgs: []string{"-rate", strconv.FormatFloat(sc.sickRate, 'f', -1, 64), "-outcomes", "-sample", sc.sample.String(),
					"-drain=false", "-close-timeout", sc.sickClose.String()}})
		}
	}
	if sc.has("flat") {
		for r := 0; r < sc.flatRuns; r++ {
			for _, f := range []string{sink.FaultNone, sc.flatFault} {
				for _, sdk := range sc.flatSDKs {
					specs = append(specs, spec{sdk: sdk, n: sc.flatN, fault: f, round: r, scenario: "flat"})
				}
			}
		}
	}
	if sc.has("outage") {
		for _, m := range sc.outageModes {
			for _, sdk := range sc.sdks {
				specs = append(specs, spec{sdk: sdk, n: sc.outageN(), fault: sink.FaultNone, scenario: "outage-" + m,
					drvArgs: sc.pacedArgs(),
					sinkArgs: []string{"-outage", sc.outage.String(), "-outage-after", sc.outageAfter.String(),
						"-outage-mode", m}})
			}
		}
	}
	var recs []*record
	for _, sp := range specs {
		t := time.Now()
		rec, err := runOne(o, sp)
		if err != nil {
			return nil, fmt.Errorf("%s %s n=%d fault=%s: %v", sp.scenario, sp.sdk, sp.n, sp.fault, err)
		}
		line, _ := json.Marshal(rec)
		jsonl.Write(append(line, '\n'))
		recs = append(recs, rec)
		fmt.Fprintf(os.Stderr, "%-10s %-10s n=%-7d fault=%-7s wall=%6.2fs close=%5.2fs delivered=%-7d rejected=%-6d lost=%-6d (%s)\n",
			sp.scenario, sp.sdk, sp.n, sp.fault, rec.d.WallS, rec.d.CloseS, rec.Sink.DistinctSeq, rec.d.TrackErrors,
			outcomeLost(rec), time.Since(t).Round(100*time.Millisecond))
	}
	return recs, nil
}

// outcomeLost is the per-event lost count when the run followed outcomes,
// otherwise N − distinct events at the sink − rejected.
func outcomeLost(r *record) int64 {
	if r.d.Outcomes != nil {
		return r.d.Outcomes.Lost
	}
	return r.lost() - r.d.TrackErrors
}

func pct(x int64, n int) string {
	if n == 0 {
		return "–"
	}
	p := 100 * float64(x) / float64(n)
	if p != 0 && p < 0.01 {
		return "<0.01 %"
	}
	return fmt.Sprintf("%.2f %%", p)
}

func cell(s string) string {
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 90 {
		s = s[:87] + "…"
	}
	if s == "" {
		return "nil"
	}
	return s
}

func mb(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func writeScenarios(w io.Writer, o *options, recs []*record) {
	if len(recs) == 0 {
		return
	}
	sc := &o.sc
	by := func(scenario string) []*record {
		var out []*record
		for _, r := range recs {
			if r.Scenario == scenario {
				out = append(out, r)
			}
		}
		return out
	}

	if rs := by("paced"); len(rs) > 0 {
		fmt.Fprintf(w, "\n### Paced: %.0f events/s, %d events, faults at 20 %%, Close deadline %s\n\n",
			sc.rate, sc.pacedN, sc.closeTimeout)
		fmt.Fprintf(w, "Non-blocking Track for ours; default configuration; the peers' Close without a drain. "+
			"lost = not at the sink and the app not told (peers: also abandoned at Close or dropped).\n\n")
		fmt.Fprintf(w, "| fault | seed | SDK | achieved ev/s | rejected | rejected %% | lost | of which abandoned+dropped | failed | handed back | dups | gate violations: by arrival (≥10 ms after the 429), latest; ours also by sentAt | Close s | Close error | wall s |\n")
		fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", 15))
		for _, r := range rs {
			oc := r.d.Outcomes
			if oc == nil {
				oc = &outcomes{}
			}
			gate := "–"
			if r.Fault == sink.Fault429 || r.Fault == sink.FaultLimiter {
				gate = fmt.Sprintf("%d (%d), latest %.1f ms", r.Sink.GateViolations, r.Sink.GateViolations10ms, r.Sink.GateViolationMaxMS)
				if r.SDK == "ours" || r.SDK == "ours-block" {
					gate += fmt.Sprintf("; by sentAt %d, latest %.1f ms", r.Sink.SentAtViolations, r.Sink.SentAtViolationMaxMS)
				}
			}
			fmt.Fprintf(w, "| %s | %d | %s | %.0f | %d | %s | %d | %d | %d | %d | %d | %s | %.2f | %s | %.2f |\n",
				r.Fault, o.seed+uint64(r.Round), r.SDK, r.d.RateAchieved, r.d.TrackErrors, pct(r.d.TrackErrors, r.N), oc.Lost,
				oc.Abandoned+oc.Dropped, oc.Failed, oc.HandedBack, r.dups(), gate, r.d.CloseS, cell(r.d.CloseError), r.d.WallS)
		}
		writeScenarioNotes(w, rs)
	}

	if rs := by("flat"); len(rs) > 0 {
		fmt.Fprintf(w, "\n### Flat out: %d events, clean vs %s at 20 %%, medians of %d runs\n\n", sc.flatN, sc.flatFault, sc.flatRuns)
		fmt.Fprintf(w, "ours-block = EnqueueContext (waits for room); the peers' Enqueue blocks on a 100-slot channel; "+
			"the peers drain before Close (as in the classic table).\n\n")
		fmt.Fprintf(w, "ev/s = events at the sink / wall (New → Close returned); while producing = events at the sink "+
			"when the last call returned / time to that moment (no drain, so no retry tail); "+
			"Close s = the drain of the %s run.\n\n", sc.flatFault)
		fmt.Fprintf(w, "| SDK | clean ev/s | %s ev/s | ratio | clean ev/s while producing | %s ev/s while producing | ratio | "+
			"clean wall s | %s wall s | %s Close s | %s lost | %s rejected |\n",
			sc.flatFault, sc.flatFault, sc.flatFault, sc.flatFault, sc.flatFault, sc.flatFault)
		fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", 12))
		for _, sdk := range sc.flatSDKs {
			med := func(fault string, get func(*record) float64) (float64, bool) {
				var xs []float64
				for _, r := range rs {
					if r.SDK == sdk && r.Fault == fault {
						xs = append(xs, get(r))
					}
				}
				return median(xs), len(xs) > 0
			}
			rate := func(r *record) float64 { return r.d.EventsPerS }
			wall := func(r *record) float64 { return r.d.WallS }
			cleanRate, ok1 := med(sink.FaultNone, rate)
			badRate, ok2 := med(sc.flatFault, rate)
			if !ok1 || !ok2 {
				continue
			}
			ratio := math.NaN()
			if cleanRate > 0 {
				ratio = badRate / cleanRate
			}
			cleanWall, _ := med(sink.FaultNone, wall)
			badWall, _ := med(sc.flatFault, wall)
			lost, _ := med(sc.flatFault, func(r *record) float64 { return float64(r.lost() - r.d.TrackErrors) })
			rej, _ := med(sc.flatFault, func(r *record) float64 { return float64(r.d.TrackErrors) })
			steady := func(r *record) float64 { return r.d.SteadyEventsPerS }
			cleanSteady, _ := med(sink.FaultNone, steady)
			badSteady, _ := med(sc.flatFault, steady)
			steadyRatio := math.NaN()
			if cleanSteady > 0 {
				steadyRatio = badSteady / cleanSteady
			}
			badClose, _ := med(sc.flatFault, func(r *record) float64 { return r.d.CloseS })
			fmt.Fprintf(w, "| %s | %.0f | %.0f | %.2f× | %.0f | %.0f | %.2f× | %.2f | %.2f | %.2f | %.0f | %.0f |\n", sdk, cleanRate,
				badRate, ratio, cleanSteady, badSteady, steadyRatio, cleanWall, badWall, badClose, lost, rej)
		}
	}

	if rs := by("unhealthy"); len(rs) > 0 {
		fmt.Fprintf(w, "\n### Unhealthy server: %.0f %% of requests answered 500 at random, %.0f events/s, %d events, Close deadline %s\n\n",
			100*sc.sickFail, sc.sickRate, sc.sickN, sc.sickClose)
		fmt.Fprintf(w, "req/s = sink requests / wall s (New → Close returned); ×seg = that rate over segment's in the same run. "+
			"lost = not at the sink and the app not told.\n\n")
		fmt.Fprintf(w, "| SDK | delivered | delivered %% | failed | handed back | lost | requests | req/s | ×seg req/s | Close s | wall s |\n")
		fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", 11))
		segRate := math.NaN()
		for _, r := range rs {
			if r.SDK == "segment" && r.d.WallS > 0 {
				segRate = float64(r.Sink.Requests) / r.d.WallS
			}
		}
		for _, r := range rs {
			oc := r.d.Outcomes
			if oc == nil {
				oc = &outcomes{}
			}
			rps := math.NaN()
			if r.d.WallS > 0 {
				rps = float64(r.Sink.Requests) / r.d.WallS
			}
			fmt.Fprintf(w, "| %s | %d | %s | %d | %d | %d | %d | %.1f | %.2f× | %.2f | %.2f |\n",
				r.SDK, r.Sink.DistinctSeq, pct(r.Sink.DistinctSeq, r.N), oc.Failed, oc.HandedBack, oc.Lost,
				r.Sink.Requests, rps, rps/segRate, r.d.CloseS, r.d.WallS)
		}
		writeScenarioNotes(w, rs)
	}

	for _, m := range sc.outageModes {
		rs := by("outage-" + m)
		if len(rs) == 0 {
			continue
		}
		what := "every request answered 500"
		if m == sink.OutageReset {
			what = "every connection reset (RST), as if nothing listened"
		}
		fmt.Fprintf(w, "\n### Outage (%s): %.0f events/s; healthy %s, outage %s, then %s more; Close deadline %s\n\n",
			what, sc.rate, sc.outageAfter, sc.outage, sc.outageTail, sc.closeTimeout)
		fmt.Fprintf(w, "attempts = requests (or connections) the sink saw during the outage. backlog = accepted events "+
			"enqueued before recovery that the sink had not recorded by then; delivered after = recovery → the last of them "+
			"at the sink. Peaks are sampled every %s during the outage.\n\n", sc.sample)
		fmt.Fprintf(w, "| SDK | events | attempts/s | max attempts in 1 s | backlog | backlog delivered after s | backlog never delivered | rejected | rejected %% | lost | failed | handed back | peak heap MB | peak RSS MB | peak pending | Close s | Close error |\n")
		fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", 17))
		for _, r := range rs {
			oc := r.d.Outcomes
			if oc == nil {
				oc = &outcomes{}
			}
			fmt.Fprintf(w, "| %s | %d | %.1f | %d | %d | %.2f | %d | %d | %s | %d | %d | %d | %s | %s | %d | %.2f | %s |\n",
				r.SDK, r.N, r.Sink.OutageAttemptsPS, r.Sink.OutageMaxIn1s, oc.Backlog, oc.BacklogDeliveredS,
				oc.BacklogUndelivered, r.d.TrackErrors, pct(r.d.TrackErrors, r.N), oc.Lost, oc.Failed, oc.HandedBack,
				mb(oc.OutagePeakHeapB), mb(oc.OutagePeakRSSB), oc.OutagePeakPending, r.d.CloseS, cell(r.d.CloseError))
		}
		writeScenarioNotes(w, rs)
	}
}

// writeScenarioNotes lists, per run, the rejections by reason and the
// SDK-side counters, so every figure can be traced.
func writeScenarioNotes(w io.Writer, rs []*record) {
	fmt.Fprintf(w, "\n")
	for _, r := range rs {
		var side string
		if len(r.d.Ours) > 0 && string(r.d.Ours) != "null" {
			side = "Stats=" + string(r.d.Ours)
		} else {
			side = fmt.Sprintf("callbacks ok=%d failed=%d", r.d.CBSuccess, r.d.CBFailure)
		}
		oc := r.d.Outcomes
		var extra string
		if oc != nil {
			extra = fmt.Sprintf(" abandoned=%d dropped=%d told_but_at_sink=%d", oc.Abandoned, oc.Dropped, oc.ToldButAtSink)
		}
		st, _ := json.Marshal(r.Sink.Status)
		rej, _ := json.Marshal(r.d.Rejected)
		fmt.Fprintf(w, "- %s %s fault=%s: sink requests=%d status=%s; rejected by reason=%s;%s peak RSS %s MB; %s\n",
			r.Scenario, r.SDK, r.Fault, r.Sink.Requests, st, rej, extra, mb(uint64(r.d.PeakRSSKB)<<10), side)
	}
}
