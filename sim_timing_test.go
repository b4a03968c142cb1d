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
	"maps"
	"math/bits"
	"sort"
	"strconv"
	"strings"
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
// answers of one instant may have been recorded in any order (those of
// p's instant before or after it, those at the window's far end in or
// out of it); the batch's own failures since the last 2xx are left out.
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
	// Variants of p's instant: any number of its other 2xx and of its
	// other failures recorded before p.
	var oks, fails []simAnswer
	for _, o := range same {
		if o.fail {
			fails = append(fails, o)
		} else {
			oks = append(oks, o)
		}
	}
	var variants [][]simAnswer
	for ns := 0; ns <= min(len(oks), 16); ns++ {
		for nf := 0; nf <= min(len(fails), 16); nf++ {
			variants = append(variants, append(append([]simAnswer(nil), oks[:ns]...), fails[:nf]...))
		}
	}
	healthy := func(f, seen, own int) bool { return seen-own >= 4 && 2*(f-own) < seen-own }
	surely = true
	for _, v := range variants {
		vf := 0
		for _, o := range v {
			if o.fail {
				vf++
			}
		}
		// The window: p, v, and the newest of before, whole instants but
		// the oldest, of which any r answers may be in it.
		room := 16 - 1 - len(v)
		fmin, fmax := 1+vf, 1+vf
		seen := 1 + len(v)
		i := len(before) - 1
		for room > 0 && i >= 0 {
			at := before[i].at
			gs, gf := 0, 0
			for ; i >= 0 && before[i].at.Equal(at); i-- {
				if before[i].fail {
					gf++
				} else {
					gs++
				}
			}
			r := min(room, gs+gf)
			fmin += max(0, r-gs)
			fmax += min(r, gf)
			seen += r
			room -= r
		}
		// The failures after the last 2xx: p's at least; at most p's,
		// v's, and those of earlier instants back to one with a 2xx.
		tmax := 1 + vf
		if vf == len(v) {
			for j := len(before) - 1; j >= 0; {
				at := before[j].at
				gs, gf := 0, 0
				for ; j >= 0 && before[j].at.Equal(at); j-- {
					if before[j].fail {
						gf++
					} else {
						gs++
					}
				}
				tmax += gf
				if gs > 0 {
					break
				}
			}
		}
		for _, own := range []int{min(lo, 1), min(hi, tmax), min(lo, tmax)} {
			maybe = maybe || healthy(fmin, seen, own)
			surely = surely && healthy(fmax, seen, own)
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

// simResp is one answer that reached the client (a status, not a
// transport error): with a usable Retry-After on a retryable status, or
// not (R34).
type simResp struct {
	at time.Time
	ra bool
}

// responses are the answers, by arrival.
func (t *simTiming) responses() []simResp {
	var rs []simResp
	for _, a := range t.atts {
		if !a.final.done.IsZero() && a.final.status != 0 {
			rs = append(rs, simResp{a.final.done, a.class() == clsRA})
		}
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].at.Before(rs[j].at) })
	return rs
}

// episode bounds the start of the episode a usable Retry-After answered at
// t belongs to (R31, R34): answers of one instant may have been taken in
// in any order. ended is true when an answer of t's own instant may have
// ended the episode after t's (then an unserved deadline holds alone).
func simEpisode(rs []simResp, t time.Time) (early, late time.Time, ended bool) {
	early, late = t, t // late: the first usable Retry-After after the last answer that may have ended an episode
	for i := len(rs) - 1; i >= 0; {
		at := rs[i].at
		ra, other := false, false
		for ; i >= 0 && rs[i].at.Equal(at); i-- {
			ra = ra || rs[i].ra
			other = other || !rs[i].ra
		}
		switch {
		case at.After(t):
			continue
		case at.Equal(t):
			ended = other
			continue
		}
		if ra {
			early = at // (taken in after the others of its instant)
		}
		if other {
			return early, late, ended
		}
		late = at
	}
	return early, late, ended
}

// busy reports whether an attempt was on the wire at some instant of
// [from, to), or a callback ran then: a consumer may have been held.
func (t *simTiming) busy(from, to time.Time) bool {
	for _, b := range t.atts {
		end := b.final.done
		if b.final.end.After(end) {
			end = b.final.end
		}
		if end.IsZero() || b.at.Before(to) && end.After(from) && end.After(b.at) {
			return true
		}
	}
	for _, sp := range t.run.callSpans {
		if sp[0].Before(to) && sp[1].After(from) {
			return true
		}
	}
	return false
}

