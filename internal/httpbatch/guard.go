package httpbatch

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"

	"go.uber.org/zap"
)

// The http.Client, its RoundTripper and the response bodies they return
// are the user's code: none of it may take the process down. Every call
// into it goes through the functions of this file, which end a panic and
// log it once at ERROR with its value and stack.

// panicError is the error an attempt ends with when the user's HTTP code
// panicked: what panicked, and the panic's value.
type panicError struct {
	what  string
	value string
}

func (e *panicError) Error() string { return e.what + " panicked: " + e.value }

// contain ends a panic of the user code that the calling function ran
// (what names it); when err is not nil, *err becomes a *panicError. It
// must be deferred directly, as recover requires.
func contain(log *zap.Logger, what string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	value := fmt.Sprint(r) // fmt contains a panic of the value's own String or Error method
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
