package analytics

// More checkers of TestSimulation (sim_check_test.go): the counted waits'
// lower ends and their jitter (R26, R61, R63, INV6), the end of a
// rate-limit episode (R35), the probe after a deadline (R64), the
// rate-limited retry that leaves when its deadline passes (R32), the body's
// events within 475 000 bytes (R45), a batch closed before its time (R46),
// the halving after a 400 (R66) and generated messageIds (R2). Like the
// others they read only the record.

import (
	"errors"
	"sort"
	"time"
)

// simAnswer is one answer the client's health window (R60) may hold: a
// 2xx or a counted failure, at the instant it arrived.
type simAnswer struct {
	at    time.Time
	fail  bool
	first string // the batch's first event
}

// simTiming holds what the timing checkers share.
type simTiming struct {
	run     *simRun
	atts    []simAttempt
	seenIDs map[string][]int
	answers []simAnswer // 2xx and counted failures, by arrival
	twoxx   []time.Time
	bad     func(rule, f string, a ...any)
}

func newSimTiming(run *simRun, atts []simAttempt, seenIDs map[string][]int, outs map[string][]simOutcome, bad func(rule, f string, a ...any)) *simTiming {
	t := &simTiming{run: run, atts: atts, seenIDs: seenIDs, bad: bad}
	for ai, a := range atts {
		// A counted failure that spent the batch's budget fails it at
		// once: the client records it nowhere (R27, R28, R60).
		if list := seenIDs[a.ids[0]]; a.class() == clsCounted && list[len(list)-1] == ai {
			if os := outs[a.ids[0]]; len(os) > 0 && (errors.Is(os[0].err, ErrRetriesExhausted) || errors.Is(os[0].err, ErrBackoffDurationExceeded)) {
				continue
			}
		}
		if c := a.class(); c == clsOK || c == clsCounted {
			t.answers = append(t.answers, simAnswer{a.final.done, c == clsCounted, a.ids[0]})
		}
		if a.class() == clsOK {
			t.twoxx = append(t.twoxx, a.final.done)
		}
	}
	sort.SliceStable(t.answers, func(i, j int) bool { return t.answers[i].at.Before(t.answers[j].at) })
	sort.Slice(t.twoxx, func(i, j int) bool { return t.twoxx[i].Before(t.twoxx[j]) })
	return t
}

// exact reports whether every answer was taken in at the instant it
// arrived: no slow or cut bodies (the client decides when a body ends),
// no callbacks that take time, no Close that cancelled requests.
func (t *simTiming) exact() bool {
	if t.run.sc.CallbackSlowMS > 0 {
		return false
	}
	for _, a := range t.atts {
		if !a.final.end.IsZero() && a.final.end.After(a.final.done) {
			return false
		}
		if a.final.done.IsZero() {
			return false
		}
	}
	return true
}

// streaks are the fewest and the most counted failures p's batch can have
// had since the last 2xx to any batch when p's failure was recorded (R61):
// a 2xx of p's instant may have come before or after it.
func (t *simTiming) streaks(p simAttempt) (lo, hi int) {
	var last2xx time.Time // the latest 2xx at or before p
	for _, u := range t.twoxx {
		if !u.After(p.final.done) {
			last2xx = u
		}
	}
	for _, x := range t.seenIDs[p.ids[0]] {
		b := t.atts[x]
		if b.class() != clsCounted || b.final.done.After(p.final.done) || b.final.done.Before(last2xx) {
			continue
		}
		hi++
		if b.final.done.After(last2xx) || b.idx == p.idx {
			lo++
		}
	}
	return max(lo, 1), max(hi, 1)
}

// health says whether the client may have judged the server healthy for
// p's batch when it recorded p's failure (R63), and whether it surely did:
// answers of p's instant may have been recorded before or after it, in any
// order; the batch's own failures since the last 2xx are left out.
func (t *simTiming) health(p simAttempt) (maybe, surely bool) {
	lo, hi := t.streaks(p)
	var before, same []simAnswer
	for _, o := range t.answers {
		switch {
		case o.at.Before(p.final.done):
			before = append(before, o)
		case o.at.Equal(p.final.done) && !(o.fail && o.first == p.ids[0]):
			same = append(same, o)
		}
	}
	// Variants of p's instant: none of its other answers recorded before
	// p, their 2xx only, their failures only, all of them.
	variants := [][]simAnswer{nil, nil, nil, same}
	for _, o := range same {
		if o.fail {
			variants[2] = append(variants[2], o)
		} else {
			variants[1] = append(variants[1], o)
		}
	}
	surely = true
	for _, v := range variants {
		w := append(append(append([]simAnswer(nil), before...), v...), simAnswer{p.final.done, true, p.ids[0]})
		if len(w) > 16 {
			w = w[len(w)-16:]
		}
		fails, trailing := 0, 0
		for _, o := range w {
			if o.fail {
				fails++
				trailing++
			} else {
				trailing = 0
			}
		}
		for _, k := range []int{lo, hi} {
			own := min(k, trailing)
			seen, f := len(w)-own, fails-own
			h := seen >= 4 && 2*f < seen
			maybe = maybe || h
			surely = surely && h
		}
	}
	return maybe, surely
}

