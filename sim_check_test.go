package analytics

// The checkers of TestSimulation: each derived from docs/delivery.md and
// named by the invariant or rule it checks. They read only what the
// simulated server received and answered and what the client returned or
// passed to the callbacks (sim_world_test.go records both).

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// simViolation is one broken rule.
type simViolation struct {
	Rule string
	Msg  string
}

func (v simViolation) String() string { return v.Rule + ": " + v.Msg }

type simClass int

const (
	clsOK      simClass = iota // 2xx: delivered (R9)
	clsFail                    // not retried (R10, R12, R13, R15)
	clsCounted                 // counted retry: retryable status without a usable Retry-After, transport error (R14, R26)
	clsRA                      // rate-limited retry (R25, R31)
	clsSplit                   // 413 or 400 on several events: halved (R3, R66)
)

// simAttempt is one attempt: a request to /v1/batch and, for a followed
// 307/308, the hops that continued it.
type simAttempt struct {
	simRequest
	idx   int
	final simRequest // the answer the client got: the last hop's
}

func (a simAttempt) class() simClass {
	st := a.final.status
	switch {
	case st == 0:
		return clsCounted
	case st >= 200 && st <= 299:
		return clsOK
	case (st == 413 || st == 400) && len(a.ids) > 1:
		return clsSplit
	case a.final.retryable:
		if a.final.raUsable {
			return clsRA
		}
		return clsCounted
	}
	return clsFail
}

// simTolerance absorbs the instants at which one fake-time moment's
// goroutines run in either order.
const simTolerance = 50 * time.Millisecond

// simMinCountedWait is the shortest counted wait the contract allows: the
// lower end of R61's healthy wait d_h (80 ms); while the server is surely
// not healthy the checker asks for R26's d_1 (0.45 s). Flag -sim.minwait
// overrides it.
var simMinCountedWait = 80 * time.Millisecond

// simRelease is R62's window: a 2xx makes waiting batches due within d_1.
const simRelease = 550 * time.Millisecond

