package analytics

import (
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Logger receives the client's log lines. Set it in Config.Logger; the
// default (nil) is silent. The client never logs the write key or message
// payloads.
//
// Implementations must be safe for concurrent use: the client logs from
// several goroutines. A Logger that panics loses that line; the client goes
// on.
type Logger interface {
	// Logf receives informational lines, and with Config.Verbose debug
	// lines too.
	Logf(format string, args ...interface{})

	// Errorf receives errors of the background work, such as a batch that
	// could not be delivered.
	Errorf(format string, args ...interface{})
}

// StdLogger returns a Logger that writes to logger, with "INFO: " or
// "ERROR: " before each line. v3's default logger was
// StdLogger(log.New(os.Stderr, "segment ", log.LstdFlags)); set it in
// Config.Logger to keep logging to standard error.
func StdLogger(logger *log.Logger) Logger {
	return stdLogger{l: logger}
}

// stderr is where Verbose without a Logger writes; a variable for tests.
var stderr io.Writer = os.Stderr

type stdLogger struct{ l *log.Logger }

func (s stdLogger) Logf(format string, args ...interface{}) {
	s.l.Printf("INFO: "+format, args...)
}

func (s stdLogger) Errorf(format string, args ...interface{}) {
	s.l.Printf("ERROR: "+format, args...)
}

// zapLogger adapts l for the engine's WithLogger: error and higher levels
// go to Errorf, info and warn to Logf, debug to Logf only when verbose.
// A nil l gives a silent logger, or with verbose v3's default logger on
// standard error.
func zapLogger(l Logger, verbose bool) *zap.Logger {
	if l == nil && !verbose {
		return zap.NewNop()
	}
	if l == nil {
		l = StdLogger(log.New(stderr, "segment ", log.LstdFlags))
	}
	min := zapcore.InfoLevel
	if verbose {
		min = zapcore.DebugLevel
	}
	return zap.New(&logCore{out: l, min: min})
}

// logCore is a zapcore.Core that formats each entry as one line:
// "message key=value key=value", keys sorted.
type logCore struct {
	out    Logger
	min    zapcore.Level
	fields []zapcore.Field
}

func (c *logCore) Enabled(l zapcore.Level) bool { return l >= c.min }

func (c *logCore) With(fields []zapcore.Field) zapcore.Core {
	return &logCore{out: c.out, min: c.min, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

func (c *logCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write formats the entry and passes it to the Logger. A Logger that
// panics loses that line and nothing else: the panic ends here, so the
// goroutine that logged (a consumer, or a Callback's recovery) goes on.
func (c *logCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	defer func() { _ = recover() }()
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(e.Message)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, enc.Fields[k])
	}
	if e.Level >= zapcore.ErrorLevel {
		c.out.Errorf("%s", b.String())
	} else {
		c.out.Logf("%s", b.String())
	}
	return nil
}

func (c *logCore) Sync() error { return nil }