// dk is R26's d_k.
func simDK(k int) time.Duration {
	return min(60*time.Second, 500*time.Millisecond<<min(k-1, 10))
}

// countedWaits checks the lower end of every counted wait (INV6: W_k's
// lower end 0.9·d_k − 0.05 s while the server is surely not healthy,
// R26, R61, R63) and that the waits are drawn (R26's jitter): a wait of
// exactly d_k, to the nanosecond, is what a draw almost never gives.
func (t *simTiming) countedWaits(prevOf map[int]simAttempt, gated func(from, to time.Time) bool) {
	if !t.exact() {
		return
	}
	exactly, drawn := 0, 0
	for ai, p := range prevOf {
		a := t.atts[ai]
		if len(a.ids) != len(p.ids) { // a piece (R67, R68)
			continue
		}
		// A 2xx meanwhile may have released it (R62); it then waits for a
		// token and a consumer, which may take longer than d_1.
		rel := false
		for _, u := range t.twoxx {
			rel = rel || !u.Before(p.final.done) && !u.After(a.at)
		}
		if rel {
			continue
		}
		if !t.run.close.at.IsZero() && !p.final.done.Before(t.run.close.at) {
			continue
		}
		maybe, _ := t.health(p)
		if maybe {
			continue
		}
		lo, _ := t.streaks(p)
		gap := a.at.Sub(p.final.done)
		if min := simDK(lo)*9/10 - simTolerance; gap < min {
			t.bad("INV6", "attempt %d: counted retry %v after the failure (attempt %d, streak %d or more, the server not healthy), before W_k's lower end %v (R26, R61)", ai, gap, p.idx, lo, min)
		}
		if lo2, hi := t.streaks(p); lo2 == hi && !gated(p.final.done, a.at) && !t.coincides(a) {
			drawn++
			if gap == simDK(lo2) {
				exactly++
			}
		}
	}
	// (A wait for a token of the allowance, R63, may end on d_k by chance:
	// most of them would not.)
	if exactly >= 3 && 2*exactly > drawn {
		t.bad("R26", "%d of %d counted retries waited exactly d_k to the nanosecond: the waits are not drawn (jitter 0.1)", exactly, drawn)
	}
}

// bodyEvents checks R45: the events of a body (with their commas and
// per-event sentAt) never pass 475 000 bytes.
func (t *simTiming) bodyEvents() {
	for ai, a := range t.atts {
		if a.sentAtBody == "" || len(a.ids) < 2 {
			continue
		}
		frame := len(`{"batch":[],"sentAt":"","writeKey":"sim-key"}`) + len(a.sentAtBody)
		if n := a.size - frame; n > 475000 {
			t.bad("R45", "attempt %d: %d events take %d bytes of the body, more than 475 000", ai, len(a.ids), n)
		}
	}
}

// isolation checks R66: a batch answered 400 is halved until the events at
// fault fail alone, within 4·⌈log₂ n⌉ requests, which isolate two events at
// fault among n; so with at most two in the refused batch, no event that
// is not at fault fails with that 400 in a piece of several events.
func (t *simTiming) isolation(outs map[string][]simOutcome) {
	for id, os := range outs {
		if id[0] != 'e' || len(os) == 0 {
			continue
		}
		var he *HTTPError
		if !errors.As(os[0].err, &he) || he.StatusCode != 400 || errors.Is(os[0].err, ErrShutdownInterrupted) {
			continue
		}
		list := t.seenIDs[id]
		if len(list) == 0 || len(t.atts[list[len(list)-1]].ids) < 2 {
			continue
		}
		for _, x := range list { // the first 400 on a batch holding id
			a := t.atts[x]
			if a.final.status != 400 {
				continue
			}
			poison := 0
			for _, y := range a.ids {
				if y[0] == 'x' {
					poison++
				}
			}
			if poison <= 2 {
				t.bad("R66", "%s failed with a 400 in a piece of %d events; the refused batch (attempt %d) held %d events, %d at fault", id, len(t.atts[list[len(list)-1]].ids), x, len(a.ids), poison)
			}
			break
		}
	}
}

// coincides reports whether another attempt began or ended at the instant
// a began: a may have waited for it (R69's turn, a consumer) rather than
// for its own timer.
func (t *simTiming) coincides(a simAttempt) bool {
	for _, b := range t.atts {
		if b.idx != a.idx && (b.at.Equal(a.at) || b.final.done.Equal(a.at) || b.final.end.Equal(a.at)) {
			return true
		}
	}
	return false
}