func simCheck(run *simRun) []simViolation {
	var vs []simViolation
	bad := func(rule, f string, a ...any) {
		if len(vs) < 20 {
			vs = append(vs, simViolation{rule, fmt.Sprintf(f, a...)})
		}
	}
	sc := run.sc
	if run.newErr != nil {
		bad("R48", "New refused a valid configuration: %v", run.newErr)
		return vs
	}
	reqs := run.server.requests()
	var atts []simAttempt
	for i, r := range reqs {
		if r.hop {
			continue
		}
		a := simAttempt{simRequest: r, idx: i, final: r}
		for a.final.next >= 0 {
			a.final = reqs[a.final.next]
		}
		atts = append(atts, a)
	}
	accepted := run.accepted()
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("sim-key:"))

	// R1, R5, R6, R11 and INV4's headers; INV3's stable batches.
	seenIDs := map[string][]int{} // id → attempts carrying it, in arrival order
	for ai, a := range atts {
		if a.host != "api.test" || a.path != "/v1/batch" {
			bad("R1", "attempt %d went to %s%s", ai, a.host, a.path)
		}
		if (a.header.Get("Authorization") != auth && !sc.OAuth) || a.header.Get("Content-Type") != "application/json" || a.header.Get("User-Agent") == "" {
			bad("INV4", "attempt %d: headers %v", ai, a.header)
		}
		if sc.Gzip != (a.header.Get("Content-Encoding") == "gzip") {
			bad("R5", "attempt %d: gzip %v, Content-Encoding %q", ai, sc.Gzip, a.header.Get("Content-Encoding"))
		}
		if a.sentAtBody == "" || len(a.ids) == 0 {
			bad("R2", "attempt %d: body without sentAt or events", ai)
		}
		if a.size > 500000 {
			bad("R45", "attempt %d: a body of %d bytes", ai, a.size)
		}
		if len(a.ids) > sc.FlushAt {
			bad("R46", "attempt %d: %d events, FlushAt %d", ai, len(a.ids), sc.FlushAt)
		}
		if a.writeKey != "sim-key" {
			bad("R2", "attempt %d: writeKey %q", ai, a.writeKey)
		}
		if sent, err := time.Parse(time.RFC3339Nano, a.sentAtBody); err != nil || sent.Sub(a.at).Abs() > time.Millisecond {
			bad("R4", "attempt %d at %v: sentAt %q", ai, a.at.UTC(), a.sentAtBody)
		}
		for _, e := range a.events {
			if (e.SentAt != "") != sc.EventSentAt || (sc.EventSentAt && e.SentAt != a.sentAtBody) {
				bad("R59", "attempt %d: event %s has sentAt %q (body %q, option %v)", ai, e.ID, e.SentAt, a.sentAtBody, sc.EventSentAt)
				break
			}
			acc, ok := accepted[e.ID]
			ts, err := time.Parse(time.RFC3339Nano, e.Timestamp)
			if ok && (err != nil || ts.After(acc) || e.Type != "track" || e.UserID != "u" || e.Event != "Sim" || e.Library == nil ||
				fmt.Sprint(e.I) != simIndex(e.ID) || (e.Env != nil) != sc.Defaults || (e.App != nil) != sc.Defaults) {
				bad("R2", "attempt %d: event %s is not what was enqueued: %+v", ai, e.ID, e)
				break
			}
		}
		dup := map[string]bool{}
		for _, id := range a.ids {
			if dup[id] {
				bad("INV3", "attempt %d carries %s twice", ai, id)
			}
			dup[id] = true
			if _, ok := accepted[id]; !ok {
				bad("INV2", "attempt %d carries %s, which was never accepted", ai, id)
			}
		}
		rc := a.header.Get("X-Retry-Count")
		prior := 0
		if len(a.ids) > 0 {
			prior = len(seenIDs[a.ids[0]])
		}
		for _, id := range a.ids {
			if len(seenIDs[id]) != prior {
				bad("INV3", "attempt %d mixes events with different histories (%s sent %d times, %s %d times)", ai, a.ids[0], prior, id, len(seenIDs[id]))
				break
			}
		}
		want := ""
		if prior > 0 {
			want = strconv.Itoa(prior)
			// A retry carries a contiguous run of an earlier attempt (R3).
			p := atts[seenIDs[a.ids[0]][prior-1]]
			if !simContiguous(p.ids, a.ids) {
				bad("INV3", "attempt %d %v is not a run of attempt %v", ai, simShort(a.ids), simShort(p.ids))
			}
		}
		if rc != want {
			bad("INV4", "attempt %d: X-Retry-Count %q, want %q (the events' earlier attempts)", ai, rc, want)
		}
		for _, id := range a.ids {
			seenIDs[id] = append(seenIDs[id], ai)
		}
		if !run.close.done.IsZero() && a.at.After(run.close.done) {
			bad("R39", "attempt %d arrived %v after Close returned", ai, a.at.Sub(run.close.done))
		}
	}
	for i, r := range reqs {
		if r.hop && (r.host != "api.test" || r.path != "/v1/batch-alt") {
			bad("R11", "request %d followed a redirect to %s%s", i, r.host, r.path)
		}
	}

	// R47: with one consumer, batches not yet attempted go in enqueue order.
	// (With OAuth a refused token sends batches to wait for the next one,
	// R50, and a batch taken meanwhile may find it first.)
	if sc.Consumers == 1 && !sc.OAuth {
		lastIdx := map[string]int{}
		for ai, a := range atts {
			if a.header.Get("X-Retry-Count") != "" {
				continue
			}
			for _, id := range a.ids {
				p, i := simProducerOf(id)
				if last, ok := lastIdx[p]; ok && i < last {
					bad("R47", "attempt %d sends %s first, after event %d of the same producer", ai, id, last)
				}
				lastIdx[p] = i
			}
		}
	}

	// R69: two bodies larger than any answered 2xx before (and than
	// untriedFloor) are never on the wire together.
	largest := func(before time.Time) int {
		n := untriedFloor
		for _, a := range atts {
			// (the client reckons an accepted body at the most it could
			// weigh: up to a few dozen bytes per event more, R67)
			if a.class() == clsOK && !a.final.done.After(before) {
				n = max(n, a.size+64*len(a.ids))
			}
		}
		return n
	}
	// mayBeUntried reports whether b's body may have been of an untried
	// size when it went out (R69): as the client reckons it, with the
	// longest sentAt, larger than every body answered 2xx before (each
	// reckoned at least at its size as sent) and, before any 413, than
	// untriedFloor.
	mayBeUntried := func(b simAttempt) bool {
		reckoned := b.size + simSentAtSlack
		if sc.EventSentAt {
			reckoned += simSentAtSlack * len(b.ids)
		}
		n, refused := 0, false
		for _, a := range atts {
			if a.final.done.Before(b.at) {
				if a.class() == clsOK {
					n = max(n, a.size)
				}
				refused = refused || a.final.status == 413
			}
		}
		if !refused {
			n = max(n, untriedFloor)
		}
		return reckoned > n
	}
	endOf := func(a simAttempt) time.Time {
		if a.final.end.After(a.final.done) {
			return a.final.end
		}
		return a.final.done
	}
	var untried []simAttempt
	for _, a := range atts {
		if a.size > largest(a.at) {
			untried = append(untried, a)
		}
	}
	for i, a := range untried {
		for _, b := range untried[i+1:] {
			if b.at.Before(endOf(a)) && a.at.Before(endOf(b)) && !endOf(a).IsZero() {
				bad("R69", "attempts %d (%d bytes) and %d (%d bytes) of untried sizes were on the wire together", a.idx, a.size, b.idx, b.size)
			}
		}
	}

	// R46: a batch closes when FlushInterval has passed since its first
	// event; with no request on the wire, no gate and no callback running,
	// a free consumer sends it then.
	gateUntil := func(t time.Time) bool {
		for _, a := range atts {
			if a.class() == clsRA && !a.final.done.After(t) && a.final.raUntil.Add(time.Second).After(t.Add(-simTolerance)) {
				return true
			}
		}
		return false
	}
	// (durable: events on disk only are read back later, R70; with OAuth a
	// batch may wait for a token, R50)
	if sc.CallbackSlowMS == 0 && !sc.Durable && !sc.OAuth {
		for ai, a := range atts {
			if a.header.Get("X-Retry-Count") != "" || len(a.ids) == 0 {
				continue
			}
			first := accepted[a.ids[0]]
			for _, id := range a.ids {
				if at, ok := accepted[id]; ok && at.Before(first) {
					first = at
				}
			}
			// Behind a closed batch the interval starts when that one is taken (R46).
			for _, b := range atts {
				if b.header.Get("X-Retry-Count") == "" && b.at.Before(a.at) && b.at.After(first) {
					first = b.at
				}
			}
			due := first.Add(ms(sc.FlushIntervalMS) + simTolerance)
			if !a.at.After(due) || gateUntil(due) || (!run.close.at.IsZero() && a.at.After(run.close.at)) {
				continue
			}
			busy := false
			for _, b := range atts {
				if b.at.Before(a.at) && endOf(b).After(due.Add(-simTolerance)) || endOf(b).IsZero() && b.at.Before(a.at) {
					busy = true
					break
				}
			}
			if !busy {
				bad("R46", "attempt %d: its first event was accepted %v before it was sent (FlushInterval %v), the server idle meanwhile", ai, a.at.Sub(first), ms(sc.FlushIntervalMS))
			}
		}
	}

	// INV5: no attempt starts while a usable Retry-After holds the gate,
	// unless MaxRateLimitDuration ended the episode (R32, R35).
	type ending struct {
		at time.Time
		ra bool
	}
	var answers []ending
	for _, a := range atts {
		if !a.final.done.IsZero() && a.final.status != 0 { // a transport error is no response (R34)
			answers = append(answers, ending{a.final.done, a.class() == clsRA})
		}
	}
	sort.Slice(answers, func(i, j int) bool { return answers[i].at.Before(answers[j].at) })
	limitRL := sc.maxRateLimit()
	for ai, a := range atts {
		if a.class() != clsRA {
			continue
		}
		t, until := a.final.done, a.final.raUntil
		// The episode's earliest possible start: answers of one instant
		// may have been taken in in any order, so an instant with a
		// usable Retry-After may have (re)started the episode even if
		// other answers of that instant ended it (R31, R34).
		start := t
		for i := len(answers) - 1; i >= 0; {
			at := answers[i].at
			ra, other := false, false
			for ; i >= 0 && answers[i].at.Equal(at); i-- {
				ra = ra || answers[i].ra
				other = other || !answers[i].ra
			}
			if at.After(t) {
				continue
			}
			if ra && at.Before(start) {
				start = at
			}
			if other && at.Before(t) {
				break
			}
		}
		for bi, b := range atts {
			if b.at.After(t) && b.at.Before(until.Add(-simTolerance)) && b.at.Before(start.Add(limitRL)) {
				bad("INV5", "attempt %d arrived %v after attempt %d's Retry-After (until +%v)", bi, b.at.Sub(t), ai, until.Sub(t))
				break
			}
		}
	}

	// R67: after a 413 on a body of B bytes, no batch made of events
	// accepted after that answer has a body of B bytes or more, whether
	// the refused body held one event or several. (This and the next check
	// belong to the smalllimit class.) Sizes are compared as the client
	// reckons them, with the longest sentAt: a refused body whose sentAt
	// was written shorter (a round instant; each event's too with
	// WithEventSentAt) counts up to that many bytes more than it weighed.
	for ai, a := range atts {
		if !run.faults[faultSmallLimit] {
			break
		}
		if a.final.status != 413 || len(a.ids) < 1 {
			continue
		}
		reckoned := a.size + simSentAtSlack
		if sc.EventSentAt {
			reckoned += simSentAtSlack * len(a.ids)
		}
		for bi, b := range atts {
			if b.header.Get("X-Retry-Count") != "" || len(b.ids) < 2 || b.size < reckoned || !b.at.After(a.final.done) {
				continue
			}
			after := true
			for _, id := range b.ids {
				if at, ok := accepted[id]; !ok || !at.After(a.final.done) {
					after = false
					break
				}
			}
			if after {
				bad("R67", "attempt %d: a new batch of %d bytes after attempt %d's %d-byte body (%d as reckoned at most) was answered 413", bi, b.size, ai, a.size, reckoned)
				break
			}
		}
	}

	// R67 at any size: against a fixed body limit the search for it is
	// refused (413 on a batch it could have cut) at most twice when the
	// limit is probeCap or more, every such 413 counted: a body larger than
	// any accepted and than untriedFloor goes alone (R69), so no two are
	// refused at once. Below probeCap, at most three times, counting the
	// bodies on the wire when the first 413 was answered as one: R69 lets
	// small ones go side by side until then, and their 413s cost the search
	// nothing.
	if run.faults[faultSmallLimit] && sc.BodyLimit > 0 && sc.BodyLimit2 == 0 {
		most, n := 2, 0
		var first time.Time
		if sc.BodyLimit < probeCap {
			most, n = searchRefusals, 1
			for _, a := range atts {
				if a.final.status == 413 && len(a.ids) > 1 && (first.IsZero() || a.final.done.Before(first)) {
					first = a.final.done
				}
			}
			if first.IsZero() {
				n = 0
			}
		}
		for _, a := range atts {
			if a.final.status == 413 && len(a.ids) > 1 && (first.IsZero() || a.at.After(first)) {
				n++
			}
		}
		if n > most {
			bad("R67", "%d batches of several events answered 413 under a fixed %d-byte limit; at most %d", n, sc.BodyLimit, most)
		}
	}

	// Per event: its attempts' history. INV6 (waits and counts), the
	// budgets (R27, R28), no attempt after a final answer.
	total2xx := []time.Time{}
	for _, a := range atts {
		if a.class() == clsOK {
			// The client may take the 2xx in when its body ends (R56's drain).
			total2xx = append(total2xx, a.final.done, a.final.end)
		}
	}
	released := func(from, to time.Time) bool {
		for _, u := range total2xx {
			if !u.Before(from) && !u.After(to) && to.Sub(u) <= simRelease+simTolerance {
				return true
			}
		}
		return false
	}
	type history struct {
		counted, ra, splits int
		firstCounted        time.Time // the first counted failure's answer
		firstCountedEnd     time.Time // … and its body's end, before which the client cannot have decided
		last                *simAttempt
		ok                  bool
	}
	hist := map[string]*history{}
	countedSends := 0
	countedReq := map[int]bool{}
	prevOf := map[int]simAttempt{} // a counted retry's previous attempt
	for id, list := range seenIDs {
		h := &history{}
		hist[id] = h
		for j, ai := range list {
			a := atts[ai]
			if h.last != nil {
				p := *h.last
				switch p.class() {
				case clsOK, clsFail:
					bad("INV6", "%s sent again (attempt %d) after a final answer %d to attempt %d", id, ai, p.final.status, p.idx)
				case clsCounted:
					h.counted++
					countedReq[ai] = true
					prevOf[ai] = p
					if gap := a.at.Sub(p.final.done); gap < simMinCountedWait-simTolerance && !released(p.final.done, a.at) {
						bad("INV6", "%s: counted retry (request %d) %v after the failure (request %d), before the shortest wait %v (R26, R61)", id, a.idx, gap, p.idx, simMinCountedWait)
					}
					if el := p.final.done.Sub(h.firstCountedEnd); el >= sc.maxBackoff()+simTolerance {
						bad("R28", "%s: counted retry scheduled %v after its first counted failure, MaxTotalBackoffDuration %v", id, el, sc.maxBackoff())
					}
				case clsRA:
					h.ra++
					if sc.MaxRateLimitMS == 0 {
						bad("R35", "%s: sent again (attempt %d) after a usable Retry-After with MaxRateLimitDuration 0", id, ai)
					}
					if a.at.Before(p.final.raUntil.Add(-simTolerance)) {
						bad("INV5", "%s: rate-limited retry %v before the Retry-After instant", id, p.final.raUntil.Sub(a.at))
					}
				case clsSplit:
					h.splits++
				}
			}
			if a.class() == clsCounted && h.firstCounted.IsZero() {
				h.firstCounted, h.firstCountedEnd = a.final.done, a.final.done
				if a.final.end.After(a.final.done) {
					h.firstCountedEnd = a.final.end
				}
			}
			if a.class() == clsOK {
				h.ok = true
			}
			h.last = &atts[ai]
			_ = j
		}
		if h.counted > sc.maxRetries() {
			bad("R27", "%s: %d counted retries, MaxRetries %d", id, h.counted, sc.maxRetries())
		}
		if n := len(list); n > sc.maxRetries()+1+h.ra+h.splits {
			bad("INV6", "%s: %d attempts > MaxRetries+1+rate-limited %d+splits %d", id, n, h.ra, h.splits)
		}
	}
	countedSends = len(countedReq)

	// The retry allowance (R63) as the server saw it: 20 tokens, 5 per
	// second, 3 per 2xx; every counted retry on the wire takes one, but a
	// batch released from the gate needs none.
	type tick struct {
		at   time.Time
		add  float64
		take bool
		ai   int
	}
	gated := func(from, to time.Time) bool {
		for _, b := range atts {
			// (an HTTP-date's delay is rounded up: the gate may hold 1 s more, R21)
			if b.class() == clsRA && b.final.raUntil.Add(time.Second).After(from) && !b.final.done.After(to) {
				return true
			}
		}
		return false
	}
	// The allowance and the longest waits are checked in plain worlds
	// only: answers taken in when their body ends, redirect hops, learned
	// limits and rate limits move instants in ways not modelled here.
	plain := sc.CallbackSlowMS == 0 && sc.EventLimit == 0 && sc.HoldMaxMS == 0 && !sc.OAuth
	for _, a := range atts {
		switch a.kind {
		case "redirect307", "slow", "cut", "413", "429-events", "ratelimit":
			plain = false
		}
		plain = plain && !a.final.raUsable && !a.final.hop
	}
	var ticks []tick
	for _, a := range atts {
		if a.class() == clsOK {
			ticks = append(ticks, tick{at: a.final.done, add: 3})
		}
	}
	for ai := range countedReq {
		if p := prevOf[ai]; !gated(p.final.done, atts[ai].at) {
			ticks = append(ticks, tick{at: atts[ai].at, take: true, ai: ai})
		}
	}
	sort.Slice(ticks, func(i, j int) bool {
		if ticks[i].at.Equal(ticks[j].at) {
			return !ticks[i].take && ticks[j].take // answers of one instant first
		}
		return ticks[i].at.Before(ticks[j].at)
	})
	// tokensBefore is the allowance just before x (takes at x excluded).
	tokensBefore := func(x time.Time) float64 {
		tk, lt := 20.0, run.start
		for _, t := range ticks {
			if !t.at.Before(x) {
				break
			}
			tk = min(20, tk+5*t.at.Sub(lt).Seconds())
			lt = t.at
			if t.take {
				tk--
			} else {
				tk = min(20, tk+t.add)
			}
		}
		return min(20, tk+5*x.Sub(lt).Seconds())
	}
	tokens, last := 20.0, run.start
	tokensAt := map[int]float64{}
	for i := 0; i < len(ticks); {
		// One instant at a time: its 2xx and takes may interleave in any
		// order, so the cap applies to the instant as a whole.
		at := ticks[i].at
		tokens = min(20, tokens+5*at.Sub(last).Seconds())
		last = at
		add, takes := 0.0, 0.0
		j := i
		for ; j < len(ticks) && ticks[j].at.Equal(at); j++ {
			if ticks[j].take {
				tokensAt[ticks[j].ai] = tokens + add - takes
				takes++
			} else {
				add += ticks[j].add
			}
		}
		tokens = min(20, tokens+add-takes)
		if tokens < -float64(sc.Consumers) && plain {
			bad("INV6", "attempt %d: counted retries leave faster than the retry allowance (R63): %.1f tokens", ticks[j-1].ai, tokens)
			tokens = 0
		}
		i = j
	}
	outs := map[string][]simOutcome{}
	for _, o := range run.out {
		outs[o.id] = append(outs[o.id], o)
	}
	tm := newSimTiming(run, atts, seenIDs, outs, bad)
	// A counted retry leaves no later than R26's longest wait for its
	// streak (the batch's counted failures since the last 2xx to any
	// batch, R61), unless the gate, the allowance, busy consumers, a
	// running callback or Close held it.
	if plain {
		type answer struct {
			at    time.Time
			fail  bool
			first string
		}
		var ordered []answer
		for _, a := range atts {
			if c := a.class(); c == clsOK || c == clsCounted {
				ordered = append(ordered, answer{a.final.done, c == clsCounted, a.ids[0]})
			}
		}
		sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].at.Before(ordered[j].at) })
		var twoxx []time.Time
		for _, a := range atts {
			if a.class() == clsOK {
				twoxx = append(twoxx, a.final.done)
			}
		}
		for ai := range countedReq {
			p, a := prevOf[ai], atts[ai]
			streak := 0
			var last2xx time.Time
			for _, u := range twoxx {
				if u.Before(p.final.done) && u.After(last2xx) {
					last2xx = u
				}
			}
			for _, x := range seenIDs[a.ids[0]] {
				b := atts[x]
				// (a failure at the instant of that 2xx may have come after it)
				if b.class() == clsCounted && !b.final.done.Before(last2xx) && !b.final.done.After(p.final.done) {
					streak++
				}
			}
			dk := min(60*time.Second, 500*time.Millisecond<<min(streak-1, 10))
			// Healthy (R63): of the last 16 answers (2xx and counted
			// failures, this batch's streak left out) at least four known
			// and fewer than half failures; then the wait is d_1 (R61).
			// Judged with a margin, for answers of the same instant.
			// The 16 are counted with the batch's own failures in them;
			// those are then left out of the judgement.
			var window []bool // true: a failure
			seen := 0
			for i := len(ordered) - 1; i >= 0 && seen < 16; i-- {
				o := ordered[i]
				if o.at.After(p.final.done) {
					continue
				}
				seen++
				if o.fail && o.first == a.ids[0] && !o.at.Before(last2xx) {
					continue
				}
				window = append(window, o.fail)
			}
			fails := 0
			for _, f := range window {
				if f {
					fails++
				}
			}
			if len(window) >= 8 && fails*2 < len(window)-4 {
				dk = 500 * time.Millisecond // d_1: the healthy wait d_h (R61) is shorter
				if _, surely := tm.health(p); surely {
					dk = healthyWaitMax // d_h (R61), healthy by any count
				}
			}
			late := p.final.done.Add(dk*11/10 + 250*time.Millisecond)
			if endOf(p).After(p.final.done) {
				late = endOf(p).Add(dk*11/10 + 250*time.Millisecond)
			}
			// A 2xx while it waits makes it due within d_1 (R62).
			for _, u := range twoxx {
				if u.After(endOf(p)) && u.Add(simRelease+250*time.Millisecond).Before(late) {
					late = u.Add(simRelease + 250*time.Millisecond)
				}
			}
			if !a.at.After(late) || gated(p.final.done, a.at) || tokensAt[ai] < 3 || tokensBefore(late) < 3 ||
				(!run.close.at.IsZero() && a.at.After(run.close.at)) {
				continue
			}
			busy, turn := 0, false
			for _, b := range atts {
				if b.at.Before(late) && (endOf(b).IsZero() || endOf(b).After(late)) {
					busy++
					// An untried size on the wire: other consumers may hold
					// batches waiting for its end (R69).
					turn = turn || mayBeUntried(b)
				}
			}
			// After a deadline, while the episode is open, the other
			// consumers hold until the probe's attempt is over (R64).
			probe := false
			for _, b := range atts {
				probe = probe || (busy > 0 && b.class() == clsRA && b.final.done.Before(late))
			}
			// Other batches sent meanwhile may have gone first (due order,
			// R47; new batches while it waits for a token, R63): only an
			// idle client is held to the bound.
			other := false
			for _, b := range atts {
				other = other || (!b.at.Before(late) && b.at.Before(a.at))
			}
			if busy < sc.Consumers && !turn && !probe && !other {
				bad("INV6", "attempt %d: counted retry %v after the failure, later than R26's longest wait %v for streak %d (R61)", ai, a.at.Sub(p.final.done), dk*11/10, streak)
			}
		}
	}

	// INV1, INV2 and each outcome's error against what the server said.
	var nDelivered, nFailed, nBack int
	for id, os := range outs {
		if _, ok := accepted[id]; !ok {
			bad("INV1", "callback for %s, which was not accepted", id)
			continue
		}
		if len(os) != 1 {
			bad("INV1", "%s has %d outcomes", id, len(os))
		}
		o := os[0]
		h := hist[id]
		if h == nil {
			h = &history{}
		}
		switch {
		case o.err == nil:
			nDelivered++
			if !h.ok {
				bad("INV2", "%s delivered (OnSuccess) but no attempt carrying it was answered 2xx", id)
			}
		case errors.Is(o.err, ErrShutdownInterrupted):
			nBack++
			if run.close.at.IsZero() || o.at.Before(run.close.at) {
				bad("R38", "%s handed back before Close was called", id)
			}
			if h.ok && h.last != nil && h.last.final.done.Before(run.close.at) {
				bad("INV2", "%s handed back after a 2xx that arrived before Close", id)
			}
		default:
			nFailed++
			if h.ok {
				bad("INV2", "%s failed (%v) though an attempt carrying it was answered 2xx", id, o.err)
			}
			bad2 := simCheckFailure(sc, id, o, h.last, h.counted, h.firstCounted)
			if bad2 != "" {
				bad("R42", "%s", bad2)
			}
		}
	}
	// Without OnSuccess a delivery is seen at the server only: the 2xx.
	settledAt := func(id string) (time.Time, bool) {
		if len(outs[id]) > 0 {
			return outs[id][0].at, true
		}
		if h := hist[id]; !sc.OnSuccess && h != nil && h.ok {
			return h.last.final.done, true
		}
		return time.Time{}, false
	}
	// Durable: an event Close keeps on disk has that as its outcome
	// (handed back without a callback), when Close returns.
	outcomeAt := func(id string) (time.Time, bool) {
		if at, ok := settledAt(id); ok || !sc.Durable {
			return at, ok
		}
		return run.close.at, !run.close.at.IsZero() // (kept while Close runs)
	}
	kept := 0 // durable: accepted events the first client left on disk
	for id := range accepted {
		if _, ok := settledAt(id); !ok {
			if sc.Durable {
				kept++
				continue
			}
			bad("INV1", "%s accepted but has no outcome (Close returned %v)", id, run.closeErr)
		}
	}
	if sc.Durable {
		vs = append(vs, simCheckDurable(run, accepted, settledAt, outs)...)
		vs = append(vs, simCheckCrash(run)...)
	}
	// Enqueue results (section 3, R43, R45, R65).
	for _, e := range run.enq {
		switch {
		case e.bad != "" && errors.Is(e.err, ErrClosed) && !run.close.at.IsZero() && !e.at.Before(run.close.at):
		case e.bad == "invalid" && !errors.Is(e.err, ErrInvalidMessage):
			bad("R65", "%s without a user id: enqueue returned %v", e.id, e.err)
		case e.bad == "large" && !errors.Is(e.err, ErrEventTooLarge):
			bad("R45", "%s over 32 KiB: enqueue returned %v", e.id, e.err)
		case e.bad != "" || e.err == nil:
		case errors.Is(e.err, ErrClosed):
			if run.close.at.IsZero() || e.at.Before(run.close.at) {
				bad("R39", "%s: ErrClosed before Close was called", e.id)
			}
		case errors.Is(e.err, ErrQueueFull):
			if e.context && e.ctxMS == 0 {
				bad("R71", "%s: EnqueueContext without a deadline returned %v", e.id, e.err)
			}
			if e.context && e.ctxMS > 0 && (!errors.Is(e.err, context.DeadlineExceeded) || e.at.Sub(e.call) < ms(e.ctxMS)) {
				bad("R71", "%s: EnqueueContext(%dms) returned %v after %v", e.id, e.ctxMS, e.err, e.at.Sub(e.call))
			}
		default:
			bad("R42", "%s: a valid event was rejected with %v", e.id, e.err)
		}
	}
	if bound := sc.QueueCapacity + sc.Consumers*sc.FlushAt; sc.OnSuccess && !sc.Durable && run.held > bound {
		bad("R43", "%d accepted events without an outcome, more than QueueCapacity + Consumers × FlushAt = %d", run.held, bound)
	}

	// INV7, R39, R41: Flush and Close.
	bound := func(c simCall) time.Duration {
		switch c.Ctx {
		case "done":
			return 0
		case "background":
			return sc.closeTimeout()
		}
		return ms(c.MS)
	}
	grace := 500*time.Millisecond + time.Millisecond
	if d := run.close.done.Sub(run.close.at); d > bound(sc.Close)+grace {
		bad("INV7", "Close(%s %dms) took %v", sc.Close.Ctx, sc.Close.MS, d)
	}
	switch {
	case run.closeErr == nil:
		if nBack > 0 {
			bad("R39", "Close returned nil but %d events were handed back", nBack)
		}
		for _, id := range run.close.before {
			if at, ok := outcomeAt(id); !ok || at.After(run.close.done) {
				bad("R39", "Close returned nil before %s had an outcome", id)
				break
			}
		}
	case errors.Is(run.closeErr, ErrShutdownInterrupted):
		running := false // a callback had not returned when Close did
		for _, sp := range run.callSpans {
			running = running || (!sp[0].After(run.close.done) && !sp[1].Before(run.close.done))
		}
		if run.stats.HandedBack == 0 && !running {
			bad("R39", "Close returned %v but Stats.HandedBack is 0 and no callback was running", run.closeErr)
		}
	default:
		bad("R39", "Close returned %v", run.closeErr)
	}
	for i, err := range run.after {
		if !errors.Is(err, ErrClosed) {
			bad("R39", "call %d after Close returned %v, want ErrClosed", i, err)
		}
	}
	for _, f := range run.flushes {
		if f.call.Ctx == "timeout" || f.call.Ctx == "done" {
			if d := f.done.Sub(f.at); d > bound(f.call)+grace {
				bad("INV7", "Flush(%s %dms) took %v", f.call.Ctx, f.call.MS, d)
			}
		}
		switch {
		case f.err == nil:
			for _, id := range f.before {
				if at, ok := outcomeAt(id); !ok || at.After(f.done) {
					bad("R41", "Flush returned nil before %s had an outcome", id)
					break
				}
			}
		case errors.Is(f.err, ErrClosed):
			if f.done.Before(run.close.at) {
				bad("R41", "Flush returned ErrClosed before Close")
			}
		case errors.Is(f.err, context.DeadlineExceeded) || errors.Is(f.err, context.Canceled):
		default:
			bad("R41", "Flush returned %v", f.err)
		}
	}

	// The timing checkers of sim_timing_test.go.
	tm.countedWaits(prevOf, gated)
	tm.bodyEvents()
	tm.isolation(outs)
	tm.isolationBudget(outs)
	tm.rateLimits(outs)
	tm.messageIDs(outs)
	tm.earlyBatches(accepted)
	tm.oauth()

	// The accounting audit: Stats against what the server and the
	// callbacks saw.
	st := run.stats
	var nAcc, nFull, nInvalid, nLarge, nClosed int64
	for _, e := range run.enq {
		switch {
		case e.err == nil:
			nAcc++
		case errors.Is(e.err, ErrQueueFull):
			nFull++
		case errors.Is(e.err, ErrInvalidMessage):
			nInvalid++
		case errors.Is(e.err, ErrEventTooLarge):
			nLarge++
		case errors.Is(e.err, ErrClosed):
			nClosed++
		}
	}
	nClosed++ // the Track after Close
	check := func(name string, got, want int64) {
		if got != want {
			bad("Stats", "%s = %d, want %d", name, got, want)
		}
	}
	check("Accepted", st.Accepted, nAcc)
	check("RejectedQueueFull", st.RejectedQueueFull, nFull)
	check("RejectedInvalid", st.RejectedInvalid, nInvalid)
	check("RejectedTooLarge", st.RejectedTooLarge, nLarge)
	check("RejectedClosed", st.RejectedClosed, nClosed)
	check("Failed", st.Failed, int64(nFailed))
	check("HandedBack", st.HandedBack, int64(nBack+kept))
	check("Pending", st.Pending, 0)
	if sc.OnSuccess {
		check("Delivered", st.Delivered, int64(nDelivered))
		check("Batches", st.Batches, int64(run.successC))
	} else {
		check("Delivered", st.Delivered, nAcc-int64(nFailed+nBack+kept))
	}
	check("Requests", st.Requests, int64(len(atts)))
	if st.Retries > int64(countedSends) || st.Retries < int64(countedSends-sc.Consumers) {
		bad("Stats", "Retries = %d, counted retries on the wire %d", st.Retries, countedSends)
	}
	return vs
}

