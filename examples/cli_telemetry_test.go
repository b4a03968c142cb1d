package examples_test

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relaykit/analytics-go/analyticstest"
)

// TestCLITelemetry runs the tool twice on one disk buffer: first with the
// endpoint down (the event is kept on disk), then with it up (both runs'
// events are delivered, the first with its original messageId).
func TestCLITelemetry(t *testing.T) {
	t.Parallel()
	bin := build(t, "cli-telemetry")
	dir := t.TempDir()
	runWith := func(endpoint, command string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, command)
		cmd.Env = append(env(), "ANALYTICS_WRITE_KEY=cli-test-key", "ANALYTICS_ENDPOINT="+endpoint, "CLI_TELEMETRY_DIR="+dir)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("cli-telemetry %s: %v\n%s%s", command, err, stdout.String(), stderr.String())
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("run took %v; the tool must not wait for the network", el)
		}
		return stdout.String()
	}

	// a port nothing listens on
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()

	out1 := runWith(down, "build")
	m := regexp.MustCompile(`tracked (\S+)`).FindStringSubmatch(out1)
	if m == nil || !strings.Contains(out1, "delivered 0 event(s)") || !strings.Contains(out1, "kept 1 event(s) on disk for a later run") {
		t.Fatalf("first run (endpoint down):\n%s", out1)
	}
	firstID := m[1]

	srv := analyticstest.NewServer(t)
	out2 := runWith(srv.URL(), "test")
	if !strings.Contains(out2, "sending 1 event(s) left by earlier runs") || !strings.Contains(out2, "delivered 2 event(s)") ||
		strings.Contains(out2, "kept") {
		t.Fatalf("second run (endpoint up):\n%s", out2)
	}
	ids := srv.MessageIDs()
	if len(ids) != 2 || ids[0] != firstID {
		t.Fatalf("server received %v, want %s first", ids, firstID)
	}
	var commands []any
	for _, e := range srv.Events() {
		commands = append(commands, e["properties"].(map[string]any)["command"])
	}
	if len(commands) != 2 || commands[0] != "build" || commands[1] != "test" {
		t.Fatalf("commands %v", commands)
	}
}
