package e2e

// One test per scenario of docs/delivery.md §6 (S1–S48). Each test runs the e2e-cli
// against its own faultserver and checks the scenario's expectations; every
// run also goes through checkInvariants (INV1–INV7). Tests are parallel:
// they spend their time waiting on timers, each with its own server.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/e2e/faultserver"
)

// cfg builds a config object from key/value pairs.
func cfg(kv ...any) map[string]any {
	m := make(map[string]any, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// one is a single sequence with the given events, flushed.
func one(evs ...event) []sequence { return []sequence{{Events: evs, Flush: true}} }

// wait is a sequence that only sleeps.
func wait(ms int) sequence { return sequence{DelayMs: ms, Events: []event{}} }

// need fails the test now when fewer than n requests were seen.
func need(t testing.TB, reqs []faultserver.Request, n int) {
	t.Helper()
	if len(reqs) < n {
		t.Fatalf("server saw %d requests, need at least %d: %s", len(reqs), n, describe(reqs))
	}
}

// ---------------------------------------------------------------------------
// 6.4 Success and classification

// S1 — Happy path (R1–R7, R46).
func TestS01HappyPath(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		id := ids("s1", 3)
		r := runScenario(t, scenario{
			in: input{Sequences: one(tracks(id...)...), Config: cfg("flushAt", 3)},
			// The 200 is held 300 ms so that a Flush returning before it shows.
			respond: fixed(faultserver.Response{Status: 200, Body: "{}", Delay: 300 * time.Millisecond}),
			server:  faultserver.Options{Gateway: true},
		})
		expectCount(t, r.reqs, 1)
		need(t, r.reqs, 1)
		q := r.reqs[0]
		if q.Method != http.MethodPost || q.Path != "/v1/batch" || q.Rejected != "" {
			t.Errorf("request: %s %s (gateway rejection %q), want POST /v1/batch", q.Method, q.Path, q.Rejected)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(q.Body, &body); err != nil {
			t.Fatalf("body is not a JSON object: %v", err)
		}
		var batch []map[string]any
		_ = json.Unmarshal(body["batch"], &batch)
		if len(batch) != 3 {
			t.Errorf("batch has %d items, want 3", len(batch))
		}
		if _, err := time.Parse(time.RFC3339Nano, q.SentAt); err != nil {
			t.Errorf("sentAt %q is not an RFC 3339 time: %v", q.SentAt, err)
		}
		if q.BodyWriteKey != defaultWriteKey {
			t.Errorf("body writeKey %q, want %q", q.BodyWriteKey, defaultWriteKey)
		}
		if strings.Join(q.MessageIDs, ",") != strings.Join(id, ",") {
			t.Errorf("messageIds %v, want %v in enqueue order", q.MessageIDs, id)
		}
		expectXRC(t, r.reqs, "")
		expectAll(t, r, outDelivered)
		expectSuccess(t, r, true)
		if r.out.SentBatches != 1 {
			t.Errorf("sentBatches %d, want 1", r.out.SentBatches)
		}
		if len(r.out.Flushes) != 1 || r.out.Flushes[0].Error != "" || r.out.Flushes[0].Ms < 300 {
			t.Errorf("flushes %+v: want one Flush without error, returning after the held 200 (≥ 300 ms)", r.out.Flushes)
		}
	})
}

// S2 — Every 2xx is success, whatever the body (R9).
func TestS02Every2xxIsSuccess(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		resp faultserver.Response
	}{
		{"201-json", faultserver.Reply(201, "{}")},
		{"202-empty", faultserver.Response{Status: 202}},
		{"204-no-body", faultserver.Response{Status: 204}},
		{"200-not-json", faultserver.Reply(200, "not json")},
		{"200-array", faultserver.Reply(200, "[]")},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				r := runScenario(t, scenario{
					in:      input{Sequences: one(track("s2-" + c.name)), Config: cfg("flushAt", 1)},
					respond: fixed(c.resp),
				})
				expectCount(t, r.reqs, 1)
				expectOutcome(t, r, "s2-"+c.name, outDelivered, "", c.resp.StatusCode())
				expectSuccess(t, r, true)
			})
		})
	}
}

// S3 — Retryable 500 twice, then success (R7, R26).
func TestS03Retry500Twice(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in:      input{Sequences: one(track("s3")), Config: cfg("flushAt", 1, "maxRetries", 3)},
			respond: script(status(500), status(500), ok200),
		})
		expectCount(t, r.reqs, 3)
		expectXRC(t, r.reqs, "", "1", "2")
		expectGaps(t, r.reqs, W(1), W(2))
		expectOutcome(t, r, "s3", outDelivered, "", 200)
	})
}

// S4 — Retryable 5xx (R13).
func TestS04Retryable5xx(t *testing.T) {
	t.Parallel()
	for _, st := range []int{500, 502, 503, 504, 508, 529} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				id := fmt.Sprintf("s4-%d", st)
				r := runScenario(t, scenario{
					in:      input{Sequences: one(track(id)), Config: cfg("flushAt", 1, "maxRetries", 3)},
					respond: script(status(st), ok200),
				})
				expectCount(t, r.reqs, 2)
				expectXRC(t, r.reqs, "", "1")
				expectGaps(t, r.reqs, W(1))
				expectOutcome(t, r, id, outDelivered, "", 200)
			})
		})
	}
}

// S5 — Non-retryable 5xx (R13).
func TestS05NonRetryable5xx(t *testing.T) {
	t.Parallel()
	for _, st := range []int{501, 505, 511} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				id := fmt.Sprintf("s5-%d", st)
				r := runScenario(t, scenario{
					// The client stays alive 2 s after the failure: nothing more may be sent.
					in:      input{Sequences: append(one(track(id)), wait(2000)), Config: cfg("flushAt", 1, "maxRetries", 3)},
					respond: fixed(status(st)),
				})
				expectCount(t, r.reqs, 1)
				expectXRC(t, r.reqs, "")
				expectOutcome(t, r, id, outFailed, kindNonRetryable, st)
				expectSuccess(t, r, false)
			})
		})
	}
}

// S6 — Retryable 4xx without Retry-After: counted backoff, per batch (R12, R29).
func TestS06Retryable4xx(t *testing.T) {
	t.Parallel()
	for _, st := range []int{408, 410, 429, 460} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				a, b := fmt.Sprintf("s6-%d-a", st), fmt.Sprintf("s6-%d-b", st)
				r := runScenario(t, scenario{
					in: input{
						Sequences: []sequence{{Events: tracks(a)}, {DelayMs: 100, Events: tracks(b)}},
						Config:    cfg("flushAt", 1, "maxRetries", 3, "consumers", 2),
					},
					respond: byID(map[string]responder{a: script(status(st), ok200)}, nil),
				})
				ra := r.batchReqs(a)
				expectCount(t, ra, 2)
				expectXRC(t, ra, "", "1")
				expectGaps(t, ra, W(1))
				expectOutcome(t, r, a, outDelivered, "", 200)
				expectOutcome(t, r, b, outDelivered, "", 200)
				// R29: a's counted wait does not hold b back (Consumers = 2).
				rb := r.batchReqs(b)
				need(t, rb, 1)
				need(t, ra, 2)
				if !rb[0].Arrived.Before(ra[1].Arrived) {
					timingf(t, "b's request arrived %v after a's first failure, after a's retry: a counted wait held another batch back",
						rb[0].Arrived.Sub(ra[0].Finished).Round(time.Millisecond))
				}
			})
		})
	}
}

// S7 — Non-retryable 4xx, with the server's message kept (R12, R18).
func TestS07NonRetryable4xx(t *testing.T) {
	t.Parallel()
	const body = `{"code":"invalid_payload","message":"the batch payload was rejected"}`
	for _, st := range []int{400, 401, 403, 404, 413, 418, 422, 499} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				id := fmt.Sprintf("s7-%d", st)
				r := runScenario(t, scenario{
					in:      input{Sequences: append(one(track(id)), wait(2000)), Config: cfg("flushAt", 1)},
					respond: fixed(faultserver.Reply(st, body)),
				})
				expectCount(t, r.reqs, 1)
				expectOutcome(t, r, id, outFailed, kindNonRetryable, st)
				if e := r.ev(t, id); !strings.Contains(e.Error, "the batch payload was rejected") {
					t.Errorf("R18: error %q does not carry the server's message", e.Error)
				}
			})
		})
	}
}

// S8 — Counted retries exhausted (R27).
func TestS08RetriesExhausted(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			// Alive 5 s after the failure: no 4th request.
			in:      input{Sequences: append(one(track("s8")), wait(5000)), Config: cfg("flushAt", 1, "maxRetries", 2)},
			respond: fixed(status(500)),
		})
		expectCount(t, r.reqs, 3)
		expectXRC(t, r.reqs, "", "1", "2")
		expectGaps(t, r.reqs, W(1), W(2))
		expectOutcome(t, r, "s8", outFailed, kindRetries, 500)
		if e := r.ev(t, "s8"); !strings.Contains(e.Error, "500") {
			t.Errorf("error %q does not name the wrapped status 500", e.Error)
		}
	})
}

