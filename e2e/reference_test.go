package e2e

// Side-by-side wire comparison with the official Node client
// (@segment/analytics-node, pinned in e2e/node/package-lock.json) as a
// reference. Both clients get the same input (the e2e-cli input shape) and
// each its own fresh faultserver with the same script; the test compares
// what reached the wire.
//
// Known differences of @segment/analytics-node 2.3.0, observed on the wire
// and in its source (src/plugins/segmentio/publisher.ts), which this SDK
// deliberately does not copy (docs/delivery.md §4, §5):
//   - No Authorization header: the write key travels only in the body
//     (ours: Basic base64(writeKey:) on every attempt, R6, and in the body).
//   - No X-Retry-Count header (ours: R7).
//   - Retry-After is ignored: a 429 waits for X-RateLimit-Reset or its own
//     backoff (≈ 50–100 ms first, 1 s max), so it re-sends inside the
//     server's window (ours: the shared gate, R25, R32). Only 400 is
//     non-retryable; every other status, 401/403/404/413 and 501/505
//     included, is retried (ours: R12, R13).
//   - fetch follows redirects itself (redirect: "follow"): a 301/302/303 is
//     re-sent as a body-less GET, and a 2xx answer to that GET counts as
//     delivered (ours: 307/308 only, other 3xx fail, R10, R11, D1, D2).
//   - Extra request headers from undici's fetch: Accept, Accept-Language,
//     Accept-Encoding: gzip, deflate, Connection, Sec-Fetch-Mode; User-Agent
//     is the fixed "analytics-node-next/latest" (ours: name/version, R5).
//   - Generated messageIds look like "node-next-<unix ms>-<uuid>" (ours: a
//     UUID v4); events carry an extra "_metadata" object and
//     context.library.name "@segment/analytics-node".
//   - Size limits exist there too (32 KiB per event, 480 KiB per batch),
//     but an oversized event is failed through its callback, not refused at
//     the call (ours: ErrEventTooLarge from Track, R45).
// The test asserts the shared contract and logs these differences.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/relaykit/analytics-go/e2e/faultserver"
)

// nodeOutput is the JSON line of e2e/node/ref-client.mjs.
type nodeOutput struct {
	Success   bool   `json:"success"`
	Error     string `json:"error"`
	Requests  int    `json:"requests"`
	Delivered int    `json:"delivered"`
	Failed    int    `json:"failed"`
	Events    []struct {
		MessageID string `json:"messageId"`
		Outcome   string `json:"outcome"`
		Error     string `json:"error"`
		Callbacks int    `json:"callbacks"`
	} `json:"events"`
}

const nodeSkip = "the Node reference client needs node (v20+) and e2e/node/node_modules; .ci/run installs them; run `cd e2e/node && npm ci`"

// nodeRef returns the node binary and the ref-client script. Without a
// usable Node toolchain it skips, with the reason, on a developer machine,
// and fails under CI=true: CI installs Node and the dependencies, so a
// missing toolchain there is a broken CI, not a reason to compare nothing.
func nodeRef(t *testing.T) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		noNode(t, "node not found on PATH: "+nodeSkip)
	}
	dir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@segment", "analytics-node", "package.json")); err != nil {
		noNode(t, "e2e/node/node_modules is missing: "+nodeSkip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		noNode(t, fmt.Sprintf("node --version failed (%v): %s", err, nodeSkip))
	}
	var major int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(v)), "v%d", &major); err != nil || major < 20 {
		noNode(t, fmt.Sprintf("node %s is older than v20: %s", strings.TrimSpace(string(v)), nodeSkip))
	}
	return node, filepath.Join(dir, "ref-client.mjs")
}

// noNode stops a test that needs the Node reference client: a failure
// under CI=true, a skip elsewhere.
func noNode(t *testing.T, why string) {
	t.Helper()
	if inCI() {
		t.Fatal("CI=true, but the Node comparison cannot run: " + why)
	}
	t.Skip(why)
}

// inCI reports whether the tests run in CI (CI=true, as CI services and
// .ci/run under them set it).
func inCI() bool { return os.Getenv("CI") == "true" }

