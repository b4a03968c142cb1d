package e2e

// What a Segment-compatible gateway refuses, end to end over loopback
// against the faultserver's gateway mode: blank ids (R65), a 400 for one
// event of a batch (R66), a fixed body limit (R67) and a limit of events
// per request answered 429 without Retry-After (R68). Each test counts
// the requests the server saw.
//
// Batches cut by R66–R68 share events with the requests they came from,
// so these runs use checkCuts in place of checkInvariants (as the 413
// tests use checkSplit).

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/relaykit/analytics-go/e2e/faultserver"
)

// checkCuts checks a run whose batches may be cut after a refusal:
//   - INV1: every accepted event is in exactly one callback call;
//   - an event the CLI reports delivered was in exactly one request
//     answered 2xx, any other in none;
//   - a request is either a new batch (none of its events sent before, no
//     X-Retry-Count) or a run of consecutive events, in order, of one
//     earlier request answered 400, 413 or 429, carrying X-Retry-Count =
//     the number of earlier requests that carried its events.
func checkCuts(t testing.TB, r *result) {
	t.Helper()
	checkOutcomes(t, r)
	seen := map[string]int{}
	for i, q := range r.reqs {
		if len(q.MessageIDs) == 0 {
			t.Errorf("request #%d carries no events", q.Index)
			continue
		}
		prior := seen[q.MessageIDs[0]]
		for _, id := range q.MessageIDs {
			if seen[id] != prior {
				t.Errorf("request #%d mixes events sent %d and %d times before", q.Index, prior, seen[id])
				break
			}
		}
		if prior > 0 && !isCutOf(q, r.reqs[:i]) {
			t.Errorf("request #%d re-sends %d events that are no run of an earlier request answered 400, 413 or 429", q.Index, len(q.MessageIDs))
		}
		want := ""
		if prior > 0 {
			want = strconv.Itoa(prior)
		}
		if vals, ok := q.Header["X-Retry-Count"]; (want == "") == ok || (ok && vals[0] != want) {
			t.Errorf("request #%d: X-Retry-Count %q, want %q (absent when empty)", q.Index, vals, want)
		}
		for _, id := range q.MessageIDs {
			seen[id]++
		}
	}
	if t.Failed() {
		t.Logf("requests: %s\nstderr: %s", brief(r.reqs), tail(r.stderr))
	}
}

// checkOutcomes checks what a run whose batches were cut after a refusal
// must still show: INV1 (every accepted event in exactly one callback
// call), and every event the CLI reports delivered in exactly one request
// answered 2xx, any other in none (a refused request stored nothing).
func checkOutcomes(t testing.TB, r *result) {
	t.Helper()
	for _, e := range r.out.Events {
		if e.Outcome != outRejected && e.Callbacks != 1 {
			t.Errorf("INV1: %s (%s) in %d callback calls, want 1", e.MessageID, e.Outcome, e.Callbacks)
		}
	}
	dl := r.srv.Delivered()
	for _, e := range r.out.Events {
		want := 0
		if e.Outcome == outDelivered {
			want = 1
		}
		if dl[e.MessageID] != want {
			t.Errorf("%s (%s): in %d requests answered 2xx, want %d", e.MessageID, e.Outcome, dl[e.MessageID], want)
		}
	}
}

func isCutOf(q faultserver.Request, earlier []faultserver.Request) bool {
	got := "," + strings.Join(q.MessageIDs, ",") + ","
	for _, p := range earlier {
		switch p.Status {
		case 400, 413, 429:
			if strings.Contains(","+strings.Join(p.MessageIDs, ",")+",", got) {
				return true
			}
		}
	}
	return false
}

// brief renders requests as count of events, status and X-Retry-Count.
func brief(reqs []faultserver.Request) string {
	var b strings.Builder
	for _, q := range reqs {
		first := ""
		if len(q.MessageIDs) > 0 {
			first = q.MessageIDs[0]
		}
		fmt.Fprintf(&b, "\n  #%d %d events from %s, %d bytes, xrc=%q status=%d", q.Index, len(q.MessageIDs), first,
			len(q.Body), q.Header.Get("X-Retry-Count"), q.Status)
	}
	return b.String()
}