// nextOf is when the events of a were next attempted or given an outcome
// after a's answer; zero if never.
func (t *simTiming) nextOf(a simAttempt, outs map[string][]simOutcome) time.Time {
	var n time.Time
	for _, x := range t.seenIDs[a.ids[0]] {
		if b := t.atts[x]; b.at.After(a.final.done) || b.at.Equal(a.final.done) && b.idx > a.idx {
			n = b.at
			break
		}
	}
	if os := outs[a.ids[0]]; len(os) > 0 && (n.IsZero() || os[0].at.Before(n)) {
		n = os[0].at
	}
	return n
}

// rateLimits checks what a usable Retry-After starts: a batch waiting on
// it is sent again when the gate opens (R32), or fails when the episode
// has lasted MaxRateLimitDuration, never later (R35); and when the gate
// opens with the episode still open, one request goes first and the
// others wait for its answer (R64). Each check applies only where nothing
// else may hold a consumer: no attempt on the wire, no callback running,
// no Close.
func (t *simTiming) rateLimits(outs map[string][]simOutcome) {
	sc := t.run.sc
	if sc.CallbackSlowMS > 0 || sc.OAuth { // (with OAuth a batch may wait for a token, R50)
		return
	}
	for _, a := range t.atts {
		if a.final.end.After(a.final.done) {
			return // an answer taken in when its body ends: R34's instants move
		}
	}
	rs := t.responses()
	limit := sc.maxRateLimit()
	closeAt := t.run.close.at
	before := func(x time.Time) bool { return closeAt.IsZero() || x.Before(closeAt) }
	// deadline is the gate's deadline from a's Retry-After on: the latest
	// instant named by usable Retry-Afters answered before it passed.
	deadline := func(a simAttempt) time.Time {
		d := a.final.raUntil
		for changed := true; changed; {
			changed = false
			for _, b := range t.atts {
				if b.class() == clsRA && !b.final.done.After(d.Add(time.Second)) && b.final.raUntil.After(d) {
					d, changed = b.final.raUntil, true
				}
			}
		}
		return d
	}
	otherAnswer := func(from, to time.Time) bool { // an answer that ends the episode (R34)
		for _, r := range rs {
			if !r.ra && !r.at.Before(from) && !r.at.After(to) {
				return true
			}
		}
		return false
	}
	for ai, a := range t.atts {
		if a.class() != clsRA {
			continue
		}
		tA := a.final.done
		early, late, ended := simEpisode(rs, tA)
		n := t.nextOf(a, outs)
		// R35: the episode ends MaxRateLimitDuration after its start. (An
		// episode that had run out by t ended at a consumer's look at the
		// gate, or ends at t: a new one may begin at t. It may have begun
		// as early as early, when the answers of that instant were taken
		// in with the Retry-After last.)
		if !early.Add(limit).After(tA) {
			late = tA
		}
		if end := late.Add(limit); !ended && a.final.raUntil.After(end.Add(time.Second+simTolerance)) && before(end.Add(simTolerance)) &&
			!otherAnswer(tA.Add(1), end.Add(simTolerance)) && !t.busy(end.Add(-simTolerance), end.Add(simTolerance)) &&
			(n.IsZero() || n.After(end.Add(simTolerance))) {
			t.bad("R35", "attempt %d: rate limited at +%v, its episode began by +%v, MaxRateLimitDuration %v; its events waited until %v",
				ai, tA.Sub(t.run.start), late.Sub(t.run.start), limit, simAt(t.run.start, n))
		}
		// R32: sent again when the gate opens.
		d := deadline(a)
		open := d.Add(time.Second) // (an HTTP-date is rounded up, R21)
		if !open.Before(early.Add(limit)) || !before(open.Add(simTolerance)) || n.IsZero() || !n.After(open.Add(simTolerance)) {
			continue
		}
		if t.busy(d.Add(-simTolerance), n) {
			continue
		}
		t.bad("R32", "attempt %d: rate limited until +%v; its events waited until %v with nothing else going on",
			ai, d.Sub(t.run.start), simAt(t.run.start, n))
	}
	// R64: the first request after a deadline, while the episode is open,
	// goes alone until its answer.
	for _, a := range t.atts {
		if a.class() != clsRA {
			continue
		}
		d := deadline(a)
		if d != a.final.raUntil {
			continue // judged from the Retry-After that set it
		}
		early, _, ended := simEpisode(rs, a.final.done)
		var lastRA time.Time
		for _, r := range rs {
			if r.ra && !r.at.After(d) {
				lastRA = r.at
			}
		}
		if ended || !d.Before(early.Add(limit).Add(-time.Second)) || otherAnswer(lastRA, d.Add(simTolerance)) {
			continue
		}
		var after []simAttempt
		for _, b := range t.atts {
			if !b.at.Before(d.Add(-simTolerance)) {
				after = append(after, b)
			}
		}
		sort.SliceStable(after, func(i, j int) bool { return after[i].at.Before(after[j].at) })
		if len(after) < 2 || after[0].final.done.IsZero() || !before(after[0].final.done) {
			continue
		}
		p := after[0]
		for _, b := range after[1:] {
			// (An answer that ends the episode opens the gate for all, R34;
			// so does the episode's running out, R35, which it may have
			// done from early on.)
			if b.at.Before(p.final.done) && !otherAnswer(d.Add(-simTolerance), b.at) && b.at.Before(early.Add(limit)) {
				t.bad("R64", "attempts %d and %d went out at +%v and +%v after the deadline +%v, before the first one's answer (+%v)",
					p.idx, b.idx, p.at.Sub(t.run.start), b.at.Sub(t.run.start), d.Sub(t.run.start), p.final.done.Sub(t.run.start))
				break
			}
		}
	}
}