// runNode runs the reference client with in.
func runNode(t testing.TB, node, script string, in input) (nodeOutput, string) {
	t.Helper()
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "input.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, "--input-file", path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Run()
	if _, err := exitCode(err); err != nil {
		t.Fatalf("node ref-client: %v\n%s", err, stderr.String())
	}
	var out nodeOutput
	line := strings.TrimSpace(stdout.String())
	if err := json.Unmarshal([]byte(line), &out); err != nil {
		t.Fatalf("node ref-client output %q: %v\nstderr:\n%s", line, err, stderr.String())
	}
	return out, stderr.String()
}

// wireEnvelope checks the batch envelope of one request and returns its
// events.
func wireEnvelope(t testing.TB, who string, q faultserver.Request, writeKey string) []map[string]any {
	t.Helper()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(q.Body, &body); err != nil {
		t.Errorf("%s: body is not a JSON object: %v", who, err)
		return nil
	}
	var batch []map[string]any
	if err := json.Unmarshal(body["batch"], &batch); err != nil || len(batch) == 0 {
		t.Errorf("%s: no batch array (%v)", who, err)
	}
	var sentAt string
	if err := json.Unmarshal(body["sentAt"], &sentAt); err != nil {
		t.Errorf("%s: sentAt is not a string: %s", who, body["sentAt"])
	} else if _, err := time.Parse(time.RFC3339Nano, sentAt); err != nil {
		t.Errorf("%s: sentAt %q is not RFC 3339: %v", who, sentAt, err)
	}
	var wk string
	if err := json.Unmarshal(body["writeKey"], &wk); err != nil || wk != writeKey {
		t.Errorf("%s: body writeKey %q, want %q", who, wk, writeKey)
	}
	for _, ev := range batch {
		for _, k := range []string{"type", "messageId", "timestamp", "context"} {
			if _, ok := ev[k]; !ok {
				t.Errorf("%s: event without %q: %v", who, k, ev)
			}
		}
	}
	return batch
}

