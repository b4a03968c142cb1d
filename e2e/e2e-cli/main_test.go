package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relaykit/analytics-go"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server is a loopback tracking API that answers from a script (the last
// entry repeats) and records the messageIds of every request.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	script   []reply
	requests [][]string // messageIds per request
	headers  []http.Header
	sentAts  [][]string // per request: the body's sentAt, then each event's
}

type reply struct {
	status int
	body   string
	hold   bool // wait until the client gives up (or the test ends) without answering
}

func newServer(t *testing.T, script ...reply) *server {
	t.Helper()
	s := &server{script: script}
	release := make(chan struct{})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rd io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Errorf("gzip body: %v", err)
				return
			}
			rd = zr
		}
		var body struct {
			Batch []struct {
				MessageID string `json:"messageId"`
				SentAt    string `json:"sentAt"`
			} `json:"batch"`
			SentAt string `json:"sentAt"`
		}
		if err := json.NewDecoder(rd).Decode(&body); err != nil {
			t.Errorf("request body: %v", err)
		}
		ids := make([]string, len(body.Batch))
		sentAts := []string{body.SentAt}
		for i, e := range body.Batch {
			ids[i] = e.MessageID
			sentAts = append(sentAts, e.SentAt)
		}
		s.mu.Lock()
		n := len(s.requests)
		s.requests = append(s.requests, ids)
		s.headers = append(s.headers, r.Header.Clone())
		s.sentAts = append(s.sentAts, sentAts)
		rep := reply{status: http.StatusOK}
		if len(s.script) > 0 {
			rep = s.script[min(n, len(s.script)-1)]
		}
		s.mu.Unlock()
		if rep.hold {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
	}))
	// Cleanups run last-in first-out: release held handlers, then close.
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(release) })
	return s
}

func (s *server) requestIDs() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.requests...)
}

// result is the parsed output line.
type result struct {
	code   int
	line   string
	stderr string
	out    output
	raw    map[string]json.RawMessage
}

func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, strings.NewReader(stdin), &stdout, &stderr)
	res := result{code: code, line: stdout.String(), stderr: stderr.String()}
	if !strings.HasSuffix(res.line, "\n") || strings.Count(res.line, "\n") != 1 {
		t.Fatalf("stdout is not exactly one line: %q (stderr: %s)", res.line, res.stderr)
	}
	if err := json.Unmarshal([]byte(res.line), &res.out); err != nil {
		t.Fatalf("stdout is not the output JSON: %v: %s", err, res.line)
	}
	if err := json.Unmarshal([]byte(res.line), &res.raw); err != nil {
		t.Fatal(err)
	}
	if want := res.out.Success; (code == 0) != want {
		t.Fatalf("exit code %d with success=%v: %s", code, want, res.line)
	}
	return res
}