// S9 — Explicit MaxRetries = 0 (R27, R48).
func TestS09MaxRetriesZero(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		resp   faultserver.Response
		status int
	}{
		{"A-always-500", status(500), 500},
		{"B-always-close", faultserver.Response{CloseWithoutResponse: true}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				id := "s9-" + c.name
				r := runScenario(t, scenario{
					in:      input{Sequences: one(track(id)), Config: cfg("flushAt", 1, "maxRetries", 0)},
					respond: fixed(c.resp),
				})
				expectCount(t, r.reqs, 1)
				expectOutcome(t, r, id, outFailed, kindRetries, c.status)
			})
		})
	}
}

// S10 — Transport errors retry by counted backoff (R14, R16).
func TestS10TransportErrors(t *testing.T) {
	t.Parallel()
	t.Run("A-closed-without-status", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			r := runScenario(t, scenario{
				in:      input{Sequences: one(track("s10a")), Config: cfg("flushAt", 1)},
				respond: script(faultserver.Response{CloseWithoutResponse: true}, ok200),
			})
			expectCount(t, r.reqs, 2)
			expectXRC(t, r.reqs, "", "1")
			expectGaps(t, r.reqs, W(1))
			expectOutcome(t, r, "s10a", outDelivered, "", 200)
		})
	})
	t.Run("C-truncated-500", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			r := runScenario(t, scenario{
				in: input{Sequences: one(track("s10c")), Config: cfg("flushAt", 1)},
				respond: script(
					faultserver.Response{Status: 500, Body: "0123456789", TruncateBody: true, ContentLength: 1000},
					ok200),
			})
			expectCount(t, r.reqs, 2)
			expectXRC(t, r.reqs, "", "1")
			expectGaps(t, r.reqs, W(1))
			expectOutcome(t, r, "s10c", outDelivered, "", 200)
		})
	})
}

// S10 B — connections refused, then a listener (R14, R16). Not parallel:
// the test frees a port and listens on it again 1.5 s later, and a
// parallel test's server could take the port meanwhile and receive this
// client's retries (seen in CI: "bind: address already in use", and the
// other test's server saw s10b). Sequential tests run before the parallel
// ones resume, so no other server of this package is starting then.
func TestS10BRefusedThenListening(t *testing.T) {
	retry(t, func(t testing.TB) {
		addr, err := faultserver.ReserveAddr()
		if err != nil {
			t.Fatal(err)
		}
		in := input{
			APIHost:   "http://" + addr,
			Sequences: one(track("s10b")),
			Config:    cfg("flushAt", 1),
		}
		// The listener starts 1.5 s after the CLI; until then connections
		// are refused and leave no record, but they count as attempts.
		var (
			srv       *server
			srvErr    error
			listening bool
			done      = make(chan struct{})
		)
		listen := func() {
			listening = true
			timer := time.NewTimer(1500 * time.Millisecond)
			go func() {
				defer close(done)
				<-timer.C
				for i := 0; i < 20; i++ { // the port may be briefly taken by another test
					if srv, srvErr = startServer(addr, nil); srvErr == nil {
						return
					}
					time.Sleep(25 * time.Millisecond)
				}
			}()
		}
		t.Cleanup(func() {
			if listening {
				<-done
				if srv != nil {
					srv.Close()
				}
			}
		})
		run := runCLI(t, in, runOptions{onStart: listen})
		<-done
		if srvErr != nil {
			t.Fatalf("could not listen on %s: %v", addr, srvErr)
		}
		s := struct{ srv *server }{srv}
		r := &result{cliRun: run, srv: s.srv, reqs: s.srv.settled(t)}
		checkInvariants(t, r, invOptions{unseenAttempts: true})
		need(t, r.reqs, 1)
		if v := r.reqs[0].Header.Get("X-Retry-Count"); v == "" || v == "0" {
			timingf(t, "first request the server saw has X-Retry-Count %q, want ≥ 1 (refused attempts count)", v)
		}
		expectOutcome(t, r, "s10b", outDelivered, "", 200)
	})
}

// S11 — Ambiguous write: response lost after commit (R3, R4, R8, R17).
func TestS11AmbiguousWrite(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in: input{Sequences: one(tracks("s11-1", "s11-2")...), Config: cfg("flushAt", 2, "httpTimeoutMs", 1000, "maxRetries", 3)},
			respond: script(
				faultserver.Response{Status: 200, Body: "{}", Delay: 3 * time.Second}, // recorded, then too late
				ok200),
		})
		expectCount(t, r.reqs, 2)
		need(t, r.reqs, 2)
		a, b := r.reqs[0], r.reqs[1]
		if strings.Join(a.MessageIDs, ",") != strings.Join(b.MessageIDs, ",") {
			t.Errorf("R3: retry carries %v, first attempt %v", b.MessageIDs, a.MessageIDs)
		}
		expectXRC(t, r.reqs, "", "1")
		ta, errA := time.Parse(time.RFC3339Nano, a.SentAt)
		tb, errB := time.Parse(time.RFC3339Nano, b.SentAt)
		if errA != nil || errB != nil || !tb.After(ta) {
			t.Errorf("R4: sentAt %q then %q: the retry's must be later", a.SentAt, b.SentAt)
		}
		if !a.Aborted {
			t.Errorf("the first request was answered (status %d); the client should have given up after 1 s", a.Status)
		}
		if g := b.Arrived.Sub(a.Arrived); g < time.Second+400*time.Millisecond || g > time.Second+550*time.Millisecond+eps {
			timingf(t, "retry %v after the first arrival, want HTTPTimeout 1 s + W_1", g.Round(time.Millisecond))
		}
		expectAll(t, r, outDelivered)
		if r.out.SentBatches != 1 {
			t.Errorf("sentBatches %d, want 1 (one OnSuccess)", r.out.SentBatches)
		}
	})
}

// ---------------------------------------------------------------------------
// 6.5 Retry-After

// S12 — Retry-After does not use the retry budget (R7, R25, R30, R31).
func TestS12RetryAfterNotCounted(t *testing.T) {
	t.Parallel()
	t.Run("MaxRetries=1", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			r := runScenario(t, scenario{
				in:      input{Sequences: one(track("s12")), Config: cfg("flushAt", 1, "maxRetries", 1)},
				respond: script(ra(429, "1"), ra(429, "1"), status(500), ok200),
			})
			expectCount(t, r.reqs, 4)
			expectXRC(t, r.reqs, "", "1", "2", "3")
			expectGaps(t, r.reqs, time.Second, time.Second, W(1))
			expectOutcome(t, r, "s12", outDelivered, "", 200)
		})
	})
	t.Run("MaxRetries=0", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			r := runScenario(t, scenario{
				in:      input{Sequences: one(track("s12-zero")), Config: cfg("flushAt", 1, "maxRetries", 0)},
				respond: script(ra(429, "1"), ok200),
			})
			expectCount(t, r.reqs, 2)
			expectGaps(t, r.reqs, time.Second)
			expectOutcome(t, r, "s12-zero", outDelivered, "", 200)
		})
	})
}

// S13 — Retry-After on other retryable statuses; the gate holds every batch
// (R25, R32).
func TestS13RetryAfterOtherStatuses(t *testing.T) {
	t.Parallel()
	for _, st := range []int{503, 529, 408, 500, 460} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				a, b := fmt.Sprintf("s13-%d-a", st), fmt.Sprintf("s13-%d-b", st)
				r := runScenario(t, scenario{
					in: input{
						// b is queued 0.3 s into a's 2 s wait; a second consumer is free.
						Sequences: []sequence{{Events: tracks(a)}, {DelayMs: 300, Events: tracks(b)}},
						Config:    cfg("flushAt", 1, "consumers", 2),
					},
					respond: byID(map[string]responder{a: script(ra(st, "2"), ok200)}, nil),
				})
				ra, rb := r.batchReqs(a), r.batchReqs(b)
				expectCount(t, ra, 2)
				expectXRC(t, ra, "", "1")
				expectGaps(t, ra, 2*time.Second)
				expectOutcome(t, r, a, outDelivered, "", 200)
				expectOutcome(t, r, b, outDelivered, "", 200)
				need(t, ra, 1)
				need(t, rb, 1)
				if d := rb[0].Arrived.Sub(ra[0].Responded); d < 2*time.Second-early {
					timingf(t, "R32: b sent %v after the Retry-After: 2 response, inside the 2 s gate", d.Round(time.Millisecond))
				}
			})
		})
	}
}