func headerKeys(h map[string][]string) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func TestReferenceNodeClient(t *testing.T) {
	t.Parallel()
	node, refScript := nodeRef(t)
	needCLI(t)
	const writeKey = "ref-write-key"
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte(writeKey+":"))

	cases := []struct {
		name      string
		respond   func() responder
		delivered bool
		attempts  int
		raGap     bool // the first answer carries Retry-After: 1
		// goAttempts, when set, is our request count where it differs from
		// node's on purpose: a 400 for a batch of three is halved until each
		// event fails alone (R66, docs/delivery.md), so 1 + 2 + 2 requests,
		// where node sends one. Such a run is checked with checkCuts.
		goAttempts int
	}{
		{"happy-path", func() responder { return fixed(ok200) }, true, 1, false, 0},
		{"500-then-200", func() responder { return script(status(500), ok200) }, true, 2, false, 0},
		{"429-retry-after-then-200", func() responder { return script(ra(429, "1"), ok200) }, true, 2, true, 0},
		{"400", func() responder {
			return fixed(faultserver.Reply(400, `{"code":"invalid_payload","message":"rejected"}`))
		}, false, 1, false, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			retry(t, func(t testing.TB) {
				evs := []event{
					track("ref-" + c.name + "-1"),
					{"type": "identify", "userId": "user-1", "traits": map[string]any{"plan": "pro"}, "messageId": "ref-" + c.name + "-2"},
					{"type": "page", "userId": "user-1", "name": "Home"}, // messageId left to each SDK
				}
				in := input{
					WriteKey:  writeKey,
					Sequences: []sequence{{Events: evs}},
					Config:    cfg("flushAt", len(evs), "maxRetries", 3, "flushInterval", 10000, "timeout", 15),
				}
				goSrv, nodeSrv := serve(t, c.respond()), serve(t, c.respond())

				// Both clients run at the same time; the CLI on a goroutine of
				// its own (runCLIPlain reports errors instead of calling t.Fatal).
				goDone := make(chan *plainRun, 1)
				goIn := in
				goIn.APIHost = goSrv.URL()
				go func() { goDone <- runCLIPlain(goIn) }()
				nodeIn := in
				nodeIn.APIHost = nodeSrv.URL()
				nout, nerr := runNode(t, node, refScript, nodeIn)
				grun := <-goDone
				if grun == nil || grun.err != nil {
					t.Fatalf("e2e-cli: %v", grun.errOrNil())
				}
				goReqs, nodeReqs := goSrv.settled(t), nodeSrv.settled(t)
				goRes := &result{cliRun: &grun.cliRun, srv: goSrv, reqs: goReqs}
				goAttempts := c.attempts
				if c.goAttempts != 0 {
					goAttempts = c.goAttempts
					checkCuts(t, goRes) // halves share events with their request
					t.Logf("known difference: a 400 for a batch is halved until each event fails alone (R66): %d requests, node %d", len(goReqs), len(nodeReqs))
				} else {
					checkInvariants(t, goRes, invOptions{})
				}

				// Same number of attempts for the shared cases.
				expectCount(t, goReqs, goAttempts)
				if len(nodeReqs) != c.attempts {
					t.Errorf("node: %d requests, want %d: %s", len(nodeReqs), c.attempts, describe(nodeReqs))
				}

				// Envelope fields and Authorization on every request.
				for _, q := range goReqs {
					wireEnvelope(t, "go", q, writeKey)
					if got := q.Header.Get("Authorization"); got != wantAuth {
						t.Errorf("go: Authorization %q, want %q", got, wantAuth)
					}
				}
				for _, q := range nodeReqs {
					batch := wireEnvelope(t, "node", q, writeKey)
					got := q.Header.Get("Authorization")
					switch {
					case got == "":
						t.Logf("known difference: node sends no Authorization header (write key only in the body)")
					case got != wantAuth:
						t.Errorf("node: Authorization %q differs from ours %q", got, wantAuth)
					}
					if len(batch) > 0 {
						if id, _ := batch[len(batch)-1]["messageId"].(string); id != "" && q.Index == 0 {
							t.Logf("known difference: node's generated messageId %q (ours: UUID v4)", id)
						}
					}
				}
				if len(goReqs) > 0 && len(nodeReqs) > 0 {
					t.Logf("header sets: go [%s]; node [%s]", headerKeys(goReqs[0].Header), headerKeys(nodeReqs[0].Header))
					var gEv, nEv []map[string]any
					_ = json.Unmarshal(mustField(goReqs[0].Body, "batch"), &gEv)
					_ = json.Unmarshal(mustField(nodeReqs[0].Body, "batch"), &nEv)
					if len(gEv) > 0 && len(nEv) > 0 {
						t.Logf("track event keys: go [%s]; node [%s]", mapKeys(gEv[0]), mapKeys(nEv[0]))
					}
				}

				// X-Retry-Count: ours per R7 (checkCuts checks it for halves);
				// node's logged.
				if c.goAttempts == 0 {
					want := make([]string, len(goReqs))
					for i := range want {
						if i > 0 {
							want[i] = fmt.Sprint(i)
						}
					}
					expectXRC(t, goReqs, want...)
				}
				for i, q := range nodeReqs {
					if v, ok := q.Header["X-Retry-Count"]; ok {
						t.Logf("node request %d carries X-Retry-Count %q", i+1, v)
					} else if i > 0 {
						t.Logf("known difference: node retry %d carries no X-Retry-Count", i)
					}
				}

				// Retry-After: ours waits it; node's gap is logged.
				if c.raGap {
					if len(goReqs) == 2 {
						expectGapAbout(t, "go gap after 429 Retry-After: 1", gap(goReqs[0], goReqs[1]), time.Second)
					}
					if len(nodeReqs) == 2 {
						t.Logf("known difference: node re-sent %v after the 429 with Retry-After: 1 (it ignores Retry-After)",
							gap(nodeReqs[0], nodeReqs[1]).Round(time.Millisecond))
					}
				}

				// Each event delivered exactly once (or, for 400, not at all), on both.
				for who, s := range map[string]*server{"go": goSrv, "node": nodeSrv} {
					d := s.Delivered()
					reqs := s.Requests()
					if len(reqs) == 0 {
						continue
					}
					for _, id := range reqs[0].MessageIDs {
						switch {
						case c.delivered && d[id] != 1:
							t.Errorf("%s: %s answered 2xx %d times, want exactly 1", who, id, d[id])
						case !c.delivered && d[id] != 0:
							t.Errorf("%s: %s answered 2xx %d times, want 0", who, id, d[id])
						}
					}
				}
				wantOutcome := outFailed
				if c.delivered {
					wantOutcome = outDelivered
				}
				expectAll(t, goRes, wantOutcome)
				for _, e := range nout.Events {
					if e.Outcome != wantOutcome || e.Callbacks != 1 {
						t.Errorf("node: event %s outcome %q in %d callbacks, want %q once (stderr: %s)", e.MessageID, e.Outcome, e.Callbacks, wantOutcome, nerr)
					}
				}
				t.Logf("go: %s", strings.TrimSpace(grun.stdout))
				t.Logf("node: %+v", nout)
			})
		})
	}

	// Informational: how each client treats a 302 to a URL that answers 200
	// to anything (D1, D2). Only our behaviour is asserted.
	t.Run("302-informational", func(t *testing.T) {
		t.Parallel()
		retry(t, func(t testing.TB) {
			resp := func() responder {
				return byPath("/v1/batch-alt", fixed(ok200), fixed(faultserver.RedirectTo(302, "/v1/batch-alt")))
			}
			in := input{WriteKey: writeKey, Sequences: []sequence{{Events: tracks("ref-302")}}, Config: cfg("flushAt", 1, "maxRetries", 1, "timeout", 10)}
			goSrv, nodeSrv := serve(t, resp()), serve(t, resp())
			goIn, nodeIn := in, in
			goIn.APIHost, nodeIn.APIHost = goSrv.URL(), nodeSrv.URL()
			grun := runCLI(t, goIn, runOptions{})
			nout, _ := runNode(t, node, refScript, nodeIn)
			goReqs, nodeReqs := goSrv.settled(t), nodeSrv.settled(t)
			r := &result{cliRun: grun, srv: goSrv, reqs: goReqs}
			checkInvariants(t, r, invOptions{})
			expectOutcome(t, r, "ref-302", outFailed, kindRedirect, 302)
			var seen []string
			for _, q := range nodeReqs {
				seen = append(seen, q.Method+" "+q.Path)
			}
			outcome := ""
			if len(nout.Events) > 0 {
				outcome = nout.Events[0].Outcome
			}
			t.Logf("known difference: on a 302, node sent %v and reported %q; ours sent 1 POST and reported failed (kind redirect)", seen, outcome)
		})
	})
}

