package analytics

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// phases answers by the time since start: each phase until its end (the
// last one for ever).
type phase struct {
	until time.Duration
	reply reply
}

func phased(start time.Time, phases ...phase) func(int, seen) reply {
	return func(_ int, r seen) reply {
		for _, p := range phases {
			if r.at.Sub(start) < p.until {
				return p.reply
			}
		}
		return phases[len(phases)-1].reply
	}
}

var refused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

// logLine is a record reduced to what the tests look at.
type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

func (l logLine) String() string { return fmt.Sprintf("%v %q %v", l.level, l.msg, l.attrs) }

// linesSince are the records h kept after the first skip ones.
func linesSince(h *recordingHandler, skip int) []logLine {
	var out []logLine
	for _, r := range h.all()[skip:] {
		out = append(out, logLine{r.Level, r.Message, attrMap(r)})
	}
	return out
}

// durationAttr reads a duration attribute, whichever form the slog bridge
// gives it (a time.Duration, nanoseconds, or text).
func durationAttr(v any) time.Duration {
	switch d := v.(type) {
	case time.Duration:
		return d
	case int64:
		return time.Duration(d)
	case string:
		p, _ := time.ParseDuration(d)
		return p
	}
	return -1
}

// produce tracks one event every gap until d has passed; it returns the
// messageIds.
func produce(t *testing.T, c *Client, prefix string, gap, d time.Duration) []string {
	t.Helper()
	var ids []string
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(gap) {
		id := fmt.Sprintf("%s%04d", prefix, len(ids))
		mustTrack(t, c, id)
		ids = append(ids, id)
	}
	return ids
}

// R51: an outage of 40 s — 20 s of 500s, then 20 s of refused connections
// — between healthy periods, with one event every 100 ms, logs three lines
// at any level, DEBUG included: a warning when the server starts failing
// (naming the 500), one aggregated warning 30 s later (naming the refused
// connection, with the failed requests since the first), and one
// information line when it answers again, saying how long it failed. Every
// event is delivered in the end.
func TestOutageLogsThreeLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newRecordingHandler(slog.LevelDebug)
		start := time.Now()
		api := newFakeAPI(phased(start,
			phase{5 * time.Second, reply{status: 200}},
			phase{25 * time.Second, reply{status: 500, body: `{"message":"boom"}`}},
			phase{45 * time.Second, reply{err: refused}},
			phase{0, reply{status: 200}},
		))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithSlog(slog.New(h)), WithFlushAt(10))
		skip := len(h.all()) // the start-up line
		ids := produce(t, c, "m", 100*time.Millisecond, 60*time.Second)
		if err := closeClient(t, c, 10*time.Second); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if got := len(cb.delivered()); got != len(ids) {
			t.Errorf("%d of %d events delivered", got, len(ids))
		}
		lines := linesSince(h, skip)
		for _, l := range lines {
			t.Log(l)
		}
		if len(lines) != 3 {
			t.Fatalf("%d log lines, want 3 (failing, still failing, answering again)", len(lines))
		}
		first, second, last := lines[0], lines[1], lines[2]
		if first.level != slog.LevelWarn || !strings.Contains(first.msg, "server is failing") ||
			!strings.Contains(fmt.Sprint(first.attrs["error"]), "500") {
			t.Errorf("first line %v: want a warning that the server is failing, with its 500", first)
		}
		if second.level != slog.LevelWarn || !strings.Contains(second.msg, "still failing") ||
			!strings.Contains(fmt.Sprint(second.attrs["error"]), "connection refused") {
			t.Errorf("second line %v: want a warning that it still fails, with the refused connection", second)
		}
		if n, _ := second.attrs["failedRequests"].(int64); n < 2 {
			t.Errorf("second line counts %d failed requests since the first", n)
		}
		if last.level != slog.LevelInfo || !strings.Contains(last.msg, "answering again") {
			t.Errorf("last line %v: want the information that the server answers again", last)
		}
		if d := durationAttr(last.attrs["failedFor"]); d < 39*time.Second || d > 42*time.Second {
			t.Errorf("the server failed for %v, want about 40 s", d)
		}
	})
}

// R51: a server that fails one request in five is healthy: nothing is
// logged at WARN or above, and no line about the server at all.
func TestOutageLogsNothingWhenHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newRecordingHandler(slog.LevelDebug)
		api := newFakeAPI(func(n int, _ seen) reply {
			if n%5 == 4 {
				return reply{status: 500}
			}
			return reply{status: 200}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithSlog(slog.New(h)), WithFlushAt(10))
		skip := len(h.all())
		ids := produce(t, c, "h", 20*time.Millisecond, 60*time.Second)
		if err := closeClient(t, c, 10*time.Second); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if got := len(cb.delivered()); got != len(ids) {
			t.Errorf("%d of %d events delivered", got, len(ids))
		}
		if lines := linesSince(h, skip); len(lines) != 0 {
			t.Errorf("a healthy run logged %d line(s), the first %v", len(lines), lines[0])
		}
		if n := len(api.requests()); n < 300 {
			t.Errorf("only %d requests: the test did not exercise the server", n)
		}
	})
}