// S14 — Retry-After on non-retryable statuses is ignored (R25).
func TestS14RetryAfterOnNonRetryable(t *testing.T) {
	t.Parallel()
	for _, st := range []int{400, 413, 501} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				a, b := fmt.Sprintf("s14-%d-a", st), fmt.Sprintf("s14-%d-b", st)
				r := runScenario(t, scenario{
					in: input{
						Sequences: []sequence{{Events: tracks(a), Flush: true}, {Events: tracks(b), Flush: true}},
						Config:    cfg("flushAt", 1),
					},
					respond: byID(map[string]responder{a: fixed(ra(st, "5"))}, nil),
				})
				ra, rb := r.batchReqs(a), r.batchReqs(b)
				expectCount(t, ra, 1)
				expectOutcome(t, r, a, outFailed, kindNonRetryable, st)
				expectOutcome(t, r, b, outDelivered, "", 200)
				need(t, ra, 1)
				need(t, rb, 1)
				if d := rb[0].Arrived.Sub(ra[0].Finished); d > time.Second {
					timingf(t, "b arrived %v after a's %d with Retry-After: 5; want < 1 s (no gate)", d.Round(time.Millisecond), st)
				}
			})
		})
	}
}

// retryAfterCap runs one of the [slow] cap scenarios: the first answer is
// first(now), then 200; the retry must come ≈ 300 s later.
func retryAfterCap(t testing.TB, id string, first func(now time.Time) faultserver.Response) {
	r := runScenario(t, scenario{
		in: input{Sequences: one(track(id)), Config: cfg("flushAt", 1, "flushTimeoutMs", 400_000, "closeTimeoutMs", 400_000)},
		respond: seq(func(*faultserver.Request) faultserver.Response { return first(time.Now()) },
			fixed(ok200)),
		run: runOptions{timeout: 420 * time.Second},
	})
	expectCount(t, r.reqs, 2)
	expectGaps(t, r.reqs, 300*time.Second)
	expectOutcome(t, r, id, outDelivered, "", 200)
}

// S15 — [slow] Cap at 300 s (R24).
func TestS15RetryAfterCap(t *testing.T) {
	slow(t)
	t.Parallel()
	retry(t, func(t testing.TB) {
		retryAfterCap(t, "s15", func(time.Time) faultserver.Response { return ra(429, "600") })
	})
}

// S16 — Retry-After: 0 takes counted backoff (R23, R54).
func TestS16RetryAfterZero(t *testing.T) {
	t.Parallel()
	t.Run("A", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			r := runScenario(t, scenario{
				in:      input{Sequences: one(track("s16a")), Config: cfg("flushAt", 1, "maxRetries", 2)},
				respond: script(ra(429, "0"), ra(429, "0"), ok200),
			})
			expectCount(t, r.reqs, 3)
			expectGaps(t, r.reqs, W(1), W(2))
			expectOutcome(t, r, "s16a", outDelivered, "", 200)
		})
	})
	t.Run("B", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			r := runScenario(t, scenario{
				in:      input{Sequences: one(track("s16b")), Config: cfg("flushAt", 1, "maxRetries", 0)},
				respond: fixed(ra(429, "0")),
			})
			expectCount(t, r.reqs, 1)
			expectOutcome(t, r, "s16b", outFailed, kindRetries, 429)
		})
	})
}

// negativeDuration matches a negative Go duration in a log line.
var negativeDuration = regexp.MustCompile(`-[0-9.]+(ns|µs|us|ms|s|m|h)\b`)

// S17 — Negative Retry-After (R20, R23, R54).
func TestS17NegativeRetryAfter(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in:      input{Sequences: one(track("s17")), Config: cfg("flushAt", 1, "maxRetries", 2)},
			respond: script(ra(503, "-30"), ok200),
			run:     runOptions{debug: true},
		})
		expectCount(t, r.reqs, 2)
		expectGaps(t, r.reqs, W(1))
		expectOutcome(t, r, "s17", outDelivered, "", 200)
		if m := negativeDuration.FindString(r.stderr); m != "" {
			t.Errorf("a negative duration %q was logged:\n%s", m, tail(r.stderr))
		}
	})
}

// S18 — Unparseable Retry-After: warning with the raw value, counted path
// (R20, R22, R25).
func TestS18UnparseableRetryAfter(t *testing.T) {
	t.Parallel()
	for i, v := range []string{"soon", "2.5", "", "+5", "1e3", "5 s", "Wed, 21 Oct 2037 07:28:00 EST"} {
		t.Run(fmt.Sprintf("%d-%q", i, v), func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				id := fmt.Sprintf("s18-%d", i)
				r := runScenario(t, scenario{
					in:      input{Sequences: one(track(id)), Config: cfg("flushAt", 1, "maxRetries", 2)},
					respond: script(ra(429, v), ok200),
					run:     runOptions{debug: true},
				})
				expectCount(t, r.reqs, 2)
				expectGaps(t, r.reqs, W(1))
				expectOutcome(t, r, id, outDelivered, "", 200)
				warned := false
				for _, line := range strings.Split(r.stderr, "\n") {
					l := strings.ToLower(line)
					if strings.Contains(l, "warn") && strings.Contains(l, "retry-after") && strings.Contains(line, v) {
						warned = true
					}
				}
				if !warned {
					t.Errorf("R25/R51: no warning log line containing the raw value %q:\n%s", v, tail(r.stderr))
				}
			})
		})
	}
}

// dateScenario runs S19/S20/S23: the first answer is a 429 whose Retry-After
// is T formatted by format, with T = now rounded up to a whole second + 3 s;
// the retry must arrive in [T − 0.05 s, T + 1 s + ε], with MaxRetries = 0.
func dateScenario(t testing.TB, id string, format func(time.Time) string, env []string) {
	t.Helper()
	r := runScenario(t, scenario{
		in: input{Sequences: one(track(id)), Config: cfg("flushAt", 1, "maxRetries", 0)},
		respond: seq(func(*faultserver.Request) faultserver.Response {
			T := time.Now().UTC().Truncate(time.Second).Add(time.Second + 3*time.Second)
			return ra(429, format(T))
		}, fixed(ok200)),
		run: runOptions{env: env},
	})
	expectCount(t, r.reqs, 2)
	expectOutcome(t, r, id, outDelivered, "", 200)
	need(t, r.reqs, 2)
	a, ok := r.srv.answer(r.reqs[0].Index)
	if !ok {
		t.Fatal("no recorded answer for the first request")
	}
	T, okT := usableRetryAfter(a.resp, r.reqs[0].Responded)
	if !okT {
		t.Fatalf("test bug: %q is not a usable date", a.resp.Header["Retry-After"])
	}
	got := r.reqs[1].Arrived
	if got.Before(T.Add(-early)) || got.After(T.Add(time.Second+eps)) {
		timingf(t, "retry at T%+v (Retry-After %q), want within [T−0.05 s, T+1 s+ε]",
			got.Sub(T).Round(time.Millisecond), a.resp.Header["Retry-After"])
	}
}

// S19 — HTTP-date in the future (R19, R21).
func TestS19HTTPDateFuture(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		dateScenario(t, "s19", func(T time.Time) string { return T.Format(http.TimeFormat) }, nil)
	})
}

// S20 — Numeric-zone HTTP-date; host TZ has no effect (R21, R22). The CLI
// process runs with TZ set; the server (this process) is unaffected.
func TestS20NumericZoneAnyTZ(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"-0000", "+0000"} {
		for _, tz := range []string{"UTC", "Pacific/Kiritimati", "Etc/GMT+12"} {
			t.Run(zone+"/"+tz, func(t *testing.T) {
				t.Parallel()
				retry(t, func(t testing.TB) {
					if _, err := time.LoadLocation(tz); err != nil {
						t.Fatalf("zone database lacks %s: %v", tz, err)
					}
					id := "s20-" + strings.NewReplacer("/", "-", "+", "p").Replace(zone+tz)
					dateScenario(t, id, func(T time.Time) string {
						return T.UTC().Format("Mon, 02 Jan 2006 15:04:05") + " " + zone
					}, []string{"TZ=" + tz})
				})
			})
		}
	}
}

// S21 — HTTP-date in the past (R21, R23).
func TestS21HTTPDatePast(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in:      input{Sequences: one(track("s21")), Config: cfg("flushAt", 1, "maxRetries", 2)},
			respond: script(ra(429, "Wed, 21 Oct 2015 07:28:00 GMT"), ok200),
		})
		expectCount(t, r.reqs, 2)
		expectGaps(t, r.reqs, W(1))
		expectOutcome(t, r, "s21", outDelivered, "", 200)
	})
}

// S22 — [slow] HTTP-date far in the future (R24).
func TestS22HTTPDateFarFuture(t *testing.T) {
	slow(t)
	t.Parallel()
	retry(t, func(t testing.TB) {
		retryAfterCap(t, "s22", func(now time.Time) faultserver.Response {
			return ra(429, now.Add(time.Hour).UTC().Format(http.TimeFormat))
		})
	})
}