// input renders an input document; config may be nil.
func input(t *testing.T, host string, config map[string]any, sequences ...map[string]any) string {
	t.Helper()
	doc := map[string]any{"writeKey": "test-key", "apiHost": host, "sequences": sequences}
	if config != nil {
		doc["config"] = config
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func seq(events ...map[string]any) map[string]any {
	if events == nil {
		events = []map[string]any{}
	}
	return map[string]any{"delayMs": 0, "events": events}
}

func track(id string) map[string]any {
	ev := map[string]any{"type": "track", "userId": "u1", "event": "Clicked", "properties": map[string]any{"n": 1}}
	if id != "" {
		ev["messageId"] = id
	}
	return ev
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestHappyPath(t *testing.T) {
	srv := newServer(t)
	in := input(t, srv.URL, map[string]any{"flushAt": 10, "flushInterval": 50},
		seq(track("m-fixed-1"),
			map[string]any{"type": "identify", "anonymousId": "a1", "traits": map[string]any{"plan": "pro"}, "timestamp": "2024-05-01T10:00:00.123Z"},
			map[string]any{"type": "page", "userId": "u1", "name": "Home", "category": "Docs"},
		),
		seq(
			map[string]any{"type": "screen", "userId": "u1", "name": "Main"},
			map[string]any{"type": "group", "userId": "u1", "groupId": "g1"},
			map[string]any{"type": "alias", "userId": "u1", "previousId": "p1"},
		),
	)
	res := runCLI(t, "", "--input", in)
	if res.code != 0 || !res.out.Success {
		t.Fatalf("want success: %s\nstderr: %s", res.line, res.stderr)
	}
	if _, ok := res.raw["error"]; ok {
		t.Errorf("error present on success: %s", res.line)
	}
	for _, key := range []string{"delivered", "failed", "handedBack", "rejected", "events"} {
		if _, ok := res.raw[key]; !ok {
			t.Errorf("field %s missing: %s", key, res.line)
		}
	}
	for _, key := range []string{"closeError", "flushes", "afterClose"} {
		if _, ok := res.raw[key]; ok {
			t.Errorf("field %s present but not requested: %s", key, res.line)
		}
	}
	o := res.out
	if o.Delivered != 6 || o.Failed != 0 || o.HandedBack != 0 || o.Rejected != 0 || len(o.Events) != 6 {
		t.Fatalf("counts: %s", res.line)
	}
	var sent []string
	for _, ids := range srv.requestIDs() {
		sent = append(sent, ids...)
	}
	if o.SentBatches != len(srv.requestIDs()) || o.SentBatches < 1 {
		t.Errorf("sentBatches %d, server saw %d requests", o.SentBatches, len(srv.requestIDs()))
	}
	if len(sent) != 6 {
		t.Fatalf("server saw %d events, want 6", len(sent))
	}
	seen := map[string]bool{}
	for _, id := range sent {
		seen[id] = true
	}
	for i, e := range o.Events {
		if e.Outcome != outcomeDelivered || e.Status != 200 || e.Callbacks != 1 || e.Kind != "" || e.Error != "" {
			t.Errorf("event %d: %+v", i, e)
		}
		if !seen[e.MessageID] {
			t.Errorf("event %d: reported id %q was not sent", i, e.MessageID)
		}
		if i > 0 && !uuidRE.MatchString(e.MessageID) {
			t.Errorf("event %d: generated id %q is not a UUIDv4", i, e.MessageID)
		}
	}
	if o.Events[0].MessageID != "m-fixed-1" {
		t.Errorf("given messageId not kept: %q", o.Events[0].MessageID)
	}
	if res.stderr != "" {
		t.Errorf("stderr not silent without --debug: %s", res.stderr)
	}
}

// Without --debug the SDK is silent; with it, its logs go to stderr and
// stdout still has exactly one line.
func TestDebugLogsToStderr(t *testing.T) {
	srv := newServer(t)
	res := runCLI(t, "", "--debug", "--input="+input(t, srv.URL, nil, seq(track(""))))
	if !res.out.Success {
		t.Fatalf("want success: %s", res.line)
	}
	if !strings.Contains(res.stderr, "DEBUG") {
		t.Errorf("no debug log on stderr: %q", res.stderr)
	}
}

// A delivered event reports the real 2xx status, also with gzip bodies
// (the observing transport reads the compressed body).
func TestDeliveredStatusAndGzip(t *testing.T) {
	srv := newServer(t, reply{status: http.StatusAccepted})
	res := runCLI(t, "", "--input", input(t, srv.URL, map[string]any{"gzip": true}, seq(track(""), track(""))))
	if !res.out.Success || res.out.Delivered != 2 {
		t.Fatalf("want success: %s", res.line)
	}
	for _, e := range res.out.Events {
		if e.Status != http.StatusAccepted {
			t.Errorf("status %d, want 202: %+v", e.Status, e)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if got := srv.headers[0].Get("Content-Encoding"); got != "gzip" {
		t.Errorf("Content-Encoding %q, want gzip", got)
	}
}

// config.eventSentAt puts the body's sentAt on every event (R59); absent
// or false, no event has one.
func TestEventSentAt(t *testing.T) {
	for _, cfg := range []map[string]any{{"eventSentAt": true}, {"eventSentAt": false}, nil} {
		srv := newServer(t)
		res := runCLI(t, "", "--input", input(t, srv.URL, cfg, seq(track(""), track(""))))
		if !res.out.Success || res.out.Delivered != 2 {
			t.Fatalf("%v: want success: %s", cfg, res.line)
		}
		srv.mu.Lock()
		got := srv.sentAts
		srv.mu.Unlock()
		if len(got) != 1 || len(got[0]) != 3 || got[0][0] == "" {
			t.Fatalf("%v: sentAts %q, want one request with a sentAt and 2 events", cfg, got)
		}
		want := ""
		if cfg["eventSentAt"] == true {
			want = got[0][0]
		}
		for _, s := range got[0][1:] {
			if s != want {
				t.Errorf("%v: event sentAt %q, want %q", cfg, s, want)
			}
		}
	}
}

// config.maxRetries is passed through when present, including 0 (R27, R48);
// absent means the SDK default.
func TestMaxRetriesZeroVsAbsent(t *testing.T) {
	script := []reply{{status: 500, body: `{"message":"boom"}`}, {status: 200}}

	t.Run("zero", func(t *testing.T) {
		srv := newServer(t, script...)
		res := runCLI(t, "", "--input", input(t, srv.URL, map[string]any{"maxRetries": 0}, seq(track("m1"))))
		if res.out.Success || res.code != 1 {
			t.Fatalf("want failure: %s", res.line)
		}
		if n := len(srv.requestIDs()); n != 1 {
			t.Errorf("%d requests, want exactly 1 with maxRetries 0", n)
		}
		e := res.out.Events[0]
		if e.Outcome != outcomeFailed || e.Kind != "retries-exhausted" || e.Status != 500 || !strings.Contains(e.Error, "boom") {
			t.Errorf("event: %+v", e)
		}
		if res.out.Error != e.Error || res.out.Failed != 1 {
			t.Errorf("error/failed: %s", res.line)
		}
	})
	t.Run("absent", func(t *testing.T) {
		srv := newServer(t, script...)
		res := runCLI(t, "", "--input", input(t, srv.URL, nil, seq(track("m1"))))
		if !res.out.Success {
			t.Fatalf("want success after one counted retry: %s", res.line)
		}
		if n := len(srv.requestIDs()); n != 2 {
			t.Errorf("%d requests, want 2", n)
		}
		if res.out.SentBatches != 1 {
			t.Errorf("sentBatches %d, want 1", res.out.SentBatches)
		}
	})
}

// An invalid configuration prints exactly {"success","sentBatches","error"},
// names the field, exits 1 and makes no request.
func TestInvalidConfig(t *testing.T) {
	cases := []struct {
		name   string
		config map[string]any
		field  string
	}{
		{"negative maxRetries", map[string]any{"maxRetries": -1}, "maxRetries"},
		{"fractional maxRetries", map[string]any{"maxRetries": 1.5}, "maxRetries"},
		{"string maxRetries", map[string]any{"maxRetries": "3"}, "maxRetries"},
		{"zero flushAt", map[string]any{"flushAt": 0}, "flushAt"},
		{"zero flushInterval", map[string]any{"flushInterval": 0}, "flushInterval"},
		{"negative backoff budget", map[string]any{"maxTotalBackoffDurationMs": -1}, "maxTotalBackoffDurationMs"},
		{"negative rate-limit budget", map[string]any{"maxRateLimitDurationMs": -5}, "maxRateLimitDurationMs"},
		{"zero consumers", map[string]any{"consumers": 0}, "consumers"},
		{"negative timeout", map[string]any{"timeout": -1}, "timeout"},
		{"gzip not bool", map[string]any{"gzip": "yes"}, "gzip"},
		{"eventSentAt not bool", map[string]any{"eventSentAt": 1}, "eventSentAt"},
		{"huge closeTimeoutMs", map[string]any{"closeTimeoutMs": 1e30}, "closeTimeoutMs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t)
			res := runCLI(t, "", "--input", input(t, srv.URL, tc.config, seq(track(""))))
			assertFailureShape(t, res, tc.field)
			if n := len(srv.requestIDs()); n != 0 {
				t.Errorf("%d requests for an invalid config", n)
			}
		})
	}
	t.Run("exact line", func(t *testing.T) {
		srv := newServer(t)
		res := runCLI(t, "", "--input", input(t, srv.URL, map[string]any{"maxRetries": -1}, seq(track(""))))
		want := `{"success":false,"sentBatches":0,"error":"config.maxRetries: analytics: invalid MaxRetries (-1): must not be negative"}` + "\n"
		if res.line != want {
			t.Errorf("got  %s\nwant %s", res.line, want)
		}
	})
	t.Run("missing writeKey", func(t *testing.T) {
		srv := newServer(t)
		res := runCLI(t, "", "--input", fmt.Sprintf(`{"apiHost":%q,"sequences":[]}`, srv.URL))
		assertFailureShape(t, res, "writeKey")
	})
	t.Run("bad apiHost", func(t *testing.T) {
		res := runCLI(t, "", "--input", `{"writeKey":"k","apiHost":"127.0.0.1:1","sequences":[]}`)
		assertFailureShape(t, res, "apiHost")
	})
}

func assertFailureShape(t *testing.T, res result, field string) {
	t.Helper()
	if res.code != 1 || res.out.Success || res.out.SentBatches != 0 {
		t.Errorf("want failure with exit 1: code %d, %s", res.code, res.line)
	}
	if len(res.raw) != 3 {
		t.Errorf("want exactly success, sentBatches, error: %s", res.line)
	}
	if !strings.Contains(res.out.Error, field) {
		t.Errorf("error %q does not name %s", res.out.Error, field)
	}
	if !strings.Contains(res.stderr, res.out.Error) {
		t.Errorf("stderr lacks the error: %q", res.stderr)
	}
}

// Run errors — missing input, bad JSON, unknown event type, bad flags —
// produce failure output and make no request.
func TestRunErrors(t *testing.T) {
	srv := newServer(t)
	dir := t.TempDir()
	cases := []struct {
		name  string
		args  []string
		inErr string
	}{
		{"missing input", nil, "missing --input"},
		{"empty input", []string{"--input", ""}, "empty"},
		{"invalid JSON", []string{"--input", `{"writeKey":`}, "invalid input JSON"},
		{"not an object", []string{"--input", `[1,2]`}, "invalid input JSON"},
		{"unknown type", []string{"--input", input(t, srv.URL, nil, seq(map[string]any{"type": "purchase", "userId": "u"}))}, `unknown event type "purchase"`},
		{"missing sequences", []string{"--input", `{"writeKey":"k","apiHost":"` + srv.URL + `"}`}, "sequences"},
		{"bad timestamp", []string{"--input", input(t, srv.URL, nil, seq(map[string]any{"type": "track", "userId": "u", "event": "e", "timestamp": "yesterday"}))}, "sequences[0].events[0]: timestamp"},
		{"both inputs", []string{"--input", "{}", "--input-file", "x"}, "not both"},
		{"positional", []string{"--input", "{}", "extra"}, "unexpected argument"},
		{"unknown flag", []string{"--nope"}, "nope"},
		{"missing file", []string{"--input-file", filepath.Join(dir, "absent.json")}, "--input-file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, "", tc.args...)
			assertFailureShape(t, res, tc.inErr)
		})
	}
	if n := len(srv.requestIDs()); n != 0 {
		t.Errorf("%d requests for run errors", n)
	}
}

func TestInputFile(t *testing.T) {
	srv := newServer(t)
	in := input(t, srv.URL, nil, seq(track("from-input-file")))

	t.Run("stdin", func(t *testing.T) {
		res := runCLI(t, in, "--input-file", "-")
		if !res.out.Success || res.out.Events[0].MessageID != "from-input-file" {
			t.Fatalf("want success: %s", res.line)
		}
	})
	t.Run("path", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "in.json")
		if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
			t.Fatal(err)
		}
		res := runCLI(t, "", "--input-file="+path)
		if !res.out.Success || res.out.Delivered != 1 {
			t.Fatalf("want success: %s", res.line)
		}
	})
}

