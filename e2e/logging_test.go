package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/e2e/faultserver"
)

// TestR51Logging drives the SDK in-process with an observed zap logger
// through a rate-limit episode, an unparseable Retry-After, a failure and a
// hand-back, and checks the log contract of R51: unparseable Retry-After →
// warning with the raw value; every failure → error log with the event
// count, a hand-back → warning with the count; entering and leaving an episode → debug; the write key
// never appears.
func TestR51Logging(t *testing.T) {
	t.Parallel()
	const writeKey = "wk-r51-SECRET-7f3a"
	srv := serve(t, byID(map[string]responder{
		"r51-1": script(ra(429, "1"), ra(429, "soon"), ok200),
		"r51-2": fixed(faultserver.Reply(400, `{"message":"nope"}`)),
		"r51-3": fixed(ra(429, "300")),
	}, nil))
	core, logs := observer.New(zapcore.DebugLevel)
	rec := &callbacks{}
	c, err := analytics.New(writeKey, append(rec.options(),
		analytics.WithEndpoint(srv.URL()),
		analytics.WithLogger(zap.New(core)),
		analytics.WithFlushAt(1),
		analytics.WithConsumers(1))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auditClient(t, c, rec) }) // after the test has closed it
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"r51-1", "r51-2"} {
		if err := c.Track(analytics.Track{MessageID: id, UserID: "u", Event: "E"}); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Track(analytics.Track{MessageID: "r51-3", UserID: "u", Event: "E"}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.WaitFinished(ctx, 4); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer ccancel()
	if err := c.Close(cctx); !errors.Is(err, analytics.ErrShutdownInterrupted) {
		t.Errorf("Close: %v, want ErrShutdownInterrupted", err)
	}
	rec.expect(t, map[string]string{"r51-1": outDelivered, "r51-2": outFailed, "r51-3": outHandedBack})

	entries := logs.All()
	var dump strings.Builder
	for _, e := range entries {
		text := e.Message + " " + fmt.Sprint(e.ContextMap())
		fmt.Fprintf(&dump, "\n  %s %s", e.Level, text)
		if strings.Contains(text, writeKey) {
			t.Errorf("R51: a log entry contains the write key: %s", text)
		}
	}
	count := func(level zapcore.Level, pred func(text string) bool) int {
		n := 0
		for _, e := range entries {
			if e.Level == level && pred(strings.ToLower(e.Message+" "+fmt.Sprint(e.ContextMap()))) {
				n++
			}
		}
		return n
	}
	if count(zapcore.WarnLevel, func(s string) bool { return strings.Contains(s, "retry-after") && strings.Contains(s, "soon") }) != 1 {
		t.Errorf("R51: want one warning with the raw Retry-After value \"soon\"")
	}
	one := func(s string) bool { return strings.Contains(s, "events:1") || strings.Contains(s, "events: 1") }
	if count(zapcore.ErrorLevel, func(s string) bool { return one(s) && strings.Contains(s, "not delivered") }) != 1 {
		t.Errorf("R51: want an error log with the event count for the failure")
	}
	if count(zapcore.WarnLevel, func(s string) bool { return one(s) && strings.Contains(s, "handed back") }) != 1 {
		t.Errorf("R51: want a warning (a hand-back is not a failure) with the event count for the hand-back")
	}
	episode := count(zapcore.DebugLevel, func(s string) bool { return strings.Contains(s, "episode") })
	if episode < 3 {
		// Two episodes here (r51-1's, ended by its 200; r51-3's, open at
		// Close): at least enter+leave for the first and enter for the second.
		t.Errorf("R51: %d debug entries about rate-limit episodes; want one when an episode starts and one when it ends", episode)
	}
	if t.Failed() {
		t.Logf("log entries:%s", dump.String())
	}
}
