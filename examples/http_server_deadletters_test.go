package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relaykit/analytics-go/analyticstest"
)

// httpServerRun is one run of examples/http-server: started, sent
// requests, SIGTERMed.
type httpServerRun struct {
	cmd    *exec.Cmd
	sc     *bufio.Scanner
	stderr bytes.Buffer
	base   string
}

func startHTTPServer(t *testing.T, ctx context.Context, bin, endpoint string, args ...string) *httpServerRun {
	t.Helper()
	r := &httpServerRun{}
	r.cmd = exec.CommandContext(ctx, bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	r.cmd.Env = append(env(), "ANALYTICS_WRITE_KEY=server-write-key", "ANALYTICS_ENDPOINT="+endpoint)
	r.cmd.WaitDelay = 2 * time.Second
	r.cmd.Stderr = &r.stderr
	pipe, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.sc = bufio.NewScanner(pipe)
	if !r.sc.Scan() {
		_ = r.cmd.Wait()
		t.Fatalf("no output from http-server; stderr:\n%s", r.stderr.String())
	}
	var ok bool
	if r.base, ok = strings.CutPrefix(r.sc.Text(), "listening on "); !ok {
		t.Fatalf("first line %q, want \"listening on http://…\"", r.sc.Text())
	}
	return r
}

func (r *httpServerRun) get(t *testing.T, path string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, r.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-User-ID", "user"+path)
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// stop SIGTERMs the server and returns its output after the signal.
func (r *httpServerRun) stop(t *testing.T) []string {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for r.sc.Scan() {
		lines = append(lines, r.sc.Text())
	}
	if err := r.cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\nstdout:\n%s\nstderr:\n%s", err, strings.Join(lines, "\n"), r.stderr.String())
	}
	return lines
}

// The production shape with a dead-letter file: a run during an outage
// writes each event it could not deliver to the file once, as the
// tracking API's JSON; the next run, with the endpoint back, sends exactly
// those events again, with their original messageId and timestamp, and
// leaves the file empty.
func TestHTTPServerDeadLetters(t *testing.T) {
	t.Parallel()
	bin := build(t, "http-server")
	srv := analyticstest.NewServer(t)
	srv.FailFor(time.Hour, analyticstest.Fault{Status: http.StatusServiceUnavailable})
	file := filepath.Join(t.TempDir(), "dead-letters.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Run 1: the endpoint answers 503; Close hands the events back at its
	// deadline, and OnError writes them to the file.
	run := startHTTPServer(t, ctx, bin, srv.URL(), "-close-timeout", "1s", "-dead-letters", file)
	for i := range 3 {
		run.get(t, fmt.Sprint("/page-", i))
	}
	out := run.stop(t)
	if !slices.Contains(out, "delivered 0, failed 0, handed back 3") {
		t.Fatalf("run 1 output:\n%s\nstderr:\n%s", strings.Join(out, "\n"), run.stderr.String())
	}
	sent := map[string]string{} // messageId → timestamp, as first sent
	for _, r := range srv.Requests() {
		for _, ev := range r.Events {
			sent[ev["messageId"].(string)] = ev["timestamp"].(string)
		}
	}
	if len(sent) != 3 {
		t.Fatalf("run 1 sent %d distinct events, want 3", len(sent))
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 {
		t.Fatalf("the dead-letter file has %d lines, want 3 (one per undelivered event):\n%s", len(lines), data)
	}
	for _, line := range lines {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if id, _ := ev["messageId"].(string); ev["type"] != "track" || ev["event"] != "Request Handled" || sent[id] == "" {
			t.Errorf("dead letter %s is not one of the events sent", line)
		}
	}

	// Run 2: the endpoint is back. The kept events go out again as they
	// were, and the file is left empty.
	srv.Reset()
	run = startHTTPServer(t, ctx, bin, srv.URL(), "-dead-letters", file)
	out = run.stop(t)
	if !slices.Contains(out, "delivered 3, failed 0, handed back 0") {
		t.Fatalf("run 2 output:\n%s\nstderr:\n%s", strings.Join(out, "\n"), run.stderr.String())
	}
	got := srv.Events()
	if len(got) != 3 {
		t.Fatalf("run 2 delivered %d events, want the 3 kept", len(got))
	}
	for _, ev := range got {
		id, _ := ev["messageId"].(string)
		if ts, ok := sent[id]; !ok || ev["timestamp"] != ts {
			t.Errorf("re-sent event %v: want an original messageId with its timestamp (%v)", ev, sent)
		}
	}
	if data, err := os.ReadFile(file); err != nil || len(data) != 0 {
		t.Errorf("dead-letter file after a run that delivered everything: %q, %v", data, err)
	}
	if _, err := os.Stat(file + ".resend"); !os.IsNotExist(err) {
		t.Errorf("the .resend file was not removed: %v", err)
	}
}