// S23 — Obsolete date forms (R21).
func TestS23ObsoleteDateForms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, layout string }{
		{"rfc850", "Monday, 02-Jan-06 15:04:05 GMT"},
		{"asctime", "Mon Jan _2 15:04:05 2006"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				dateScenario(t, "s23-"+c.name, func(T time.Time) string { return T.UTC().Format(c.layout) }, nil)
			})
		})
	}
	// The case above writes today's date: asctime pads a one-digit day with
	// a second space only on the 1st–9th. A fixed past date with a one-digit
	// day checks that form on every day of the month: it parses (no
	// unparseable warning, R25) and, being past, takes the counted path
	// (R23). The exact delays of both day widths are unit-tested with a
	// fixed clock (TestParseRetryAfterAsctimeDayWidths).
	t.Run("asctime-fixed-one-digit-day", func(t *testing.T) {
		t.Parallel()
		const v = "Sun Nov  6 08:49:37 1994"
		retry(t, func(t testing.TB) {
			r := runScenario(t, scenario{
				in:      input{Sequences: one(track("s23-fixed")), Config: cfg("flushAt", 1, "maxRetries", 2)},
				respond: script(ra(429, v), ok200),
				run:     runOptions{debug: true},
			})
			expectCount(t, r.reqs, 2)
			expectGaps(t, r.reqs, W(1))
			expectOutcome(t, r, "s23-fixed", outDelivered, "", 200)
			for _, line := range strings.Split(r.stderr, "\n") {
				if l := strings.ToLower(line); strings.Contains(l, "warn") && strings.Contains(l, "retry-after") {
					t.Errorf("R21: %q was logged as unparseable: %s", v, line)
				}
			}
		})
	})
}

// S24 — [slow] Huge integer (R20, R24, R53).
func TestS24HugeInteger(t *testing.T) {
	slow(t)
	t.Parallel()
	retry(t, func(t testing.TB) {
		retryAfterCap(t, "s24", func(time.Time) faultserver.Response { return ra(429, "99999999999999999999") })
	})
}

// S25 — Gate and re-queue across batches (R32, R47).
func TestS25GateAndRequeue(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in:      input{Sequences: one(tracks("s25-1", "s25-2")...), Config: cfg("flushAt", 1, "consumers", 1)},
			respond: byID(map[string]responder{"s25-1": script(ra(429, "2"), ok200)}, nil),
			inv:     invOptions{inflightSlack: time.Millisecond}, // one consumer: nothing else is in flight
		})
		expectCount(t, r.reqs, 3)
		need(t, r.reqs, 3)
		want := [][]string{{"s25-1"}, {"s25-1"}, {"s25-2"}}
		for i, w := range want {
			if strings.Join(r.reqs[i].MessageIDs, ",") != strings.Join(w, ",") {
				t.Errorf("request %d carries %v, want %v (re-queued batch first, R47)", i+1, r.reqs[i].MessageIDs, w)
			}
		}
		expectXRC(t, r.reqs[:2], "", "1")
		expectXRC(t, r.reqs[2:], "")
		expectGaps(t, r.reqs[:2], 2*time.Second)
		expectAll(t, r, outDelivered)
	})
}

// S25b — Gate shared by consumers (R32, R34, R55).
func TestS25bGateSharedByConsumers(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		first := true
		r := runScenario(t, scenario{
			in: input{Sequences: one(tracks(ids("s25b", 8)...)...), Config: cfg("flushAt", 1, "consumers", 4)},
			// The first request gets the 429; every other answer is held 300 ms,
			// so a consumer whose 200 arrives after the 429 must wait at the gate.
			respond: func(*faultserver.Request) faultserver.Response {
				if first {
					first = false
					return ra(429, "2")
				}
				return faultserver.Response{Status: 200, Body: "{}", Delay: 300 * time.Millisecond}
			},
		})
		expectCount(t, r.reqs, 9)
		expectAll(t, r, outDelivered)
		need(t, r.reqs, 1)
		t0 := r.reqs[0].Responded
		before := 0
		for _, q := range r.reqs[1:] {
			if q.Arrived.Before(t0.Add(2*time.Second - early)) {
				before++
				if q.Arrived.After(t0.Add(100 * time.Millisecond)) {
					timingf(t, "R32: request #%d %v started %v after the 429, inside the gate",
						q.Index, q.MessageIDs, q.Arrived.Sub(t0).Round(time.Millisecond))
				}
			}
		}
		if before > 3 {
			timingf(t, "R32: %d other requests before t0 + 2 s, at most the 3 in flight allowed", before)
		}
	})
}

// S26 — A served deadline does not misroute later errors (R33).
func TestS26ServedDeadlineClassifiesNothing(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in: input{
				Sequences: append(one(track("s26")), wait(3000)),
				Config:    cfg("flushAt", 1, "maxRetries", 3),
			},
			respond: script(ra(429, "1"), faultserver.Reply(400, `{"code":"bad","message":"nope"}`)),
		})
		expectCount(t, r.reqs, 2)
		expectGaps(t, r.reqs, time.Second)
		expectOutcome(t, r, "s26", outFailed, kindNonRetryable, 400)
		if e := r.ev(t, "s26"); !strings.Contains(e.Error, "nope") {
			t.Errorf("error %q lacks the server's message", e.Error)
		}
		if len(r.out.Flushes) != 1 || r.out.Flushes[0].Ms > int64((time.Second+2*eps)/time.Millisecond) {
			timingf(t, "flushes %+v: Flush must return within 1 + 2ε s", r.out.Flushes)
		}
	})
}

// S26b — Stale state does not misroute a later batch (R33).
func TestS26bStaleStateLaterBatch(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in: input{
				Sequences: []sequence{{Events: tracks("s26b-1"), Flush: true}, {Events: tracks("s26b-2"), Flush: true}},
				Config:    cfg("flushAt", 1),
			},
			respond: byID(map[string]responder{
				"s26b-1": script(ra(429, "1"), ok200),
				"s26b-2": fixed(status(400)),
			}, nil),
		})
		expectCount(t, r.batchReqs("s26b-1"), 2)
		expectCount(t, r.batchReqs("s26b-2"), 1)
		expectOutcome(t, r, "s26b-1", outDelivered, "", 200)
		expectOutcome(t, r, "s26b-2", outFailed, kindNonRetryable, 400)
	})
}

// S26c — An episode ends on a response without usable Retry-After (R34).
func TestS26cEpisodeEnds(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in: input{
				Sequences: []sequence{
					{Events: tracks("s26c-1"), Flush: true},
					{DelayMs: 5000, Events: tracks("s26c-2"), Flush: true},
				},
				Config: cfg("flushAt", 1, "maxRateLimitDurationMs", 4000),
			},
			respond: byID(map[string]responder{
				"s26c-1": script(ra(429, "1"), status(400)),
				"s26c-2": script(ra(429, "1"), ok200),
			}, nil),
		})
		expectOutcome(t, r, "s26c-1", outFailed, kindNonRetryable, 400)
		expectOutcome(t, r, "s26c-2", outDelivered, "", 200)
		r2 := r.batchReqs("s26c-2")
		expectCount(t, r2, 2)
		expectGaps(t, r2, time.Second)
	})
}

// S27 — MaxRateLimitDuration (R30, R35).
func TestS27MaxRateLimitDuration(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in: input{
				Sequences: []sequence{{Events: tracks("s27-1")}, {DelayMs: 500, Events: tracks("s27-2")}},
				Config:    cfg("flushAt", 1, "consumers", 1, "maxRetries", 0, "maxRateLimitDurationMs", 3000),
			},
			respond: byID(map[string]responder{"s27-1": fixed(ra(429, "1"))}, nil),
		})
		r1, r2 := r.batchReqs("s27-1"), r.batchReqs("s27-2")
		expectCount(t, r1, 3)
		expectGaps(t, r1, time.Second, time.Second)
		expectOutcome(t, r, "s27-1", outFailed, kindRateLimitLimit, 429)
		expectOutcome(t, r, "s27-2", outDelivered, "", 200)
		need(t, r1, 1)
		need(t, r2, 1)
		// e1 fails at start + 3 s; e2 goes out at once (the pipeline resumes).
		if d := r2[0].Arrived.Sub(r1[0].Responded); d < 3*time.Second-early || d > 3*time.Second+eps {
			timingf(t, "R35: e2 sent %v after e1's first 429, want ≈ 3 s (right after e1 fails)", d.Round(time.Millisecond))
		}
	})
}