// plainRun is a CLI run made off the test goroutine (no t.Fatal).
type plainRun struct {
	cliRun
	err error
}

func (p *plainRun) errOrNil() error {
	if p == nil {
		return errors.New("no run")
	}
	return p.err
}

// runCLIPlain runs the e2e-cli like runCLI but reports problems as an
// error, so it can run on a goroutine of its own.
func runCLIPlain(in input) *plainRun {
	<-cliReady
	p := &plainRun{}
	if cliBuildErr != nil {
		p.err = cliBuildErr
		return p
	}
	if in.WriteKey == "" {
		in.WriteKey = defaultWriteKey
	}
	p.in = in
	data, err := json.Marshal(in)
	if err != nil {
		p.err = err
		return p
	}
	f, err := os.CreateTemp("", "e2e-input-*.json")
	if err != nil {
		p.err = err
		return p
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		p.err = err
		return p
	}
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliPath, "--input-file", f.Name())
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	p.start = time.Now()
	err = cmd.Run()
	p.end = time.Now()
	p.stdout, p.stderr = stdout.String(), stderr.String()
	if p.exitCode, err = exitCode(err); err != nil {
		p.err = err
		return p
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(p.stdout)), &p.out); err != nil {
		p.err = fmt.Errorf("output %q: %v; stderr: %s", p.stdout, err, tail(p.stderr))
	}
	return p
}

func mustField(body []byte, key string) json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(body, &m)
	return m[key]
}

func mapKeys(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}