// R51, R66: a 400 on a batch of ten events is halved until the events at
// fault are alone, many requests; the logs say it in at most two lines,
// whatever the number of requests: the halving (DEBUG) and one ERROR with
// what the pieces came to.
func TestIsolationLogsOneLine(t *testing.T) {
	for _, tc := range []struct {
		name           string
		bad            func(id string) bool
		failed, good   int64
		atLeastRequest int
	}{
		{"one event at fault", func(id string) bool { return id == "e3" }, 1, 9, 7},
		{"every event at fault", func(string) bool { return true }, 10, 0, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newRecordingHandler(slog.LevelDebug)
				api := newFakeAPI(func(_ int, r seen) reply {
					for _, id := range r.ids {
						if tc.bad(id) {
							return reply{status: 400, body: `{"message":"bad event"}`}
						}
					}
					return reply{status: 200}
				})
				cb := &callbacks{}
				c := newTestClient(t, api, cb, WithSlog(slog.New(h)), WithFlushAt(10))
				skip := len(h.all())
				for i := range 10 {
					mustTrack(t, c, fmt.Sprintf("e%d", i))
				}
				if err := closeClient(t, c, 10*time.Second); err != nil {
					t.Fatalf("Close: %v", err)
				}
				if n := len(api.requests()); n < tc.atLeastRequest {
					t.Fatalf("%d requests: the batch was not isolated", n)
				}
				failed := int64(0)
				for _, e := range cb.errors() {
					failed += int64(len(e.msgs))
				}
				if got := int64(len(cb.delivered())); got != tc.good || failed != tc.failed {
					t.Errorf("%d delivered and %d failed, want %d and %d", got, failed, tc.good, tc.failed)
				}
				lines := linesSince(h, skip)
				for _, l := range lines {
					t.Log(l)
				}
				var errs []logLine
				for _, l := range lines {
					if l.level >= slog.LevelWarn {
						errs = append(errs, l)
					}
				}
				if len(lines) > 2 || len(errs) != 1 {
					t.Fatalf("%d lines, %d at WARN or above, for %d requests: want at most 2, one ERROR", len(lines), len(errs), len(api.requests()))
				}
				e := errs[0]
				if e.level != slog.LevelError || e.attrs["events"] != tc.failed || e.attrs["ofBatch"] != int64(10) ||
					e.attrs["delivered"] != tc.good || e.attrs["requests"] != int64(len(api.requests())) ||
					!strings.Contains(fmt.Sprint(e.attrs["error"]), "400") {
					t.Errorf("the line %v: want ERROR with %d of 10 events failed, %d delivered, %d requests, the 400",
						e, tc.failed, tc.good, len(api.requests()))
				}
			})
		})
	}
}

// R51: a server that fails three requests in four for 70 s is one outage,
// not one per 2xx: a warning when it starts, one every 30 s, and the line
// that it answers again only once it does (after 70 s), so at most four
// lines.
func TestOutageLogsAFlakyServerAsOneOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newRecordingHandler(slog.LevelDebug)
		start := time.Now()
		var mu sync.Mutex
		answers := 0
		api := newFakeAPI(func(_ int, r seen) reply {
			if r.at.Sub(start) >= 70*time.Second {
				return reply{status: 200}
			}
			mu.Lock()
			defer mu.Unlock()
			answers++
			if answers%4 == 0 {
				return reply{status: 200}
			}
			return reply{status: 503}
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithSlog(slog.New(h)), WithFlushAt(10))
		skip := len(h.all())
		ids := produce(t, c, "f", 20*time.Millisecond, 90*time.Second)
		if err := closeClient(t, c, 10*time.Second); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if got := len(cb.delivered()); got != len(ids) {
			t.Errorf("%d of %d events delivered", got, len(ids))
		}
		lines := linesSince(h, skip)
		for _, l := range lines {
			t.Log(l)
		}
		if len(lines) < 3 || len(lines) > 4 {
			t.Fatalf("%d lines, want 3 or 4: the start, one or two every 30 s, the end", len(lines))
		}
		for i, l := range lines[:len(lines)-1] {
			if l.level != slog.LevelWarn || !strings.Contains(l.msg, "failing") {
				t.Errorf("line %d %v: want a warning that the server fails", i, l)
			}
		}
		last := lines[len(lines)-1]
		if last.level != slog.LevelInfo || !strings.Contains(last.msg, "answering again") {
			t.Errorf("last line %v: want the information that it answers again", last)
		}
		if d := durationAttr(last.attrs["failedFor"]); d < 65*time.Second {
			t.Errorf("it failed for %v by the last line, want about 70 s", d)
		}
	})
}
