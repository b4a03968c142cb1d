package e2e

// A 413 cuts the batch into pieces (R3, R67): end-to-end over loopback
// against a server with a small body limit. The faultserver's gateway mode answers 413 to a
// decoded body above MaxBodyBytes, as an ingestion gateway or a proxy with
// a request size limit does.
//
// These runs go through their own checks (checkSplit) instead of
// checkInvariants: after a split the halves share events with the batch
// they came from, carry on its X-Retry-Count and are due at once, which
// INV3, INV4 and INV6 as written for intact batches do not allow.
// halving and predictRequests give what R3's halving alone would take; the
// body limit search (R67) takes no more.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/e2e/faultserver"
)

// halving is the test's own model of R3: a body of frame bytes around the
// events (sizes, comma separated) that is above limit is answered 413 and,
// with more than one event, sent again as two halves (the first half has
// len/2 events). It returns the number of requests.
func halving(sizes []int, limit, frame int) int {
	body := frame + len(sizes) - 1
	for _, s := range sizes {
		body += s
	}
	if body <= limit || len(sizes) == 1 {
		return 1
	}
	mid := len(sizes) / 2
	return 1 + halving(sizes[:mid], limit, frame) + halving(sizes[mid:], limit, frame)
}

// predictRequests computes from the first request (the whole batch as the
// server received it) how many requests halving takes. The frame around
// the events differs between attempts only in sentAt, whose text is 20 to
// 30 bytes long (trailing zeros of the fraction are dropped); a limit for
// which that changes the prediction is refused.
func predictRequests(t testing.TB, first faultserver.Request, limit int) (n int, sizes []int) {
	t.Helper()
	var env struct {
		Batch []json.RawMessage `json:"batch"`
	}
	if err := json.Unmarshal(first.Body, &env); err != nil {
		t.Fatalf("first body: %v", err)
	}
	frame := len(first.Body) - max(len(env.Batch)-1, 0)
	for _, e := range env.Batch {
		sizes = append(sizes, len(e))
		frame -= len(e)
	}
	lo := frame - (len(first.SentAt) - len("2006-01-02T15:04:05Z"))
	hi := frame + (len("2006-01-02T15:04:05.999999999Z") - len(first.SentAt))
	n = halving(sizes, limit, lo)
	if m := halving(sizes, limit, hi); m != n {
		t.Fatalf("limit %d lies within the sentAt jitter of a half (%d or %d requests); choose another", limit, n, m)
	}
	return n, sizes
}