func simAt(start, x time.Time) string {
	if x.IsZero() {
		return "never"
	}
	return "+" + x.Sub(start).String()
}

// messageIDs checks R2 and R3 for events whose messageId the client
// generated: every attempt carries one, the same for the event on every
// attempt, never the one of another event, and the callbacks' messages
// have it; a supplied one goes out unchanged.
func (t *simTiming) messageIDs(outs map[string][]simOutcome) {
	wire := map[string]string{} // event → its messageId on the wire
	owner := map[string]string{}
	for ai, a := range t.atts {
		for i, id := range a.ids {
			if i >= len(a.mids) {
				break
			}
			mid := a.mids[i]
			switch w, ok := wire[id]; {
			case mid == "":
				t.bad("R2", "attempt %d: event %s without a messageId", ai, id)
			case ok && w != mid:
				t.bad("R3", "attempt %d: event %s sent as %q, earlier as %q", ai, id, mid, w)
			case owner[mid] != "" && owner[mid] != id:
				t.bad("R2", "attempt %d: events %s and %s share the messageId %q", ai, owner[mid], id, mid)
			}
			wire[id], owner[mid] = mid, id
		}
	}
	for id, os := range outs {
		for _, o := range os {
			if w, ok := wire[id]; ok && o.wire != w {
				t.bad("R2", "%s: its callback's message has ID %q, sent as %q", id, o.wire, w)
				break
			}
		}
	}
}