// S28 — MaxTotalBackoffDuration (R28).
func TestS28MaxTotalBackoffDuration(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in: input{
				Sequences: one(track("s28")),
				Config:    cfg("flushAt", 1, "maxRetries", 1000, "maxTotalBackoffDurationMs", 2000),
			},
			respond: fixed(status(500)),
		})
		n := len(r.reqs)
		if n < 3 || n > 4 {
			timingf(t, "%d requests, want 3 or 4 (≤ 4): %s", n, describe(r.reqs))
		}
		for i := 0; i+1 < n; i++ {
			expectGapW(t, fmt.Sprintf("gap_%d", i+1), gap(r.reqs[i], r.reqs[i+1]), i+1)
		}
		if n > 0 {
			first := r.reqs[0].Finished
			// Every retry was decided before 2 s had elapsed since the first
			// failure; the last decision (after the last request) at or after it.
			for i := 0; i+1 < n; i++ {
				if e := r.reqs[i].Finished.Sub(first); e >= 2*time.Second {
					timingf(t, "R28: retry after request %d decided %v after the first failure (≥ 2 s)", i+1, e.Round(time.Millisecond))
				}
			}
			if e := r.reqs[n-1].Finished.Sub(first); e < 2*time.Second-early {
				timingf(t, "R28: failed at the decision %v after the first failure, before 2 s", e.Round(time.Millisecond))
			}
		}
		expectOutcome(t, r, "s28", outFailed, kindBackoffBudget, 500)
	})
}

// S29 — MaxTotalBackoffDuration = 0 (R28, R48).
func TestS29MaxTotalBackoffDurationZero(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in: input{
				Sequences: one(track("s29")),
				Config:    cfg("flushAt", 1, "maxRetries", 1000, "maxTotalBackoffDurationMs", 0),
			},
			respond: fixed(status(500)),
		})
		expectCount(t, r.reqs, 1)
		expectOutcome(t, r, "s29", outFailed, kindBackoffBudget, 500)
	})
}

// S30 — Configuration validation (R48). Invalid values through the CLI;
// explicit zeros through the SDK's effective configuration.
func TestS30ConfigValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ key, field string }{
		{"maxRetries", "MaxRetries"},
		{"maxTotalBackoffDurationMs", "MaxTotalBackoffDuration"},
		{"maxRateLimitDurationMs", "MaxRateLimitDuration"},
	} {
		t.Run(c.key+"=-1", func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				srv := serve(t, nil)
				run := runCLI(t, input{APIHost: srv.URL(), Sequences: one(track("s30")), Config: cfg(c.key, -1)}, runOptions{})
				if run.out.Success || run.exitCode != 1 {
					t.Errorf("success=%v exit=%d, want false/1", run.out.Success, run.exitCode)
				}
				if !strings.Contains(run.out.Error, c.field) {
					t.Errorf("error %q does not name the field %s", run.out.Error, c.field)
				}
				if n := len(srv.Requests()); n != 0 {
					t.Errorf("%d requests made with an invalid configuration", n)
				}
			})
		})
	}
	t.Run("explicit-zeros-kept", func(t *testing.T) {
		t.Parallel()
		c, err := analytics.New("k",
			analytics.WithEndpoint("http://127.0.0.1:1"),
			analytics.WithMaxRetries(0),
			analytics.WithMaxTotalBackoffDuration(0),
			analytics.WithMaxRateLimitDuration(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { auditClient(t, c, nil) }) // after the test has closed it
		defer closeClient(t, c)
		got := c.Config()
		if got.MaxRetries != 0 || got.MaxTotalBackoffDuration != 0 || got.MaxRateLimitDuration != 0 {
			t.Errorf("explicit zeros not kept: %+v", got)
		}
	})
}

// ---------------------------------------------------------------------------
// 6.6 Shutdown, flush, queue and accounting

// closeBound checks INV7 for a run whose final Close started `after` the
// first request arrived with a deadline of closeTimeout: the process must
// be gone by then + closeTimeout + 0.5 s (plus 0.2 s for process exit).
func closeBound(t testing.TB, r *result, after, closeTimeout time.Duration) {
	t.Helper()
	need(t, r.reqs, 1)
	bound := after + closeTimeout + 500*time.Millisecond + 200*time.Millisecond
	if d := r.end.Sub(r.reqs[0].Arrived); d > bound {
		timingf(t, "INV7: the CLI exited %v after the first request, bound %v (Close deadline %v + 0.5 s)",
			d.Round(time.Millisecond), bound, closeTimeout)
	}
}

// S31 — Close during counted backoff hands back (R37, R38, R39).
func TestS31CloseDuringBackoff(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in: input{
				// Close 50 ms after enqueue: after the first 503, inside its 0.45–0.55 s wait.
				Sequences: []sequence{{Events: tracks("s31-1", "s31-2")}, wait(50)},
				Config:    cfg("flushAt", 2, "maxRetries", 10, "closeTimeoutMs", 300),
			},
			respond: fixed(status(503)),
		})
		if len(r.reqs) != 1 { // a late Close lets the 0.45 s retry out
			timingf(t, "server saw %d requests, want 1: %s", len(r.reqs), describe(r.reqs))
		}
		closeBound(t, r, 50*time.Millisecond, 300*time.Millisecond)
		for _, e := range r.out.Events {
			if strings.Contains(e.Error, "context canceled") {
				// The first answer did not reach the client before Close's
				// deadline (a loaded machine): the wait this test is about
				// never began.
				timingf(t, "event %s: the first attempt was still on the wire at Close's deadline: %s", e.MessageID, e.Error)
				return
			}
		}
		expectAll(t, r, outHandedBack)
		if r.out.Failed != 0 {
			t.Errorf("R38: %d events reported as failed; a hand-back is not a delivery failure", r.out.Failed)
		}
		if !strings.Contains(r.out.Error, "delivery incomplete") {
			t.Errorf("error %q, want \"delivery incomplete: …\"", r.out.Error)
		}
		if !strings.Contains(strings.ToLower(r.out.CloseError), "shutdown interrupted") {
			t.Errorf("closeError %q, want ErrShutdownInterrupted", r.out.CloseError)
		}
	})
}

// S32 — Close during a Retry-After wait (R37, R38).
func TestS32CloseDuringRetryAfter(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in: input{
				Sequences: []sequence{{Events: tracks("s32")}, wait(100)},
				Config:    cfg("flushAt", 1, "closeTimeoutMs", 1000),
			},
			respond: fixed(ra(429, "300")),
		})
		expectCount(t, r.reqs, 1)
		closeBound(t, r, 100*time.Millisecond, time.Second)
		expectOutcome(t, r, "s32", outHandedBack, kindShutdown, 429)
		if !strings.Contains(strings.ToLower(r.out.CloseError), "shutdown interrupted") {
			t.Errorf("closeError %q, want ErrShutdownInterrupted", r.out.CloseError)
		}
	})
}

// S33 — Flush waits through a rate-limit wait, no longer (R41).
func TestS33FlushThroughRateLimit(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in:      input{Sequences: one(track("s33")), Config: cfg("flushAt", 1, "flushTimeoutMs", 10000)},
			respond: script(ra(429, "2"), ok200),
		})
		expectCount(t, r.reqs, 2)
		expectGaps(t, r.reqs, 2*time.Second)
		expectOutcome(t, r, "s33", outDelivered, "", 200)
		need(t, r.reqs, 2)
		if len(r.out.Flushes) != 1 {
			t.Fatalf("flushes %+v, want 1", r.out.Flushes)
		}
		f := r.out.Flushes[0]
		ms := time.Duration(f.Ms) * time.Millisecond
		// Flush started before the first request arrived, so it cannot return
		// before the 200 unless it returned early.
		if min := r.reqs[1].Responded.Sub(r.reqs[0].Arrived) - 5*time.Millisecond; f.Error != "" || ms < min {
			t.Errorf("Flush returned after %v (error %q), before the 200 (%v after the first request)", ms, f.Error, min)
		}
		if ms > 2*time.Second+2*eps+100*time.Millisecond {
			timingf(t, "Flush took %v, want ≤ 2 + 2ε s", ms)
		}
	})
}