func countStatus(reqs []faultserver.Request, status int) int {
	n := 0
	for _, q := range reqs {
		if q.Status == status {
			n++
		}
	}
	return n
}

// R65: ids that are blank once trimmed (ASCII and Unicode spaces,
// invisible characters) are rejected at enqueue; the valid events of the
// same batch go out in one request and the gateway, which trims ids the
// same way, stores them all.
func TestBlankIDsRejectedAtEnqueue(t *testing.T) {
	t.Parallel()
	valid := ids("ok", 9)
	blanks := map[string]event{
		"blank-ascii":   {"type": "track", "messageId": "blank-ascii", "event": "E", "userId": "   "},
		"blank-unicode": {"type": "identify", "messageId": "blank-unicode", "userId": "\u3000\u00a0", "anonymousId": "\u200b"},
		"blank-alias":   {"type": "alias", "messageId": "blank-alias", "userId": "\t", "previousId": "p"},
	}
	evs := tracks(valid[:4]...)
	for _, id := range []string{"blank-ascii", "blank-unicode", "blank-alias"} {
		evs = append(evs, blanks[id])
	}
	evs = append(evs, tracks(valid[4:]...)...)
	r := runScenario(t, scenario{
		in:     input{Sequences: one(evs...), Config: cfg("flushAt", 20)},
		server: faultserver.Options{Gateway: true},
	})
	expectCount(t, r.reqs, 1)
	for id := range blanks {
		expectOutcome(t, r, id, outRejected, kindInvalid, -1)
	}
	for _, id := range valid {
		expectOutcome(t, r, id, outDelivered, "", 200)
	}
	if len(r.reqs) == 1 && len(r.reqs[0].MessageIDs) != len(valid) {
		t.Errorf("the request carries %d events, want the %d valid ones", len(r.reqs[0].MessageIDs), len(valid))
	}
}

// R66: a gateway that refuses with 400 any batch carrying one marked
// event: the batch that carries it is halved until the marked event fails
// alone with its own 400, the other 99 are delivered once each, and that
// batch's requests are 1 + 2 per halving (7 halvings for a batch of 100;
// R67's ramp sends the 100 events in smaller batches, so fewer). Every
// other batch goes once, answered 200.
func TestBadRequestFailsOnlyTheMarkedEvent(t *testing.T) {
	t.Parallel()
	id := ids("iso", 100)
	marked := id[61]
	r := runScenario(t, scenario{
		in: input{Sequences: one(tracks(id...)...), Config: cfg("flushAt", 100, "flushInterval", 60_000)},
		respond: byID(map[string]responder{
			marked: fixed(faultserver.Reply(400, `{"message":"request neither has anonymousId nor userId"}`)),
		}, nil),
		noInv: true,
	})
	checkCuts(t, r)
	need(t, r.reqs, 1)
	var batch []string // the first request that carried the marked event
	for _, q := range r.reqs {
		if slices.Contains(q.MessageIDs, marked) {
			batch = q.MessageIDs
			break
		}
	}
	at := slices.Index(batch, marked)
	if at < 0 {
		t.Fatalf("%s reached no request: %s", marked, describe(r.reqs))
	}
	halvings := 0
	for lo, hi := 0, len(batch); hi-lo > 1; halvings++ {
		if mid := lo + (hi-lo)/2; at < mid {
			hi = mid
		} else {
			lo = mid
		}
	}
	pieces := 0
	for _, q := range r.reqs {
		if len(q.MessageIDs) > 0 && slices.Contains(batch, q.MessageIDs[0]) {
			pieces++
		} else if q.Status != 200 {
			t.Errorf("request #%d, of another batch, answered %d", q.Index, q.Status)
		}
	}
	if pieces != 1+2*halvings {
		t.Errorf("%d requests for the batch of %d that carried %s, want %d: %s", pieces, len(batch), marked, 1+2*halvings, describe(r.reqs))
	}
	if n := countStatus(r.reqs, 400); n != halvings+1 {
		t.Errorf("%d requests answered 400, want %d (one per halving, and the marked event alone)", n, halvings+1)
	}
	for _, m := range id {
		if m != marked {
			expectOutcome(t, r, m, outDelivered, "", 200)
		}
	}
	expectOutcome(t, r, marked, outFailed, kindNonRetryable, 400)
	if e := r.ev(t, marked); !strings.Contains(e.Error, "request neither has anonymousId nor userId") {
		t.Errorf("%s: error %q does not carry the server's text", marked, e.Error)
	}
}