// earlyBatches checks R46 the other way round: a batch of fewer than
// FlushAt events does not close before FlushInterval has passed since its
// first event, unless a Flush or Close asked for it, its bytes filled it
// (R45, R67's ramp), events accepted after it were sent before it (it was
// held apart, not closed by the queue), or the client may have held
// QueueCapacity events, or it may have learned an event limit from 429s
// (R68). Worlds with
// learned limits (R67, R68) and durable mode (R70) cut and read back
// batches by other rules and are left out.
func (t *simTiming) earlyBatches(accepted map[string]time.Time) {
	sc := t.run.sc
	if sc.Durable || sc.BodyLimit > 0 || sc.EventLimit > 0 || len(accepted) >= sc.QueueCapacity {
		return
	}
	// Before any 413, R67's ramp cuts a batch over 8 KiB (or twice the
	// largest body accepted) before it is sent: its pieces are smaller than
	// FlushAt; the first is sent at once, the rest waits its turn in the
	// waiting room, which may come long after (R47). A batch whose events,
	// with every event still queued beside them, weigh no more than that
	// was not cut; nor was a piece whose events, with the events of the
	// first tries of fewer than FlushAt events next to them in enqueue
	// order (the other pieces of the batch it may have been cut from, up
	// to FlushAt events in all), weigh no more than that.
	weight := func(id string) int {
		p, i := simProducerOf(id)
		pi, _ := strconv.Atoi(p)
		if pi < len(sc.Producers) && sc.Producers[pi].Size > 0 {
			return (i*7919+pi*104729)%(sc.Producers[pi].Size+1) + 400 // the producer's padding, and the rest of the event
		}
		return 0
	}
	ramp := func(at time.Time) int { // the ramp's limit at at: it only grows
		n := 8 << 10
		for _, b := range t.atts {
			if b.final.status/100 == 2 && b.final.done.Before(at) {
				n = max(n, 2*b.size)
			}
		}
		return n
	}
	queued := func(at time.Time) int {
		n := 0
		for id, acc := range accepted {
			if acc.After(at) {
				continue
			}
			if list := t.seenIDs[id]; len(list) > 0 && t.atts[list[0]].at.Before(at) {
				continue
			}
			n += weight(id)
		}
		return n
	}
	order := make([]string, 0, len(accepted))
	for id := range accepted {
		order = append(order, id)
	}
	sort.Slice(order, func(i, j int) bool { return accepted[order[i]].Before(accepted[order[j]]) })
	pos := make(map[string]int, len(order))
	for i, id := range order {
		pos[id] = i
	}
	piece := func(id string) bool { // first sent in a first try of fewer than FlushAt events
		list := t.seenIDs[id]
		if len(list) == 0 {
			return false
		}
		b := t.atts[list[0]]
		return b.header.Get("X-Retry-Count") == "" && len(b.ids) < sc.FlushAt
	}
	// weigh[i] is the weight of order[:i]; an instant's events are
	// order[firstAt[i]] to order[lastAt[i]].
	weigh := make([]int, len(order)+1)
	firstAt, lastAt := make([]int, len(order)), make([]int, len(order))
	for i, id := range order {
		weigh[i+1] = weigh[i] + weight(id)
		firstAt[i] = i
		if i > 0 && accepted[order[i-1]].Equal(accepted[id]) {
			firstAt[i] = firstAt[i-1]
		}
	}
	for i := len(order) - 1; i >= 0; i-- {
		lastAt[i] = i
		if i+1 < len(order) && accepted[order[i+1]].Equal(accepted[order[i]]) {
			lastAt[i] = lastAt[i+1]
		}
	}
	// span is the first and last place of ids in enqueue order (-1 for
	// the last when none was accepted).
	span := func(ids []string) (lo, hi int) {
		lo, hi = len(order), -1
		for _, id := range ids {
			if i, ok := pos[id]; ok {
				lo, hi = min(lo, i), max(hi, i)
			}
		}
		return lo, hi
	}
	// around is the most the batch that ids were cut from may have
	// weighed: the heaviest run of at most FlushAt events in enqueue order
	// that holds ids and whose other events were pieces too, every
	// alignment of it tried (the piece may have been the start, the middle
	// or the end of its batch). Events accepted at the same instant may be
	// queued in any order: a run takes in all of its end instants' events.
	around := func(ids []string) int {
		lo, hi := span(ids)
		if hi < 0 {
			return 0
		}
		after := 0 // pieces right after hi
		for hi+after+1 < len(order) && after < sc.FlushAt && piece(order[hi+after+1]) {
			after++
		}
		best := weigh[lastAt[hi]+1] - weigh[firstAt[lo]] // ids' own run, however long
		for l := lo; l >= 0 && hi-l+1 <= sc.FlushAt; l-- {
			if l < lo && !piece(order[l]) {
				break
			}
			h := min(hi+after, l+sc.FlushAt-1)
			best = max(best, weigh[lastAt[h]+1]-weigh[firstAt[l]])
		}
		return best
	}
	// overtakenAfter[j] is the earliest first try of an event at order[j]
	// or later (zero: none). A batch whose later events were sent before
	// it was held apart (a piece waiting its turn in the waiting room,
	// R47), not closed by the queue: the queue hands out its oldest
	// events first, so an early close there is never overtaken.
	overtakenAfter := make([]time.Time, len(order)+1)
	for j := len(order) - 1; j >= 0; j-- {
		overtakenAfter[j] = overtakenAfter[j+1]
		if list := t.seenIDs[order[j]]; len(list) > 0 {
			b := t.atts[list[0]]
			if b.header.Get("X-Retry-Count") == "" && (overtakenAfter[j].IsZero() || b.at.Before(overtakenAfter[j])) {
				overtakenAfter[j] = b.at
			}
		}
	}
	overtaken := func(a simAttempt) bool {
		_, hi := span(a.ids)
		if hi < 0 {
			return false
		}
		at := overtakenAfter[lastAt[hi]+1] // events accepted at its last event's instant may be queued before it
		return !at.IsZero() && at.Before(a.at.Add(-simTolerance))
	}
	// A 429 without a usable Retry-After may be the first of the two in a
	// row that teach the client an event limit (R68), after which batches
	// close at that many events: from its answer on, a small batch is no
	// sign of an early close. (Any world may answer so: a slow body's
	// status is drawn too.)
	var eventLimitFrom time.Time
	for _, a := range t.atts {
		if a.final.status == 429 && !a.final.raUsable && (eventLimitFrom.IsZero() || a.at.Before(eventLimitFrom)) {
			eventLimitFrom = a.at
		}
	}
	for ai, a := range t.atts {
		if a.header.Get("X-Retry-Count") != "" || len(a.ids) >= sc.FlushAt || a.size > 400000 {
			continue
		}
		if !eventLimitFrom.IsZero() && a.at.After(eventLimitFrom) {
			continue
		}
		var first time.Time
		for _, id := range a.ids {
			if at, ok := accepted[id]; ok && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		if first.IsZero() || !a.at.Before(first.Add(ms(sc.FlushIntervalMS)-simTolerance)) {
			continue
		}
		if !t.run.close.at.IsZero() && !a.at.Before(t.run.close.at.Add(-simTolerance)) {
			continue
		}
		asked := false
		for _, f := range t.run.flushes {
			asked = asked || !f.at.Before(first.Add(-simTolerance)) && !f.at.After(a.at.Add(simTolerance))
		}
		q, cut, limit := queued(a.at), around(a.ids), ramp(a.at)
		if asked || q > 8<<10 || cut > limit || overtaken(a) {
			continue
		}
		t.bad("R46", "attempt %d: a batch of %d events (FlushAt %d, %d bytes) sent %v after its first event (FlushInterval %v), no Flush or Close asked for it (queued then %d, its batch at most %d, the ramp %d)",
			ai, len(a.ids), sc.FlushAt, a.size, a.at.Sub(first), ms(sc.FlushIntervalMS), q, cut, limit)
	}
}

// isolationBudget checks R66's budget: a piece of several events answered
// 400 fails whole only when the refused batch's 4·⌈log₂ n⌉ requests cannot
// pay for its two halves. Every earlier 400 on a piece of several events
// of that batch may have halved it (two requests each).
func (t *simTiming) isolationBudget(outs map[string][]simOutcome) {
	for ai, x := range t.atts {
		if x.final.status != 400 || len(x.ids) < 2 {
			continue
		}
		list := t.seenIDs[x.ids[0]]
		if list[len(list)-1] != ai {
			continue
		}
		os := outs[x.ids[0]]
		var he *HTTPError
		if len(os) == 0 || !errors.As(os[0].err, &he) || he.StatusCode != 400 || errors.Is(os[0].err, ErrShutdownInterrupted) {
			continue
		}
		var root *simAttempt // the first 400 on a batch holding x's events
		for _, y := range list {
			if a := &t.atts[y]; a.final.status == 400 && len(a.ids) > 1 {
				root = a
				break
			}
		}
		in := map[string]bool{}
		for _, id := range root.ids {
			in[id] = true
		}
		halvings := 0
		for bi, b := range t.atts {
			if bi == ai || b.final.status != 400 || len(b.ids) < 2 || !in[b.ids[0]] || b.final.done.After(x.final.done) {
				continue
			}
			halvings++
		}
		budget := 4 * bits.Len(uint(len(root.ids)-1))
		if budget-2*halvings >= 2 {
			t.bad("R66", "attempt %d: a piece of %d events failed whole with a 400 after at most %d halvings of a batch of %d (budget %d requests)",
				ai, len(x.ids), halvings, len(root.ids), budget)
		}
	}
}

// oauth checks R50 in an OAuth world: every upload carries a token the
// auth server issued, never past 90 % of its lifetime, and never after an
// answer of 400, 401, 403 or 511 to an upload that carried it.
func (t *simTiming) oauth() {
	sc := t.run.sc
	if !sc.OAuth {
		return
	}
	srv := t.run.server
	srv.mu.Lock()
	issued := maps.Clone(srv.tokens)
	srv.mu.Unlock()
	ttl := time.Duration(sc.TokenTTL) * time.Second
	tokenOf := func(a simAttempt) string {
		tok, _ := strings.CutPrefix(a.header.Get("Authorization"), "Bearer ")
		return tok
	}
	for ai, a := range t.atts {
		tok := tokenOf(a)
		at, ok := issued[tok]
		if !ok {
			t.bad("INV4", "attempt %d: Authorization %q, not a token the auth server issued", ai, a.header.Get("Authorization"))
			continue
		}
		if a.at.After(at.Add(ttl - ttl/10 + simTolerance)) {
			t.bad("R50", "attempt %d: token issued %v before, with a lifetime of %v (used past 90 %%)", ai, a.at.Sub(at), ttl)
		}
		switch a.final.status {
		case 400, 401, 403, 511:
			for bi, b := range t.atts {
				if b.at.After(a.final.done.Add(simTolerance)) && tokenOf(b) == tok {
					t.bad("R50", "attempt %d carried the token that attempt %d's %d refused", bi, ai, a.final.status)
					break
				}
			}
		}
	}
}