// S34 — Flush does not hang after a hand-back or a drop (R41).
func TestS34FlushDoesNotHang(t *testing.T) {
	t.Parallel()
	// Part 1 drives the SDK in-process: the CLI cannot call Flush after its
	// final Close.
	t.Run("after-hand-back", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			quiet(t)
			srv := serve(t, fixed(ra(429, "300")))
			rec := &callbacks{}
			c := newClient(t, srv.URL(), rec, analytics.WithFlushAt(1))
			if err := c.Track(analytics.Track{MessageID: "s34-1", UserID: "u", Event: "E"}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := srv.WaitFinished(ctx, 1); err != nil {
				t.Fatal(err)
			}
			cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
			defer ccancel()
			start := time.Now()
			err := c.Close(cctx)
			if d := time.Since(start); d > 1500*time.Millisecond {
				timingf(t, "Close took %v, want ≤ 1.5 s", d)
			}
			if !errors.Is(err, analytics.ErrShutdownInterrupted) {
				t.Errorf("Close: %v, want ErrShutdownInterrupted", err)
			}
			fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer fcancel()
			start = time.Now()
			ferr := c.Flush(fctx)
			if d := time.Since(start); d > 100*time.Millisecond {
				timingf(t, "Flush on the closed client took %v, want at once", d)
			}
			if !errors.Is(ferr, analytics.ErrClosed) {
				t.Errorf("Flush after Close: %v, want ErrClosed", ferr)
			}
			rec.expect(t, map[string]string{"s34-1": outHandedBack})
		})
	})
	t.Run("after-rate-limit-failure", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			r := runScenario(t, scenario{
				in: input{
					Sequences: []sequence{{Events: tracks("s34-2"), Flush: true}, {Events: []event{}, Flush: true}},
					Config:    cfg("flushAt", 1, "maxRetries", 0, "maxRateLimitDurationMs", 3000, "flushTimeoutMs", 5000),
				},
				respond: fixed(ra(429, "1")),
			})
			expectOutcome(t, r, "s34-2", outFailed, kindRateLimitLimit, 429)
			if len(r.out.Flushes) != 2 {
				t.Fatalf("flushes %+v, want 2", r.out.Flushes)
			}
			if f := r.out.Flushes[0]; f.Error != "" || f.Ms < 3000-50 {
				timingf(t, "first Flush %+v: want nil after e1 failed at ≈ 3 s", f)
			}
			if f := r.out.Flushes[1]; f.Error != "" || f.Ms > 100 {
				timingf(t, "second Flush %+v: want nil at once", f)
			}
		})
	})
}

// S35 — Queue full at enqueue (R43).
func TestS35QueueFull(t *testing.T) {
	t.Parallel()
	held := fixed(faultserver.Response{Status: 200, Body: "{}", Delay: 3 * time.Second})
	t.Run("cli", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			r := runScenario(t, scenario{
				in: input{
					// e2–e4 are enqueued 0.5 s later, when the only consumer is
					// busy with e1 (held 3 s) and e1 has left the queue.
					Sequences: []sequence{{Events: tracks("s35-1")}, {DelayMs: 500, Events: tracks("s35-2", "s35-3", "s35-4")}},
					Config:    cfg("flushAt", 1, "consumers", 1, "queueCapacity", 2),
				},
				respond: byID(map[string]responder{"s35-1": held}, nil),
			})
			for _, id := range []string{"s35-1", "s35-2", "s35-3"} {
				expectOutcome(t, r, id, outDelivered, "", 200)
			}
			expectOutcome(t, r, "s35-4", outRejected, kindQueueFull, 0)
			expectSuccess(t, r, false)
		})
	})
	// The 10 ms bound on the rejected enqueue call is measured in-process.
	t.Run("in-process-timing", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			quiet(t)
			srv := serve(t, byID(map[string]responder{"s35-1": held}, nil))
			rec := &callbacks{}
			c := newClient(t, srv.URL(), rec, analytics.WithFlushAt(1), analytics.WithConsumers(1), analytics.WithQueueCapacity(2))
			tr := func(id string) error { return c.Track(analytics.Track{MessageID: id, UserID: "u", Event: "E"}) }
			if err := tr("s35-1"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := srv.WaitRequests(ctx, 1); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"s35-2", "s35-3"} {
				if err := tr(id); err != nil {
					t.Errorf("Track(%s): %v, want nil", id, err)
				}
			}
			start := time.Now()
			err := tr("s35-4")
			d := time.Since(start)
			if !errors.Is(err, analytics.ErrQueueFull) {
				t.Errorf("Track(s35-4): %v, want ErrQueueFull", err)
			}
			if d > 10*time.Millisecond {
				timingf(t, "the rejected Track took %v, want ≤ 10 ms", d)
			}
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer ccancel()
			if err := c.Close(cctx); err != nil {
				t.Errorf("Close: %v", err)
			}
			rec.expect(t, map[string]string{"s35-1": outDelivered, "s35-2": outDelivered, "s35-3": outDelivered})
			if srv.Delivered()["s35-4"] != 0 {
				t.Error("s35-4 reached the server")
			}
		})
	})
}

// S36 — A full client at re-queue time loses nothing (R32, R41, R44, R47).
// QueueCapacity counts the events of the open batch too (R43), so the
// capacity is 2: e1 and e2 form one batch, and while it is on the wire e3
// and e4 fill the queue and e5 is refused.
func TestS36RequeueIntoFullQueue(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		first := true
		r := runScenario(t, scenario{
			in: input{
				Sequences: []sequence{
					{Events: tracks("s36-1", "s36-2")},
					// While request 1 is held: e3 and e4 fill the queue, e5 is refused.
					{DelayMs: 300, Events: tracks("s36-3", "s36-4", "s36-5"), Flush: true},
				},
				Config: cfg("flushAt", 2, "consumers", 1, "queueCapacity", 2, "flushTimeoutMs", 10000),
			},
			respond: func(*faultserver.Request) faultserver.Response {
				if first {
					first = false
					r := ra(429, "2")
					r.Delay = time.Second
					return r
				}
				return ok200
			},
		})
		r12 := r.batchReqs("s36-1")
		r3 := r.batchReqs("s36-3")
		expectCount(t, r12, 2)
		expectCount(t, r3, 1)
		need(t, r12, 2)
		need(t, r3, 1)
		for _, q := range r12 {
			if strings.Join(q.MessageIDs, ",") != "s36-1,s36-2" {
				t.Errorf("R3: request #%d carries %v, want [s36-1 s36-2]", q.Index, q.MessageIDs)
			}
		}
		expectXRC(t, r12, "", "1")
		if d := r12[1].Arrived.Sub(r12[0].Responded); d < 2*time.Second-early {
			timingf(t, "retry %v after the 429, want ≥ 2 s − 0.05 s", d.Round(time.Millisecond))
		}
		if !r12[1].Arrived.Before(r3[0].Arrived) {
			t.Error("R47: e3 was sent before the re-queued batch [e1 e2]")
		}
		for _, id := range []string{"s36-1", "s36-2", "s36-3", "s36-4"} {
			expectOutcome(t, r, id, outDelivered, "", 200)
		}
		expectOutcome(t, r, "s36-5", outRejected, kindQueueFull, 0)
		if len(r.out.Flushes) != 1 || r.out.Flushes[0].Error != "" {
			t.Fatalf("flushes %+v, want one nil Flush", r.out.Flushes)
		}
		// Flush began 0.3 s after the start and returned after e3's 200.
		if ms := time.Duration(r.out.Flushes[0].Ms) * time.Millisecond; ms < r3[0].Responded.Sub(r12[0].Arrived)-300*time.Millisecond-50*time.Millisecond {
			timingf(t, "Flush returned after %v, before e3's 200", ms)
		}
	})
}

// errorBodies are the error body shapes of S37.
var errorBodies = []struct {
	name string
	resp func(st int) faultserver.Response
}{
	{"array", func(st int) faultserver.Response { return faultserver.Reply(st, "[]") }},
	{"string", func(st int) faultserver.Response { return faultserver.Reply(st, `"oops"`) }},
	{"number", func(st int) faultserver.Response { return faultserver.Reply(st, "5") }},
	{"null", func(st int) faultserver.Response { return faultserver.Reply(st, "null") }},
	{"empty-object", func(st int) faultserver.Response { return faultserver.Reply(st, "{}") }},
	{"code-only", func(st int) faultserver.Response { return faultserver.Reply(st, `{"code":1}`) }},
	{"html", func(st int) faultserver.Response {
		return faultserver.Response{Status: st, Body: "<html>x</html>", Header: map[string]string{"Content-Type": "text/html"}}
	}},
	{"empty", func(st int) faultserver.Response { return faultserver.Response{Status: st} }},
	{"truncated", func(st int) faultserver.Response {
		return faultserver.Response{Status: st, Body: `{"c`, TruncateBody: true, ContentLength: 500}
	}},
}

// S37 — Error body shapes never change classification (R16, R18).
func TestS37ErrorBodyShapes(t *testing.T) {
	t.Parallel()
	for _, b := range errorBodies {
		t.Run("400-"+b.name, func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				id := "s37-400-" + b.name
				r := runScenario(t, scenario{
					in:      input{Sequences: one(track(id)), Config: cfg("flushAt", 1)},
					respond: fixed(b.resp(400)),
				})
				expectCount(t, r.reqs, 1)
				expectOutcome(t, r, id, outFailed, kindNonRetryable, 400)
			})
		})
		t.Run("500-"+b.name, func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				id := "s37-500-" + b.name
				r := runScenario(t, scenario{
					in:      input{Sequences: one(track(id)), Config: cfg("flushAt", 1)},
					respond: script(b.resp(500), ok200),
				})
				expectCount(t, r.reqs, 2)
				expectGaps(t, r.reqs, W(1))
				expectOutcome(t, r, id, outDelivered, "", 200)
			})
		})
	}
}