// paddedTracks returns track events of about 300 bytes of JSON each.
func paddedTracks(idList ...string) []event {
	evs := tracks(idList...)
	for _, ev := range evs {
		ev["properties"] = map[string]any{"plan": "pro", "pad": strings.Repeat("p", 110)}
	}
	return evs
}

// R67, R69: a fixed 64 KiB body limit and 2 500 events of ~300 bytes
// (batches of 250 are ~75 KB), with the default eight consumers: the
// first bodies are R67's ramp (8 KiB, then twice the largest accepted),
// each alone (R69), the first refused one is within twice the limit, the
// client searches the limit one size at a time, so 1 or 2 requests are
// answered 413 (the search's budget, not one per consumer), every event is delivered once,
// and there are fewer requests than the 30 of a client that does not learn
// (10 batches, each refused and sent again as two halves).
func TestFixedBodyLimitIsLearned(t *testing.T) {
	t.Parallel()
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%t", gz), func(t *testing.T) {
			t.Parallel()
			id := ids(fmt.Sprintf("lim-%t", gz), 2500)
			r := runScenario(t, scenario{
				in: input{Sequences: one(paddedTracks(id...)...), Config: cfg("gzip", gz,
					"flushTimeoutMs", 30_000, "closeTimeoutMs", 30_000)},
				server: faultserver.Options{Gateway: true, MaxBodyBytes: 64 << 10},
				noInv:  true,
			})
			checkCuts(t, r)
			need(t, r.reqs, 1)
			refused := countStatus(r.reqs, 413)
			t.Logf("first body %d bytes (%d events); %d requests, %d answered 413", len(r.reqs[0].Body), len(r.reqs[0].MessageIDs), len(r.reqs), refused)
			if refused == 0 || refused > 2 {
				t.Errorf("%d requests answered 413, want 1 or 2: %s", refused, brief(r.reqs))
			}
			if len(r.reqs) >= 30 {
				t.Errorf("%d requests, want fewer than the 30 of a client that does not learn: %s", len(r.reqs), brief(r.reqs))
			}
			if r.out.Delivered != 2500 {
				t.Errorf("delivered %d, want 2500", r.out.Delivered)
			}
		})
	}
}

// R68: a gateway whose limit is 20 events per request, answering 429
// without Retry-After: a batch over it is split on its second 429 and its
// pieces on theirs, and every event is delivered once. The 100 events go
// in the batches of R67's ramp (8 KiB, about 36 events, then larger), so
// the pieces depend on which answer comes first: 2 to 8 requests answered
// 429 (a batch of 100 would take 8: two for it, one for each piece of 50
// and 25) and at most 10 answered 200. A client that only retries never
// gets past the limit (here its backoff budget of 8 s runs out).
func TestEventLimitPerRequestDeliversEverything(t *testing.T) {
	t.Parallel()
	id := ids("cap", 100)
	r := runScenario(t, scenario{
		in: input{Sequences: one(tracks(id...)...), Config: cfg("flushAt", 100, "flushInterval", 60_000,
			"maxTotalBackoffDurationMs", 8_000, "flushTimeoutMs", 30_000, "closeTimeoutMs", 30_000)},
		server: faultserver.Options{Gateway: true, MaxEvents: 20},
		noInv:  true,
	})
	checkCuts(t, r)
	if n := countStatus(r.reqs, 429); n < 2 || n > 8 {
		t.Errorf("%d requests answered 429, want 2 to 8: %s", n, brief(r.reqs))
	}
	if n := countStatus(r.reqs, 200); n > 10 {
		t.Errorf("%d requests answered 200, want at most 10: %s", n, brief(r.reqs))
	}
	for _, q := range r.reqs {
		if q.Status == 200 && len(q.MessageIDs) > 20 {
			t.Errorf("request #%d: %d events accepted over a limit of 20", q.Index, len(q.MessageIDs))
		}
	}
	if r.out.Delivered != 100 {
		t.Errorf("delivered %d, want 100", r.out.Delivered)
	}
}