// simCheckFailure says what is wrong with a failed event's error, or "".
func simCheckFailure(sc simScenario, id string, o simOutcome, last *simAttempt, counted int, firstCounted time.Time) string {
	if last == nil {
		return fmt.Sprintf("%s failed with %v but was never sent", id, o.err)
	}
	var de *DeliveryError
	var he *HTTPError
	switch {
	case errors.Is(o.err, ErrRetriesExhausted):
		if counted != sc.maxRetries() || last.class() != clsCounted {
			return fmt.Sprintf("%s: %v after %d counted retries (MaxRetries %d), last answer %d", id, o.err, counted, sc.maxRetries(), last.final.status)
		}
	case errors.Is(o.err, ErrBackoffDurationExceeded):
		if last.class() != clsCounted || o.at.Sub(firstCounted) < sc.maxBackoff()-simTolerance {
			return fmt.Sprintf("%s: %v %v after its first counted failure (limit %v), last answer %d", id, o.err, o.at.Sub(firstCounted), sc.maxBackoff(), last.final.status)
		}
	case errors.Is(o.err, ErrRateLimitDurationExceeded):
		if last.class() != clsRA {
			return fmt.Sprintf("%s: %v, but its last answer (%d) had no usable Retry-After", id, o.err, last.final.status)
		}
	case errors.As(o.err, &de):
		return fmt.Sprintf("%s: unexpected DeliveryError %v", id, o.err)
	case errors.As(o.err, &he):
		if he.StatusCode != last.final.status {
			return fmt.Sprintf("%s: failed with status %d, last answer %d", id, he.StatusCode, last.final.status)
		}
		if c := last.class(); c != clsFail && c != clsSplit {
			return fmt.Sprintf("%s: failed with %v, but %d is retried", id, o.err, he.StatusCode)
		}
		if (he.Kind == KindRedirect) != (he.StatusCode >= 300 && he.StatusCode <= 399) {
			return fmt.Sprintf("%s: %d of kind %s", id, he.StatusCode, he.Kind)
		}
	default:
		return fmt.Sprintf("%s: failed with unexpected error %T %v (last answer %d)", id, o.err, o.err, last.final.status)
	}
	return ""
}