// S38 — Redirects (R10, R11).
func TestS38Redirects(t *testing.T) {
	t.Parallel()
	alt := fixed(ok200)
	for _, c := range []struct {
		name   string
		resp   faultserver.Response
		follow bool
	}{
		{"a-300-no-location", faultserver.RedirectTo(300, ""), false},
		{"b-304", faultserver.Response{Status: 304}, false},
		{"c-302-no-location", faultserver.RedirectTo(302, ""), false},
		{"d-307", faultserver.RedirectTo(307, "/v1/batch-alt"), true},
		{"e-308", faultserver.RedirectTo(308, "/v1/batch-alt"), true},
		{"f-301", faultserver.RedirectTo(301, "/v1/batch-alt"), false},
		{"f-302", faultserver.RedirectTo(302, "/v1/batch-alt"), false},
		{"f-303", faultserver.RedirectTo(303, "/v1/batch-alt"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				id := "s38-" + c.name
				r := runScenario(t, scenario{
					in:      input{Sequences: one(track(id)), Config: cfg("flushAt", 1)},
					respond: byPath("/v1/batch-alt", alt, fixed(c.resp)),
				})
				if !c.follow {
					expectCount(t, r.reqs, 1)
					for _, q := range r.reqs {
						if q.Method != http.MethodPost || q.Path != "/v1/batch" {
							t.Errorf("R11: %s %s reached the server; 301/302/303 must not be followed", q.Method, q.Path)
						}
					}
					expectOutcome(t, r, id, outFailed, kindRedirect, c.resp.StatusCode())
					return
				}
				expectCount(t, r.reqs, 2)
				need(t, r.reqs, 2)
				a, b := r.reqs[0], r.reqs[1]
				if b.Method != http.MethodPost || b.Path != "/v1/batch-alt" {
					t.Errorf("followed request: %s %s, want POST /v1/batch-alt", b.Method, b.Path)
				}
				if string(a.RawBody) != string(b.RawBody) {
					t.Errorf("R11: the redirected POST carries a different body")
				}
				if a.Header.Get("Authorization") != b.Header.Get("Authorization") {
					t.Errorf("R11: Authorization %q on the same-host redirect, want %q", b.Header.Get("Authorization"), a.Header.Get("Authorization"))
				}
				expectOutcome(t, r, id, outDelivered, "", 200)
			})
		})
	}
}

// allowedHeaders are the request headers R5 permits (canonical keys).
var allowedHeaders = map[string]bool{
	"Authorization": true, "Content-Type": true, "User-Agent": true, "X-Retry-Count": true,
	"Content-Encoding": true, "Host": true, "Content-Length": true, "Accept-Encoding": true,
}

// S39 — Header set (R5, R6).
func TestS39HeaderSet(t *testing.T) {
	t.Parallel()
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				id := fmt.Sprintf("s39-gzip-%v", gz)
				r := runScenario(t, scenario{
					in:      input{WriteKey: "abc", Sequences: one(track(id)), Config: cfg("flushAt", 1, "gzip", gz)},
					respond: script(status(500), ok200),
				})
				expectCount(t, r.reqs, 2)
				for _, q := range r.reqs {
					if got := q.Header.Get("Authorization"); got != "Basic YWJjOg==" {
						t.Errorf("request #%d Authorization %q, want Basic YWJjOg==", q.Index, got)
					}
					for k := range q.Header {
						if !allowedHeaders[k] {
							t.Errorf("R5: request #%d carries header %q outside the documented set", q.Index, k)
						}
					}
					if enc := q.Header.Get("Content-Encoding"); (enc == "gzip") != gz {
						t.Errorf("request #%d Content-Encoding %q with gzip=%v", q.Index, enc, gz)
					}
					if len(q.MessageIDs) != 1 || q.MessageIDs[0] != id {
						t.Errorf("request #%d body decodes to ids %v", q.Index, q.MessageIDs)
					}
				}
				expectOutcome(t, r, id, outDelivered, "", 200)
			})
		})
	}
}

// S40 — Caller messageIds and stability (R2, R3).
func TestS40MessageIDStability(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in:      input{Sequences: one(track("m-fixed-1"), track("")), Config: cfg("flushAt", 2)},
			respond: script(status(503), status(503), ok200),
		})
		expectCount(t, r.reqs, 3)
		expectGaps(t, r.reqs, W(1), W(2))
		if len(r.out.Events) != 2 {
			t.Fatalf("output has %d events, want 2", len(r.out.Events))
		}
		gen := r.out.Events[1].MessageID
		for _, q := range r.reqs {
			if len(q.MessageIDs) != 2 || q.MessageIDs[0] != "m-fixed-1" || q.MessageIDs[1] != gen || gen == "" {
				t.Errorf("request #%d carries %v, want [m-fixed-1 %s]", q.Index, q.MessageIDs, gen)
			}
		}
		expectAll(t, r, outDelivered)
	})
}

// S41 — Size limits (R45).
func TestS41SizeLimits(t *testing.T) {
	t.Parallel()
	t.Run("a-event-too-large", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			big := track("s41a")
			big["properties"] = map[string]any{"pad": strings.Repeat("x", 33*1024)}
			r := runScenario(t, scenario{
				in: input{Sequences: one(big), Config: cfg("flushAt", 1)},
			})
			expectCount(t, r.reqs, 0)
			expectOutcome(t, r, "s41a", outRejected, kindTooLarge, 0)
			expectSuccess(t, r, false)
		})
	})
	t.Run("b-600-events-of-2KB", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			evs := tracks(ids("s41b", 600)...)
			for _, e := range evs {
				e["properties"] = map[string]any{"pad": strings.Repeat("y", 2000)}
			}
			r := runScenario(t, scenario{
				in:     input{Sequences: one(evs...), Config: cfg("flushAt", 1000, "flushTimeoutMs", 30000, "closeTimeoutMs", 30000)},
				server: faultserver.Options{Gateway: true}, // 413 above 500 000 bytes
			})
			if len(r.reqs) < 3 {
				t.Errorf("%d requests for 1.2 MB of events; batches must close below 500 KB", len(r.reqs))
			}
			for _, q := range r.reqs {
				if len(q.Body) > 500_000 || q.Rejected != "" {
					t.Errorf("request #%d: body %d bytes, gateway rejection %q", q.Index, len(q.Body), q.Rejected)
				}
			}
			dl := r.srv.Delivered()
			for _, id := range ids("s41b", 600) {
				if dl[id] != 1 {
					t.Errorf("%s delivered %d times on the wire, want 1", id, dl[id])
				}
			}
			expectAll(t, r, outDelivered)
		})
	})
}

// S42 — Mixed retry reasons (R7, R26, R30).
func TestS42MixedRetryReasons(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in:      input{Sequences: one(track("s42")), Config: cfg("flushAt", 1, "maxRetries", 2)},
			respond: script(status(408), ra(429, "1"), status(500), ok200),
		})
		expectCount(t, r.reqs, 4)
		expectXRC(t, r.reqs, "", "1", "2", "3")
		expectGaps(t, r.reqs, W(1), time.Second, W(2))
		expectOutcome(t, r, "s42", outDelivered, "", 200)
	})
}

// randomFaults answers from a seeded RNG: 30 % 500, 10 % 503 with
// Retry-After: 1, 10 % closed connection, otherwise 200 (S43). The draw for
// a request depends only on (seed, the batch's ordinal in order of first
// appearance, its attempt number), so a run's schedule of faults does not
// depend on goroutine scheduling. A batch gets at most maxStreak faults in a
// row: with 40 % counted failures, the longest streak among hundreds of
// batches would otherwise often reach 7–9, whose backoff alone (64–250 s)
// dwarfs the rest of the run.
func randomFaults(seed uint64, maxStreak int) (responder, func() map[string]int) {
	ordinal := map[string]uint64{}
	attempt := map[string]int{}
	streak := map[string]int{}
	var mu sync.Mutex
	count := map[string]int{}
	r := func(req *faultserver.Request) faultserver.Response {
		key := ""
		if len(req.MessageIDs) > 0 {
			key = req.MessageIDs[0]
		}
		if _, ok := ordinal[key]; !ok {
			ordinal[key] = uint64(len(ordinal))
		}
		n := attempt[key]
		attempt[key]++
		rng := rand.New(rand.NewPCG(seed, ordinal[key]<<16|uint64(n)))
		resp, kind := ok200, "200"
		if streak[key] < maxStreak {
			switch p := rng.IntN(100); {
			case p < 30:
				resp, kind = status(500), "500"
			case p < 40:
				resp, kind = ra(503, "1"), "503+Retry-After"
			case p < 50:
				resp, kind = faultserver.Response{CloseWithoutResponse: true}, "closed"
			}
		}
		if kind == "200" {
			streak[key] = 0
		} else {
			streak[key]++
		}
		mu.Lock()
		count[kind]++
		mu.Unlock()
		return resp
	}
	counts := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]int, len(count))
		for k, v := range count {
			out[k] = v
		}
		return out
	}
	return r, counts
}

