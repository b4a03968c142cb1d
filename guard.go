package analytics

import (
	"errors"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The client's goroutines run code the user supplied: the http.Client and
// its RoundTripper, the response bodies they return, OnSuccess, OnError,
// the attempt hook and the logger. None of it may take the process down
// (docs/delivery.md R56, R16). Every function of this package that calls
// into such code (consumer.observe, settler.callback in consumer.go)
// defers a recover and hands a panic to guard.Caught (internal/guard,
// shared with internal/httpbatch), and guardCore, below, wraps the logger.
// The HTTP client and its bodies are called only from internal/httpbatch,
// whose sender.go holds those calls.

// Names for guard.Caught, as they read in logs and errors.
const (
	userCallback = "analytics callback"
	userHook     = "analytics attempt hook"
)

// guardLogger returns l with every call into its core contained: a logger
// that panics loses that line, and nothing else. The client logs only
// through the returned logger.
func guardLogger(l *zap.Logger) *zap.Logger {
	return l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		if _, ok := c.(guardCore); ok {
			return c
		}
		return guardCore{c}
	}))
}

// guardCore is a zapcore.Core that contains the panics of the core it
// wraps. Check asks the wrapped core (so a sampler keeps sampling), and the
// entry it checks is written through checkedWrite.
type guardCore struct{ zapcore.Core }

func (c guardCore) Enabled(l zapcore.Level) (ok bool) {
	defer func() { _ = recover() }()
	return c.Core.Enabled(l)
}

func (c guardCore) With(fields []zapcore.Field) (out zapcore.Core) {
	defer func() {
		if recover() != nil {
			out = c
		}
	}()
	return guardCore{c.Core.With(fields)}
}

func (c guardCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) (out *zapcore.CheckedEntry) {
	defer func() {
		if recover() != nil {
			out = ce
		}
	}()
	if inner := c.Core.Check(e, nil); inner != nil {
		return ce.AddCore(e, checkedWrite{inner})
	}
	return ce
}

func (c guardCore) Write(e zapcore.Entry, fields []zapcore.Field) (err error) {
	defer func() { _ = recover() }()
	return c.Core.Write(e, fields)
}

func (c guardCore) Sync() (err error) {
	defer func() { _ = recover() }()
	return c.Core.Sync()
}

// checkedWrite writes an entry the wrapped core checked; it is only ever
// written (CheckedEntry calls nothing else of its cores).
type checkedWrite struct{ ce *zapcore.CheckedEntry }

func (w checkedWrite) Enabled(zapcore.Level) bool        { return true }
func (w checkedWrite) With([]zapcore.Field) zapcore.Core { return w }
func (w checkedWrite) Sync() error                       { return nil }
func (w checkedWrite) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, w)
}

func (w checkedWrite) Write(_ zapcore.Entry, fields []zapcore.Field) (err error) {
	defer func() { _ = recover() }()
	// The wrapped core's write errors come back here, so that the logger
	// reports them to its ErrorOutput as it would without the guard.
	var failed writeErrors
	w.ce.ErrorOutput = &failed
	w.ce.Write(fields...)
	if failed.text != "" {
		return errors.New(failed.text)
	}
	return nil
}

// writeErrors collects the text of the write errors a CheckedEntry reports.
type writeErrors struct{ text string }

func (w *writeErrors) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if _, after, ok := strings.Cut(line, "write error: "); ok {
		line = after
	}
	w.text += line
	return len(p), nil
}

func (w *writeErrors) Sync() error { return nil }