func simContiguous(outer, inner []string) bool {
	for i := 0; i+len(inner) <= len(outer); i++ {
		if outer[i] == inner[0] {
			for j := range inner {
				if outer[i+j] != inner[j] {
					return false
				}
			}
			return true
		}
	}
	return false
}

func simShort(ids []string) string {
	if len(ids) <= 4 {
		return fmt.Sprint(ids)
	}
	return fmt.Sprintf("[%s %s … %s] (%d)", ids[0], ids[1], ids[len(ids)-1], len(ids))
}

// simProducerOf splits an id "e<p>-<i>" (or "x…") into its producer and index.
func simProducerOf(id string) (string, int) {
	p, i, _ := strings.Cut(id[1:], "-")
	n, _ := strconv.Atoi(i)
	return p, n
}

func simIndex(id string) string {
	_, i := simProducerOf(id)
	return strconv.Itoa(i)
}

// simCheckDurable checks the second client on the directory: every event
// the first one kept is sent again with its messageId and settled there,
// each accepted event has exactly one callback over both clients, and
// nothing else is replayed (docs/durable.md; no crash here).
func simCheckDurable(run *simRun, accepted map[string]time.Time, outcomeAt func(string) (time.Time, bool), outs map[string][]simOutcome) []simViolation {
	var vs []simViolation
	bad := func(rule, f string, a ...any) {
		if len(vs) < 10 {
			vs = append(vs, simViolation{rule, fmt.Sprintf(f, a...)})
		}
	}
	if run.next.server == nil {
		return vs
	}
	if run.next.close != nil {
		bad("R70", "the second client on the directory: %v", run.next.close)
		return vs
	}
	sent := map[string]bool{}
	for _, r := range run.next.server.requests() {
		if r.status >= 200 && r.status <= 299 {
			for _, id := range r.ids {
				sent[id] = true
			}
		}
	}
	got := map[string]int{}
	for _, o := range run.next.out {
		got[o.id]++
		if o.err != nil {
			bad("R70", "%s: replayed against a server that answers 200, it got %v", o.id, o.err)
		}
	}
	want := 0
	for id := range accepted {
		_, settled := outcomeAt(id)
		switch {
		case !settled:
			want++
			if got[id] != 1 || !sent[id] {
				bad("R70", "%s was kept on disk by the first client; the next one settled it %d times (sent: %v)", id, got[id], sent[id])
			}
		case got[id] > 0:
			// Allowed once for a callback still running when Close
			// returned: its acknowledgement came too late (durable.md).
			late := false
			for _, o := range outs[id] {
				sp := run.callSpans[o.callIdx-1]
				late = late || sp[1].After(run.close.done)
			}
			if !late || got[id] > 1 {
				bad("INV1", "%s had its outcome in the first client and a callback again in the next", id)
			}
			want++
		}
	}
	for id := range got {
		if _, ok := accepted[id]; !ok {
			bad("INV1", "the next client reported %s, which was never accepted", id)
		}
	}
	if st := run.next.stats; st.Replayed != int64(want) || st.Delivered != int64(want) || st.Pending != 0 {
		bad("Stats", "the next client: Replayed %d, Delivered %d, Pending %d (torn %d, corrupt %d, missing %d); the first kept %d (OnDisk %d, Spilled %d)",
			st.Replayed, st.Delivered, st.Pending, st.DiskTorn, st.DiskCorrupt, st.DiskMissing, want, run.stats.OnDisk, run.stats.Spilled)
	}
	return vs
}

// simSentAtSlack is how much shorter a timestamp may be written than the
// longest (R67's reckoning): "2006-01-02T15:04:05Z" against
// "2006-01-02T15:04:05.999999999Z".
const simSentAtSlack = len(".999999999")