// S43 — Concurrency soak through the CLI (200 events). The larger
// in-process soak is TestSoak.
func TestS43ConcurrencySoak(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		const seed = 43
		evs := tracks(ids("s43", 200)...)
		faults, counts := randomFaults(seed, 5)
		r := runScenario(t, scenario{
			in: input{
				Sequences: one(evs...),
				Config:    cfg("consumers", 4, "flushAt", 10, "maxRetries", 20, "flushTimeoutMs", 120000, "closeTimeoutMs", 120000),
			},
			respond: faults,
			run:     runOptions{timeout: 180 * time.Second},
		})
		expectAll(t, r, outDelivered)
		dl := r.srv.Delivered()
		for _, id := range ids("s43", 200) {
			if dl[id] < 1 {
				t.Errorf("%s in no request answered 2xx", id)
			}
		}
		dup := 0
		for _, n := range dl {
			if n > 1 {
				dup++
			}
		}
		t.Logf("S43 seed %d: 200 events, %d requests (%v), %d batches delivered, %d ids answered 2xx more than once, %v",
			seed, len(r.reqs), counts(), r.out.SentBatches, dup, r.end.Sub(r.start).Round(time.Millisecond))
	})
}

// S44 — Backoff schedule and jitter (R26). The full schedule (k = 1..6,
// 31.5 s of waits per run) runs with E2E_SLOW=1; by default k = 1..4. The
// root package covers k ≥ 8 with synctest.
func TestS44BackoffScheduleAndJitter(t *testing.T) {
	t.Parallel()
	k := 4
	if os.Getenv("E2E_SLOW") == "1" {
		k = 6
	}
	const reps = 10
	var mu sync.Mutex
	var lastGaps []time.Duration
	t.Run("reps", func(t *testing.T) {
		for i := 0; i < reps; i++ {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				retry(t, func(t testing.TB) {
					id := fmt.Sprintf("s44-%d", i)
					r := runScenario(t, scenario{
						in:      input{Sequences: one(track(id)), Config: cfg("flushAt", 1, "maxRetries", k, "flushTimeoutMs", 120000)},
						respond: fixed(status(500)),
					})
					expectCount(t, r.reqs, k+1)
					want := make([]time.Duration, k)
					for j := range want {
						want[j] = W(j + 1)
					}
					expectGaps(t, r.reqs, want...)
					expectOutcome(t, r, id, outFailed, kindRetries, 500)
					if len(r.reqs) == k+1 {
						mu.Lock()
						lastGaps = append(lastGaps, gap(r.reqs[3], r.reqs[4]))
						mu.Unlock()
					}
				})
			})
		}
	})
	if len(lastGaps) < 2 {
		t.Fatalf("only %d runs gave gap_4", len(lastGaps))
	}
	sort.Slice(lastGaps, func(i, j int) bool { return lastGaps[i] < lastGaps[j] })
	spread := lastGaps[len(lastGaps)-1] - lastGaps[0]
	t.Logf("gap_4 over %d runs: min %v, max %v, spread %v", len(lastGaps), lastGaps[0].Round(time.Millisecond),
		lastGaps[len(lastGaps)-1].Round(time.Millisecond), spread.Round(time.Millisecond))
	if spread < 50*time.Millisecond {
		t.Errorf("R26: gap_4 spread %v over %d runs: no jitter", spread, len(lastGaps))
	}
}

// S45 — Unknown status codes (R15).
func TestS45UnknownStatus(t *testing.T) {
	t.Parallel()
	for _, st := range []int{600, 999} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				id := fmt.Sprintf("s45-%d", st)
				r := runScenario(t, scenario{
					in:      input{Sequences: one(track(id)), Config: cfg("flushAt", 1)},
					respond: fixed(status(st)),
				})
				expectCount(t, r.reqs, 1)
				expectOutcome(t, r, id, outFailed, kindNonRetryable, st)
			})
		})
	}
}

// S45b — 511 with OAuth: the token is dropped and the batch retried
// (counted) with a fresh one (R50). Without OAuth, 511 is non-retryable
// (TestS05NonRetryable5xx/511).
func TestS45bOAuth511(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runOAuthScenario(t, scenario{
			in:      input{Sequences: one(track("s45b-1")), Config: cfg("flushAt", 1, "maxRetries", 3)},
			respond: script(faultserver.Reply(511, `{"message":"network authentication required"}`), ok200),
		}, faultserver.TokenOptions{})
		reqs := r.batchReqs("s45b-1")
		need(t, reqs, 2)
		expectCount(t, reqs, 2)
		if got := []string{reqs[0].Header.Get("Authorization"), reqs[1].Header.Get("Authorization")}; got[0] != "Bearer fs-token-1" || got[1] != "Bearer fs-token-2" {
			t.Errorf("Authorization %q, want Bearer fs-token-1 then Bearer fs-token-2", got)
		}
		expectXRC(t, reqs, "", "1")
		expectGapW(t, "gap_1", gap(reqs[0], reqs[1]), 1)
		expectOutcome(t, r, "s45b-1", outDelivered, "", 200)
		if toks := r.srv.TokenRequests(); len(toks) != 2 || !toks[0].Verified || !toks[1].Verified {
			t.Errorf("want two verified token requests, got %d", len(toks))
		}
	})
}

// S46 — Enqueue after Close; double Close (R39).
func TestS46EnqueueAfterClose(t *testing.T) {
	t.Parallel()
	t.Run("cli", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			in := input{Sequences: []sequence{}, Config: cfg("afterClose", true)}
			r := runScenario(t, scenario{in: in})
			expectCount(t, r.reqs, 0)
			ac := r.out.AfterClose
			if ac == nil {
				t.Fatalf("no afterClose in the output: %s", r.stdout)
			}
			if ac.TrackKind != kindClosed || ac.CloseKind != kindClosed {
				t.Errorf("afterClose %+v: want Track and the second Close to return ErrClosed", *ac)
			}
			if r.out.CloseError != "" {
				t.Errorf("first Close: %q, want nil", r.out.CloseError)
			}
		})
	})
	// Timing of Close on an idle client, in-process.
	t.Run("in-process-timing", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			quiet(t)
			srv := serve(t, nil)
			c := newClient(t, srv.URL(), &callbacks{})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			if err := c.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
			if d := time.Since(start); d > 100*time.Millisecond {
				timingf(t, "Close on an idle client took %v, want ≤ 0.1 s", d)
			}
			if err := c.Track(analytics.Track{UserID: "u", Event: "E"}); !errors.Is(err, analytics.ErrClosed) {
				t.Errorf("Track after Close: %v, want ErrClosed", err)
			}
			start = time.Now()
			if err := c.Close(ctx); !errors.Is(err, analytics.ErrClosed) {
				t.Errorf("second Close: %v, want ErrClosed", err)
			}
			if d := time.Since(start); d > 10*time.Millisecond {
				timingf(t, "second Close took %v, want immediate", d)
			}
			if n := len(srv.Requests()); n != 0 {
				t.Errorf("%d requests made", n)
			}
		})
	})
}

// S47 — Close cancels an in-flight request (R39, R40).
func TestS47CloseCancelsInFlight(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		r := runScenario(t, scenario{
			in: input{
				Sequences: []sequence{{Events: tracks("s47")}, wait(200)},
				Config:    cfg("flushAt", 1, "httpTimeoutMs", 30000, "closeTimeoutMs", 1000),
			},
			respond: fixed(faultserver.Response{Status: 200, Body: "{}", Delay: 10 * time.Second}),
			inv:     invOptions{ambiguousHandBack: true},
		})
		expectCount(t, r.reqs, 1) // recorded by the server; no retry
		closeBound(t, r, 200*time.Millisecond, time.Second)
		expectOutcome(t, r, "s47", outHandedBack, kindShutdown, 0)
	})
}

// S48 — Close drains the queue (R39, R46).
func TestS48CloseDrains(t *testing.T) {
	t.Parallel()
	retry(t, func(t testing.TB) {
		id := ids("s48", 5)
		r := runScenario(t, scenario{
			in: input{
				Sequences: []sequence{{Events: tracks(id...)}},
				Config:    cfg("flushAt", 100, "flushInterval", 60000, "closeTimeoutMs", 5000),
			},
			inv: invOptions{maxWall: 5 * time.Second},
		})
		expectCount(t, r.reqs, 1)
		if len(r.reqs) == 1 && strings.Join(r.reqs[0].MessageIDs, ",") != strings.Join(id, ",") {
			t.Errorf("request carries %v, want all 5 events", r.reqs[0].MessageIDs)
		}
		expectAll(t, r, outDelivered)
		if r.out.CloseError != "" {
			t.Errorf("Close: %q, want nil", r.out.CloseError)
		}
	})
}