// checkSplit checks a run whose batches may be split on 413:
//   - INV1: every accepted event is in exactly one callback call;
//   - every event the CLI reports delivered was in exactly one request
//     answered 2xx, and a failed or handed-back one in none (the server
//     stores nothing on a 413, so nothing is duplicated);
//   - a request is either a new batch (none of its events seen before, no
//     X-Retry-Count) or a piece of an earlier request answered 413: a run
//     of its events, in the same order;
//   - X-Retry-Count is the number of earlier requests that carried the
//     request's events (R3, R7: a half carries on the attempt count).
func checkSplit(t testing.TB, r *result) {
	t.Helper()
	checkOutcomes(t, r)
	seen := map[string]int{} // messageId → requests so far that carried it
	for i, q := range r.reqs {
		if len(q.MessageIDs) == 0 {
			t.Errorf("request #%d carries no events", q.Index)
			continue
		}
		prior := seen[q.MessageIDs[0]]
		for _, id := range q.MessageIDs {
			if seen[id] != prior {
				t.Errorf("request #%d mixes events sent %d and %d times before: %v", q.Index, prior, seen[id], q.MessageIDs)
				break
			}
		}
		if prior > 0 && !isPieceOf413(q, r.reqs[:i]) {
			t.Errorf("request #%d re-sends %v, which is no piece of an earlier request answered 413", q.Index, q.MessageIDs)
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
		t.Logf("requests: %s\noutput: %s\nstderr: %s", describe(r.reqs), strings.TrimSpace(r.stdout), tail(r.stderr))
	}
}

func isPieceOf413(q faultserver.Request, earlier []faultserver.Request) bool {
	got := "," + strings.Join(q.MessageIDs, ",") + ","
	for _, p := range earlier {
		if p.Status != 413 || len(p.MessageIDs) < 2 || len(p.MessageIDs) <= len(q.MessageIDs) {
			continue
		}
		if strings.Contains(","+strings.Join(p.MessageIDs, ",")+",", got) {
			return true
		}
	}
	return false
}

// wholeBatch is the first of reqs with its batch replaced by every event of
// ids, in order, as the requests carried them.
func wholeBatch(t testing.TB, reqs []faultserver.Request, ids []string) faultserver.Request {
	t.Helper()
	byID := map[string]json.RawMessage{}
	for _, q := range reqs {
		var env struct {
			Batch []json.RawMessage `json:"batch"`
		}
		if err := json.Unmarshal(q.Body, &env); err != nil {
			t.Fatalf("request #%d: %v", q.Index, err)
		}
		for i, e := range env.Batch {
			byID[q.MessageIDs[i]] = e
		}
	}
	var all []json.RawMessage
	for _, id := range ids {
		e, ok := byID[id]
		if !ok {
			t.Fatalf("%s reached no request", id)
		}
		all = append(all, e)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	body["batch"] = b
	whole := reqs[0]
	if whole.Body, err = json.Marshal(body); err != nil {
		t.Fatal(err)
	}
	whole.MessageIDs = ids
	return whole
}

// requestsOnlyWith returns the requests whose batch is exactly id.
func requestsOnlyWith(reqs []faultserver.Request, id string) []faultserver.Request {
	var out []faultserver.Request
	for _, q := range reqs {
		if len(q.MessageIDs) == 1 && q.MessageIDs[0] == id {
			out = append(out, q)
		}
	}
	return out
}

// R3, R67, S41: one event too large for the server among 200 fails alone
// with its own 413; the other 199 are delivered once each; the number of
// requests is at most what halving predicts from the sizes on the wire.
func TestTooLargeOneEventAmong200(t *testing.T) {
	t.Parallel()
	const limit = 12_000
	id := ids("big", 200)
	culprit := id[137]
	evs := tracks(id...)
	evs[137]["properties"] = map[string]any{"blob": strings.Repeat("x", 20_000)}
	r := runScenario(t, scenario{
		in: input{Sequences: one(evs...), Config: cfg("flushAt", 200, "flushInterval", 60_000,
			"flushTimeoutMs", 30_000, "closeTimeoutMs", 30_000)},
		server: faultserver.Options{Gateway: true, MaxBodyBytes: limit},
		noInv:  true,
	})
	checkSplit(t, r)
	need(t, r.reqs, 1)
	// The batch of 200 goes in the pieces of R67's ramp (8 KiB, then
	// twice the largest accepted): halving is predicted on the whole
	// batch, as the first body would have carried it.
	want, sizes := predictRequests(t, wholeBatch(t, r.reqs, id), limit)
	if len(r.reqs) > want {
		t.Errorf("server saw %d requests, want at most the %d of halving: %s", len(r.reqs), want, describe(r.reqs))
	}
	t.Logf("event sizes %d…%d bytes (culprit %d), limit %d: %d requests (halving: %d)", sizes[0], sizes[1], sizes[137], limit, len(r.reqs), want)

	for _, e := range r.out.Events {
		if e.MessageID != culprit {
			expectOutcome(t, r, e.MessageID, outDelivered, "", 200)
		}
	}
	expectOutcome(t, r, culprit, outFailed, kindNonRetryable, 413)
	// Its own *HTTPError: the server's message names the size of the body
	// that carried the culprit alone.
	alone := requestsOnlyWith(r.reqs, culprit)
	if len(alone) != 1 {
		t.Fatalf("%s was sent alone %d times, want once: %s", culprit, len(alone), describe(r.reqs))
	}
	if e := r.ev(t, culprit); !strings.Contains(e.Error, fmt.Sprintf("decoded body of %d bytes", len(alone[0].Body))) {
		t.Errorf("%s: error %q is not the 413 of its own request (%d bytes)", culprit, e.Error, len(alone[0].Body))
	}
	if r.out.Delivered != 199 || r.out.Failed != 1 || r.out.SentBatches == 0 {
		t.Errorf("delivered %d, failed %d, sentBatches %d; want 199, 1, > 0", r.out.Delivered, r.out.Failed, r.out.SentBatches)
	}
}

// R3, R67: a limit below every single event: each event fails alone with
// its own 413, after at most the 2n − 1 requests of halving, and cutting
// ends.
func TestTooLargeForEveryEvent(t *testing.T) {
	t.Parallel()
	const n = 16
	id := ids("each", n)
	r := runScenario(t, scenario{
		in:     input{Sequences: one(tracks(id...)...), Config: cfg("flushAt", n, "flushInterval", 60_000)},
		server: faultserver.Options{Gateway: true, MaxBodyBytes: 100},
		noInv:  true,
	})
	checkSplit(t, r)
	if len(r.reqs) > 2*n-1 {
		t.Errorf("server saw %d requests, want at most %d: %s", len(r.reqs), 2*n-1, describe(r.reqs))
	}
	for _, m := range id {
		expectOutcome(t, r, m, outFailed, kindNonRetryable, 413)
		alone := requestsOnlyWith(r.reqs, m)
		if len(alone) != 1 {
			t.Errorf("%s sent alone %d times, want once", m, len(alone))
			continue
		}
		if e := r.ev(t, m); !strings.Contains(e.Error, fmt.Sprintf("decoded body of %d bytes", len(alone[0].Body))) {
			t.Errorf("%s: error %q is not the 413 of its own request", m, e.Error)
		}
	}
	for _, q := range r.reqs {
		if q.Status != 413 {
			t.Errorf("request #%d answered %d, want 413", q.Index, q.Status)
		}
	}
}

// R3, R38, R39: Close while a batch is being split hands back every event
// that has no outcome yet, within the Close deadline; events whose single
// request was answered 413 before stay failed, and nothing is outstanding.
func TestTooLargeCloseDuringSplit(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		const n = 16
		const closeMs = 600
		id := ids("close", n)
		// Every answer takes 150 ms, so the 31 requests of the split
		// would take 4.6 s with one consumer; Close's deadline ends it.
		slow413 := func(r *faultserver.Request) faultserver.Response {
			return faultserver.Response{Status: 413, Body: `{"message":"request size exceeds max limit"}`, Delay: 150 * time.Millisecond}
		}
		r := runScenario(t, scenario{
			in: input{Sequences: []sequence{{Events: tracks(id...)}},
				Config: cfg("flushAt", n, "consumers", 1, "closeTimeoutMs", closeMs)},
			respond: slow413,
			noInv:   true,
		})
		checkSplit(t, r)
		closeBound(t, r, 0, closeMs*time.Millisecond)
		if len(r.reqs) >= 2*n-1 {
			t.Errorf("%d requests: the split ran to its end before Close's deadline; the test needs it cut short", len(r.reqs))
		}
		failed := 0
		for _, m := range id {
			e := r.ev(t, m)
			switch e.Outcome {
			case outFailed:
				failed++
				// Failed only after its own request, alone, was answered 413.
				if alone := requestsOnlyWith(r.reqs, m); len(alone) != 1 || alone[0].Status != 413 || e.Kind != kindNonRetryable {
					t.Errorf("%s failed (%s, status %d) without a 413 of its own: %s", m, e.Kind, e.Status, describe(alone))
				}
			case outHandedBack:
				if e.Kind != kindShutdown {
					t.Errorf("%s handed back with kind %q", m, e.Kind)
				}
			default:
				t.Errorf("%s: outcome %q, want failed or handed back", m, e.Outcome)
			}
		}
		if r.out.HandedBack == 0 {
			t.Errorf("no event handed back: %s", describe(r.reqs))
		}
		if r.out.HandedBack+failed != n {
			t.Errorf("handed back %d + failed %d, want %d", r.out.HandedBack, failed, n)
		}
		if !strings.Contains(r.out.CloseError, analytics.ErrShutdownInterrupted.Error()) {
			t.Errorf("Close returned %q, want ErrShutdownInterrupted", r.out.CloseError)
		}
	})
}
