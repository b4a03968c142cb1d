package analytics

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The client's goroutines run code the user supplied: the http.Client and
// its RoundTripper, the response bodies they return, OnSuccess, OnError,
// the attempt hook and the logger. None of it may take the process down
// (docs/delivery.md R56, R16). This file is the one place that contains
// it: contain is deferred by every function that calls into such code,
// and guardCore wraps the logger.

// panicError is the error an attempt ends with when user code panicked:
// what panicked, and the panic's value.
type panicError struct {
	what  string
	value string
}

func (e *panicError) Error() string { return e.what + " panicked: " + e.value }

// contain ends a panic of the user code that the calling function ran
// (what names it): the panic is logged once at ERROR with its value and
// stack, and, when err is not nil, *err becomes a *panicError. It must be
// deferred directly (defer contain(…)), as recover requires.
func contain(log *zap.Logger, what string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	// fmt contains a panic of the value's own String or Error method.
	value := fmt.Sprint(r)
	if log == nil {
		log = zap.NewNop()
	}
	log.Error(what+" panicked", zap.String("panic", value), zap.ByteString("stack", debug.Stack()))
	if err != nil {
		*err = &panicError{what: what, value: value}
	}
}

// Names for contain, as they read in logs and errors.
const (
	userHTTP      = "the HTTP client"
	userBodyRead  = "reading the response body"
	userBodyClose = "closing the response body"
	userCallback  = "analytics callback"
	userHook      = "analytics attempt hook"
)

// do is client.Do with a panic of the transport (or of anything else the
// http.Client calls) as the attempt's error; a nil response without an
// error is an error too. (A nil Body needs nothing here: http.Client.Do
// replaces it with an empty one, or fails when a length was announced.)
func do(client *http.Client, req *http.Request, log *zap.Logger) (resp *http.Response, err error) {
	defer contain(log, userHTTP, &err)
	resp, err = client.Do(req)
	if err == nil && resp == nil {
		err = errNilResponse
	}
	return resp, err
}

// errNilResponse is the error of an attempt whose http.Client returned
// neither a response nor an error.
var errNilResponse = errors.New("the HTTP client returned a nil *http.Response with a nil error")

// readBody reads up to n bytes of body. A read error ends the read (what
// was read is kept); a panic ends it too and reports ok false, after which
// the body is read no more.
func readBody(body io.Reader, n int64, log *zap.Logger) (raw []byte, ok bool) {
	defer contain(log, userBodyRead, nil)
	raw, _ = io.ReadAll(io.LimitReader(body, n))
	return raw, true
}

// drain reads and discards up to n bytes of body, so that the connection
// can be reused; false when the body panicked.
func drain(body io.Reader, n int64, log *zap.Logger) (ok bool) {
	defer contain(log, userBodyRead, nil)
	_, _ = io.Copy(io.Discard, io.LimitReader(body, n))
	return true
}

// closeBody closes body; an error or a panic changes nothing of the
// attempt (the panic is logged).
func closeBody(body io.Closer, log *zap.Logger) {
	defer contain(log, userBodyClose, nil)
	_ = body.Close()
}

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
