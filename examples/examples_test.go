// Package examples_test builds and runs every example program with a
// bounded timeout and checks its output, so the examples cannot rot.
package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// build compiles the example in dir (relative to this package) into a
// temporary directory.
func build(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./%s: %v\n%s", dir, err, out)
	}
	return bin
}

// env is the environment without the variables that point the examples at
// a real endpoint.
func env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ANALYTICS_ENDPOINT=") || strings.HasPrefix(kv, "ANALYTICS_WRITE_KEY=") || strings.HasPrefix(kv, "ANALYTICS_OAUTH_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// run runs bin with a 30 s bound and returns stdout and stderr.
func run(t *testing.T, bin string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), args, err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	bin := build(t, "graceful-shutdown")

	t.Run("send-then-close", func(t *testing.T) {
		start := time.Now()
		stdout, _ := run(t, bin)
		want := `endpoint: local fault server (the batch with order-11 gets 429 Retry-After: 30)
sent 15 events
closing with a 2s deadline
close: deadline reached; events without a disposition were handed back
delivered: 10 [order-1 order-2 order-3 order-4 order-5 order-6 order-7 order-8 order-9 order-10]
failed: 0 []
handed back: 5 [order-11 order-12 order-13 order-14 order-15]
handed-back events were not lost: store them and send them again on the next start
`
		if stdout != want {
			t.Errorf("output:\n%s\nwant:\n%s", stdout, want)
		}
		// Close must honour its 2 s deadline (+ 0.5 s, R39).
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the program took %v", d)
		}
	})

	t.Run("sigterm", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "-events", "1000", "-interval", "20ms", "-deadline", "1s")
		cmd.Env = env()
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
		var lines []string
		if sc.Scan() { // the endpoint line: sending has started
			lines = append(lines, sc.Text())
		}
		timer := time.NewTimer(400 * time.Millisecond)
		<-timer.C
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		sentAt := time.Now()
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("exit: %v\n%s\nstderr:\n%s", err, strings.Join(lines, "\n"), stderr.String())
		}
		if d := time.Since(sentAt); d > 1500*time.Millisecond+500*time.Millisecond {
			t.Errorf("exited %v after SIGTERM; Close has a 1 s deadline", d)
		}
		out := strings.Join(lines, "\n")
		if !strings.Contains(out, "signal received: stop sending") {
			t.Errorf("no signal line in:\n%s", out)
		}
		num := func(re string) int {
			m := regexp.MustCompile(re).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no %q in:\n%s", re, out)
			}
			n, _ := strconv.Atoi(m[1])
			return n
		}
		sent := num(`(?m)^sent (\d+) events$`)
		delivered := num(`(?m)^delivered: (\d+) `)
		failed := num(`(?m)^failed: (\d+) `)
		handed := num(`(?m)^handed back: (\d+) `)
		if sent == 0 || sent >= 1000 {
			t.Errorf("sent %d events; SIGTERM should stop the loop early", sent)
		}
		if delivered+failed+handed != sent || failed != 0 {
			t.Errorf("delivered %d + failed %d + handed back %d != sent %d (every event needs one disposition)", delivered, failed, handed, sent)
		}
		t.Logf("after SIGTERM: sent %d, delivered %d, handed back %d", sent, delivered, handed)
	})
}

func TestZapLogging(t *testing.T) {
	t.Parallel()
	bin := build(t, "zap-logging")
	stdout, stderr := run(t, bin)
	want := `delivered: order-1 order-2 order-3
failed: bad-1 (HTTP 400, non-retryable)
requests: 5, counted retries: 2, rate-limited responses: 1
`
	if stdout != want {
		t.Errorf("output:\n%s\nwant:\n%s", stdout, want)
	}
	for _, w := range []struct{ level, text string }{
		{"DEBUG", "analytics client started"},
		{"WARN", `"retryAfter": "soon"`},
		{"ERROR", "event bad-1 is malformed"},
	} {
		found := false
		for _, line := range strings.Split(stderr, "\n") {
			if strings.Contains(line, w.level) && strings.Contains(line, w.text) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s log line with %s in:\n%s", w.level, w.text, stderr)
		}
	}
	if strings.Contains(stderr, "example-write-key") {
		t.Errorf("R51: the logs contain the write key:\n%s", stderr)
	}
}

// TestOAuth runs examples/oauth against the fault server's token endpoint:
// the assertion is verified, and the upload carries the token it issued.
func TestOAuth(t *testing.T) {
	t.Parallel()
	bin := build(t, "oauth")
	stdout, stderr := run(t, bin)
	want := `ANALYTICS_WRITE_KEY is not set: using a local fault server with a token endpoint
delivered 3, failed 0, handed back 0
token request 1: grant_type=client_credentials, assertion signature verified: true, kid=example-key, answered 200
upload 1: POST /v1/batch, Authorization: Bearer <token>, 3 event(s), answered 200
`
	if stdout != want {
		t.Errorf("output:\n%s\nwant:\n%s\nstderr:\n%s", stdout, want, stderr)
	}
}