// A 400 fails each event without a retry, with the server's text (R12, R18, R66).
func TestNonRetryable400(t *testing.T) {
	srv := newServer(t, reply{status: 400, body: `{"code":"bad","message":"nope"}`})
	res := runCLI(t, "", "--input", input(t, srv.URL, nil, seq(track("m1"), track(""))))
	if res.code != 1 || res.out.Success || res.out.Failed != 2 || res.out.Delivered != 0 {
		t.Fatalf("want 2 failed: %s", res.line)
	}
	for _, e := range res.out.Events {
		if e.Outcome != outcomeFailed || e.Kind != "non-retryable" || e.Status != 400 || e.Callbacks != 1 {
			t.Errorf("event: %+v", e)
		}
		if !strings.Contains(e.Error, "nope") {
			t.Errorf("error lacks the server's text: %q", e.Error)
		}
	}
	if !strings.Contains(res.out.Error, "400") || !strings.Contains(res.out.Error, "nope") {
		t.Errorf("error %q", res.out.Error)
	}
	// One request for the batch of two, then one for each half (R66): every
	// event fails with its own 400, none is retried.
	if n := len(srv.requestIDs()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

// A 3xx that reaches the SDK is a failure of kind redirect (R10, R11).
func TestRedirect(t *testing.T) {
	srv := newServer(t, reply{status: http.StatusFound})
	res := runCLI(t, "", "--input", input(t, srv.URL, nil, seq(track("m1"))))
	e := res.out.Events[0]
	if res.out.Success || e.Outcome != outcomeFailed || e.Kind != "redirect" || e.Status != http.StatusFound {
		t.Fatalf("want a redirect failure: %s", res.line)
	}
}

// Without any response the event fails by its budget and has no status.
func TestTransportFailure(t *testing.T) {
	srv := newServer(t)
	url := srv.URL
	srv.Close() // connection refused from now on
	res := runCLI(t, "", "--input", input(t, url, map[string]any{"maxRetries": 0}, seq(track("m1"))))
	e := res.out.Events[0]
	if res.out.Success || e.Outcome != outcomeFailed || e.Kind != "retries-exhausted" || e.Status != 0 || !strings.Contains(e.Error, "transport error") {
		t.Fatalf("want a transport failure without status: %s", res.line)
	}
	if strings.Contains(res.line, `"status"`) {
		t.Errorf("status present without a response: %s", res.line)
	}
}

// An event rejected at enqueue is reported with its input id (or ""), makes
// the run fail, and gets no callback.
func TestRejectedEvents(t *testing.T) {
	srv := newServer(t)
	res := runCLI(t, "", "--input", input(t, srv.URL, nil, seq(
		track("ok-1"),
		map[string]any{"type": "track", "userId": "u1"}, // no event name
		map[string]any{"type": "group", "userId": "u1", "messageId": "g-no-group"},
	)))
	o := res.out
	if o.Success || o.Rejected != 2 || o.Delivered != 1 {
		t.Fatalf("counts: %s", res.line)
	}
	want := []eventOutput{
		{MessageID: "ok-1", Outcome: outcomeDelivered, Status: 200, Callbacks: 1},
		{MessageID: "", Outcome: outcomeRejected, Kind: "invalid", Error: o.Events[1].Error},
		{MessageID: "g-no-group", Outcome: outcomeRejected, Kind: "invalid", Error: o.Events[2].Error},
	}
	for i := range want {
		if o.Events[i] != want[i] {
			t.Errorf("event %d: got %+v want %+v", i, o.Events[i], want[i])
		}
	}
	if o.Error == "" || o.Error != o.Events[1].Error {
		t.Errorf("error should be the first enqueue error: %s", res.line)
	}
}

// Repeated messageIds in the input are each attributed one callback.
func TestDuplicateMessageIDs(t *testing.T) {
	srv := newServer(t)
	res := runCLI(t, "", "--input", input(t, srv.URL, map[string]any{"flushAt": 1}, seq(track("dup"), track("dup"))))
	if !res.out.Success || res.out.Delivered != 2 {
		t.Fatalf("want success: %s", res.line)
	}
	for _, e := range res.out.Events {
		if e.Callbacks != 1 {
			t.Errorf("event %+v", e)
		}
	}
}

// S46 through the CLI: Track and a second Close after Close both return ErrClosed.
func TestAfterClose(t *testing.T) {
	srv := newServer(t)
	res := runCLI(t, "", "--input", input(t, srv.URL, map[string]any{"afterClose": true}, seq(track(""))))
	if !res.out.Success {
		t.Fatalf("afterClose errors must not fail the run: %s", res.line)
	}
	a := res.out.AfterClose
	if a == nil {
		t.Fatalf("afterClose missing: %s", res.line)
	}
	if a.TrackKind != "closed" || a.CloseKind != "closed" || a.TrackError != analytics.ErrClosed.Error() || a.CloseError != analytics.ErrClosed.Error() {
		t.Errorf("afterClose: %+v", *a)
	}
	if _, ok := res.raw["closeError"]; ok {
		t.Errorf("closeError present after a clean Close: %s", res.line)
	}
	if n := len(srv.requestIDs()); n != 1 {
		t.Errorf("%d requests, want 1 (the event after Close is never sent)", n)
	}
}

// sequences[].flush calls Flush after the sequence; its result is reported
// and the batch goes out before the next sequence.
func TestFlushInSequence(t *testing.T) {
	srv := newServer(t)
	first, second := seq(track("s0-a"), track("s0-b")), seq(track("s1-a"))
	first["flush"] = true
	res := runCLI(t, "", "--input", input(t, srv.URL, map[string]any{"flushAt": 100, "flushInterval": 60000}, first, second))
	o := res.out
	if !o.Success || o.Delivered != 3 {
		t.Fatalf("want success: %s", res.line)
	}
	if len(o.Flushes) != 1 || o.Flushes[0].Sequence != 0 || o.Flushes[0].Error != "" || o.Flushes[0].MS < 0 {
		t.Fatalf("flushes: %+v", o.Flushes)
	}
	reqs := srv.requestIDs()
	if o.SentBatches != 2 || len(reqs) != 2 {
		t.Fatalf("sentBatches %d, requests %v", o.SentBatches, reqs)
	}
	if strings.Join(reqs[0], ",") != "s0-a,s0-b" || strings.Join(reqs[1], ",") != "s1-a" {
		t.Errorf("batches %v", reqs)
	}
}

// A Flush that hits config.flushTimeoutMs reports its error; delivery goes on.
func TestFlushTimeout(t *testing.T) {
	srv := newServer(t, reply{status: 503}, reply{status: 200})
	s := seq(track("m1"))
	s["flush"] = true
	res := runCLI(t, "", "--input", input(t, srv.URL, map[string]any{"flushTimeoutMs": 50}, s))
	if !res.out.Success {
		t.Fatalf("want success after the retry: %s", res.line)
	}
	if len(res.out.Flushes) != 1 || !strings.Contains(res.out.Flushes[0].Error, "deadline") {
		t.Errorf("flushes: %+v", res.out.Flushes)
	}
}

// Close's deadline (closeTimeoutMs) interrupts an in-flight request: the
// event is handed back, which is not a failure but not a success (R38–R40).
func TestCloseDeadlineHandsBack(t *testing.T) {
	srv := newServer(t, reply{hold: true})
	start := time.Now()
	res := runCLI(t, "", "--input", input(t, srv.URL, map[string]any{"closeTimeoutMs": 200, "timeout": 30}, seq(track("held"))))
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("run took %v with closeTimeoutMs 200", el)
	}
	o := res.out
	if o.Success || res.code != 1 {
		t.Fatalf("want failure: %s", res.line)
	}
	if o.Error != "delivery incomplete: 1 events handed back at shutdown" {
		t.Errorf("error %q", o.Error)
	}
	if o.HandedBack != 1 || o.Failed != 0 || o.Delivered != 0 {
		t.Errorf("counts: %s", res.line)
	}
	e := o.Events[0]
	if e.MessageID != "held" || e.Outcome != outcomeHandedBack || e.Kind != "shutdown-interrupted" || e.Callbacks != 1 || e.Status != 0 {
		t.Errorf("event: %+v", e)
	}
	if !strings.Contains(o.CloseError, "shutdown interrupted") {
		t.Errorf("closeError %q", o.CloseError)
	}
	if n := len(srv.requestIDs()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestKind(t *testing.T) {
	httpErr := func(status int, k analytics.ErrorKind) error {
		return &analytics.HTTPError{StatusCode: status, Kind: k, Message: "x"}
	}
	transport := &analytics.TransportError{Err: errors.New("connection refused"), Retryable: true}
	cases := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{analytics.ErrQueueFull, "queue-full"},
		{analytics.ErrClosed, "closed"},
		{fmt.Errorf("%w: 40000 bytes", analytics.ErrEventTooLarge), "too-large"},
		{&analytics.MessageError{Type: "track", Field: "Event", Reason: "is required"}, "invalid"},
		{&analytics.DeliveryError{Reason: analytics.ErrShutdownInterrupted, Last: httpErr(503, analytics.KindRetryable)}, "shutdown-interrupted"},
		{&analytics.DeliveryError{Reason: analytics.ErrRetriesExhausted, Last: httpErr(500, analytics.KindRetryable)}, "retries-exhausted"},
		{&analytics.DeliveryError{Reason: analytics.ErrRetriesExhausted, Last: transport}, "retries-exhausted"},
		{&analytics.DeliveryError{Reason: analytics.ErrBackoffDurationExceeded, Last: httpErr(500, analytics.KindRetryable)}, "backoff-duration-exceeded"},
		{&analytics.DeliveryError{Reason: analytics.ErrRateLimitDurationExceeded, Last: httpErr(429, analytics.KindRetryable)}, "rate-limit-duration-exceeded"},
		{httpErr(302, analytics.KindRedirect), "redirect"},
		{httpErr(400, analytics.KindNonRetryable), "non-retryable"},
		{httpErr(600, analytics.KindNonRetryable), "non-retryable"},
		{&analytics.TransportError{Err: errors.New("x509: unknown authority")}, "transport"},
		{context.DeadlineExceeded, "transport"},
	}
	for _, tc := range cases {
		if got := kind(tc.err); got != tc.want {
			t.Errorf("kind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestParseTimestamp(t *testing.T) {
	want := time.Date(2024, 5, 1, 10, 0, 0, 123e6, time.UTC)
	for _, s := range []string{"2024-05-01T10:00:00.123Z", "2024-05-01T12:00:00.123+02:00", "2024-05-01T12:00:00.123+0200", "2024-05-01T10:00:00.123"} {
		got, err := parseTimestamp(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseTimestamp(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := parseTimestamp("01/05/2024"); err == nil {
		t.Error("accepted a non-ISO date")
	}
}

func TestSDKMessageIDsAreUUIDs(t *testing.T) {
	a, b := analytics.NewMessageID(), analytics.NewMessageID()
	if !uuidRE.MatchString(a) || a == b {
		t.Errorf("NewMessageID: %q, %q", a, b)
	}
}

// config.diskBufferDir: a run whose server never answers hands its events
// back at Close and keeps them on disk; a later run with "sequences": []
// delivers them, same messageIds, and reports them under "replayed".
func TestDiskBufferDir(t *testing.T) {
	dir := t.TempDir()
	down := newServer(t, reply{hold: true})
	res := runCLI(t, "", "--input", input(t, down.URL, map[string]any{"diskBufferDir": dir, "closeTimeoutMs": 200},
		seq(track("d1"), track("d2"), track("d3"))))
	if res.out.Success || res.out.HandedBack != 3 || !strings.Contains(res.out.CloseError, "kept in the disk buffer") {
		t.Fatalf("first run: %s", res.line)
	}
	for _, e := range res.out.Events { // kept on disk: handed back without a callback
		if e.Outcome != outcomeHandedBack || e.Callbacks != 0 {
			t.Errorf("first run, event %+v: want handed back, no callback", e)
		}
	}

	up := newServer(t)
	noSequences := func(cfg map[string]any) string {
		return strings.Replace(input(t, up.URL, cfg), `"sequences":null`, `"sequences":[]`, 1)
	}
	res = runCLI(t, "", "--input", noSequences(map[string]any{"diskBufferDir": dir}))
	if !res.out.Success || res.out.Replayed == nil || *res.out.Replayed != (replayedOutput{Delivered: 3}) || len(res.out.Events) != 0 {
		t.Fatalf("second run: %s", res.line)
	}
	var got []string
	for _, ids := range up.requestIDs() {
		got = append(got, ids...)
	}
	if strings.Join(got, ",") != "d1,d2,d3" {
		t.Fatalf("server got %v", got)
	}

	// nothing is left: a third run sends nothing
	res = runCLI(t, "", "--input", noSequences(map[string]any{"diskBufferDir": dir}))
	if !res.out.Success || *res.out.Replayed != (replayedOutput{}) || len(up.requestIDs()) != 1 {
		t.Fatalf("third run: %s (%d requests)", res.line, len(up.requestIDs()))
	}

	res = runCLI(t, "", "--input", noSequences(map[string]any{"diskBufferDir": 7}))
	if res.out.Success || !strings.Contains(res.out.Error, "config.diskBufferDir") {
		t.Fatalf("diskBufferDir 7: %s", res.line)
	}
}
