package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// recorder is a tracking endpoint on 127.0.0.1 that keeps the events of
// every batch it answers 200, and refuses requests without the expected
// Basic authorization.
type recorder struct {
	srv      *httptest.Server
	writeKey string

	mu       sync.Mutex
	events   []map[string]any
	requests int
	problems []string
}

func newRecorder(t *testing.T, writeKey string) *recorder {
	rec := &recorder{writeKey: writeKey}
	rec.srv = httptest.NewServer(http.HandlerFunc(rec.serve))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) serve(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.requests++
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte(rec.writeKey+":"))
	if r.Method != http.MethodPost || r.URL.Path != "/v1/batch" || r.Header.Get("Authorization") != wantAuth {
		rec.problems = append(rec.problems, fmt.Sprintf("%s %s with Authorization %q", r.Method, r.URL.Path, r.Header.Get("Authorization")))
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	var body struct {
		Batch []map[string]any `json:"batch"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		rec.problems = append(rec.problems, "undecodable body: "+err.Error())
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	rec.events = append(rec.events, body.Batch...)
	w.WriteHeader(http.StatusOK)
}

func (rec *recorder) snapshot() (events []map[string]any, requests int, problems []string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.events), rec.requests, slices.Clone(rec.problems)
}

// TestHTTPServer runs examples/http-server as a newcomer would: it starts
// the server against a recording endpoint, sends it requests, SIGTERMs it,
// and checks that every request's event reached the endpoint, and that
// the HTTP server stopped before the analytics client was closed.
func TestHTTPServer(t *testing.T) {
	t.Parallel()
	bin := build(t, "http-server")
	rec := newRecorder(t, "server-write-key")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-addr", "127.0.0.1:0", "-shutdown-timeout", "5s", "-close-timeout", "5s")
	cmd.Env = append(env(), "ANALYTICS_WRITE_KEY=server-write-key", "ANALYTICS_ENDPOINT="+rec.srv.URL)
	cmd.WaitDelay = 2 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(pipe)
	if !sc.Scan() {
		_ = cmd.Wait()
		t.Fatalf("no output from http-server; stderr:\n%s", stderr.String())
	}
	base, ok := strings.CutPrefix(sc.Text(), "listening on ")
	if !ok {
		t.Fatalf("first line %q, want \"listening on http://…\"", sc.Text())
	}

	// Five requests, as users would make them.
	client := &http.Client{Timeout: 5 * time.Second}
	var paths []string
	for i := range 5 {
		path := fmt.Sprintf("/page-%d", i)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-User-ID", fmt.Sprintf("user-%d", i))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), path) {
			t.Fatalf("GET %s: %d %q", path, resp.StatusCode, body)
		}
		paths = append(paths, path)
	}
	client.CloseIdleConnections()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\nstdout:\n%s\nstderr:\n%s", err, strings.Join(lines, "\n"), stderr.String())
	}
	// Both deadlines are 5 s; with an idle server and a healthy endpoint
	// shutdown takes well under a second.
	if d := time.Since(signalled); d > 5*time.Second {
		t.Errorf("exited %v after SIGTERM", d)
	}

	wantLines := []string{
		"http server stopped",
		"analytics client closed: every event has an outcome",
		"delivered 5, failed 0, handed back 0",
	}
	if !slices.Equal(lines, wantLines) {
		t.Errorf("output after SIGTERM:\n%s\nwant:\n%s\nstderr:\n%s", strings.Join(lines, "\n"), strings.Join(wantLines, "\n"), stderr.String())
	}
	if !strings.Contains(stderr.String(), "signal received: shutting down") {
		t.Errorf("stderr lacks the shutdown line:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "server-write-key") {
		t.Errorf("the write key appears in the logs:\n%s", stderr.String())
	}

	events, requests, problems := rec.snapshot()
	if len(problems) > 0 {
		t.Errorf("the endpoint refused requests: %v", problems)
	}
	if len(events) != 5 {
		t.Fatalf("the endpoint received %d events in %d request(s), want 5: %v", len(events), requests, events)
	}
	ids := map[string]bool{}
	var gotPaths []string
	for i, e := range events {
		props, _ := e["properties"].(map[string]any)
		if e["type"] != "track" || e["event"] != "Request Handled" || props["method"] != "GET" {
			t.Errorf("event %d: %v", i, e)
		}
		path, _ := props["path"].(string)
		gotPaths = append(gotPaths, path)
		if want := "user-" + strings.TrimPrefix(path, "/page-"); e["userId"] != want {
			t.Errorf("event for %s has userId %v, want %s", path, e["userId"], want)
		}
		id, _ := e["messageId"].(string)
		if id == "" || ids[id] {
			t.Errorf("event %d: messageId %q missing or repeated", i, id)
		}
		ids[id] = true
	}
	slices.Sort(gotPaths)
	if !slices.Equal(gotPaths, paths) {
		t.Errorf("events for paths %v, want %v", gotPaths, paths)
	}
}
