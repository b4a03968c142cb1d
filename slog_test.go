package analytics

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// recordingHandler is a slog.Handler that keeps every record, with the
// attributes added by WithAttrs.
type recordingHandler struct {
	mu      *sync.Mutex
	records *[]slog.Record
	level   slog.Level
	attrs   []slog.Attr
}

func newRecordingHandler(level slog.Level) *recordingHandler {
	return &recordingHandler{mu: &sync.Mutex{}, records: &[]slog.Record{}, level: level}
}

func (h *recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.records = append(*h.records, r)
	return nil
}

func (h *recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *recordingHandler) WithGroup(string) slog.Handler { return h }

func (h *recordingHandler) all() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), *h.records...)
}

func attrMap(r slog.Record) map[string]any {
	m := map[string]any{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.Any()
		return true
	})
	return m
}

// The client's logs reach the slog handler with their levels and fields;
// nothing carries the write key or the payload.
func TestWithSlog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const key = "wk-secret-0123"
		api := newFakeAPI(sequence(reply{status: 401, body: `{"message":"Invalid write key"}`}))
		h := newRecordingHandler(slog.LevelDebug)
		c, err := New(key, WithEndpoint("http://api.test"), WithHTTPClient(&http.Client{Transport: api}), WithSlog(slog.New(h)))
		require.NoError(t, err)
		auditLater(t, c, nil)
		require.NoError(t, c.Track(Track{UserID: "u", Event: "Secret Payload", Properties: Properties{"card": "4242-payload"}}))
		_ = closeClient(t, c, time.Second)

		recs := h.all()
		require.NotEmpty(t, recs)
		var started, failed *slog.Record
		for i := range recs {
			switch recs[i].Message {
			case "analytics client started":
				started = &recs[i]
			case "events not delivered":
				failed = &recs[i]
			}
			text := recs[i].Message + fmt.Sprint(attrMap(recs[i]))
			assert.NotContains(t, text, key, "record %q", recs[i].Message)
			assert.NotContains(t, text, "4242-payload")
			assert.NotContains(t, text, "Secret Payload")
		}
		require.NotNil(t, started, "records: %v", recs)
		assert.Equal(t, slog.LevelDebug, started.Level)
		assert.Contains(t, attrMap(*started)["config"], "endpoint=http://api.test")
		require.NotNil(t, failed, "records: %v", recs)
		assert.Equal(t, slog.LevelError, failed.Level)
		a := attrMap(*failed)
		assert.Equal(t, int64(1), a["events"])
		assert.Contains(t, a["error"], "401")
		assert.False(t, failed.Time.IsZero())
	})
}

// The handler's level decides; a handler at Error sees no debug record.
func TestWithSlogRespectsTheHandlerLevel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newRecordingHandler(slog.LevelError)
		c, err := New("wk", WithEndpoint("http://api.test"), WithHTTPClient(&http.Client{Transport: newFakeAPI(nil)}), WithSlog(slog.New(h)))
		require.NoError(t, err)
		auditLater(t, c, nil)
		mustTrack(t, c, "a")
		require.NoError(t, closeClient(t, c, time.Second))
		assert.Empty(t, h.all(), "a delivered event logs nothing at Error")
	})
}

func TestWithSlogNil(t *testing.T) {
	_, err := New("wk", WithSlog(nil))
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Logger", ce.Field)
}

// The core forwards With fields and maps every zap level.
func TestSlogCore(t *testing.T) {
	h := newRecordingHandler(slog.LevelDebug)
	c, err := New("wk", WithSlog(slog.New(h)))
	require.NoError(t, err)
	auditLater(t, c, nil)
	require.NoError(t, c.Close(context.Background()))
	log := c.log.With(zap.String("component", "test")).Named("sub")
	log.Info("info")
	log.Warn("warn")
	var levels []string
	for _, r := range h.all() {
		if r.Message == "info" || r.Message == "warn" {
			levels = append(levels, r.Level.String())
			a := attrMap(r)
			assert.Equal(t, "test", a["component"])
			assert.Equal(t, "sub", a["logger"])
		}
	}
	assert.Equal(t, "INFO,WARN", strings.Join(levels, ","))
}

// Durations are text in the logs: "retryAfter":"5s" in the JSON of slog's
// handler and of zap's production encoder, not 5000000000 or 5.
func TestLoggedDurationsAreText(t *testing.T) {
	run := func(t *testing.T, opt Option) {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(sequence(reply{status: 429, header: map[string]string{"Retry-After": "5"}}, reply{status: 200}))
			c, err := New("wk", WithEndpoint("http://api.test"), WithHTTPClient(&http.Client{Transport: api}), opt)
			require.NoError(t, err)
			auditLater(t, c, nil)
			mustTrack(t, c, "a")
			require.NoError(t, closeClient(t, c, time.Minute))
			require.Len(t, api.requests(), 2)
		})
	}
	t.Run("slog", func(t *testing.T) {
		var buf syncBuffer
		run(t, WithSlog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		line := lineWith(t, buf.String(), "rate-limit episode started")
		assert.Contains(t, line, `"retryAfter":"5s"`)
	})
	t.Run("zap", func(t *testing.T) {
		var buf syncBuffer
		core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zapcore.DebugLevel)
		run(t, WithLogger(zap.New(core)))
		line := lineWith(t, buf.String(), "rate-limit episode started")
		assert.Contains(t, line, `"retryAfter":"5s"`)
	})
	// A zap.Duration field from anywhere reaches slog as text too.
	var buf syncBuffer
	zap.New(&slogCore{h: slog.NewJSONHandler(&buf, nil)}).Info("x", zap.Duration("wait", 1500*time.Millisecond))
	assert.Contains(t, buf.String(), `"wait":"1.5s"`)
}

// syncBuffer is a bytes.Buffer safe for the client's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func lineWith(t *testing.T, text, msg string) string {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, `"`+msg+`"`) {
			return line
		}
	}
	t.Fatalf("no line %q in:\n%s", msg, text)
	return ""
}
