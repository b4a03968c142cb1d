package httpbatch

import (
	"errors"
	"io"
	"net/http"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go/internal/guard"
)

// The http.Client, its RoundTripper and the response bodies they return
// are the user's code: none of it may take the process down. Every call
// into it goes through the functions of this file, which end a panic and
// log it once at ERROR with its value and stack.

// Names for guard.Contain, as they read in logs and errors.
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
	defer guard.Contain(log, userHTTP, &err)
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
	defer guard.Contain(log, userBodyRead, nil)
	raw, _ = io.ReadAll(io.LimitReader(body, n))
	return raw, true
}

// drain reads and discards up to n bytes of body, so that the connection
// can be reused; false when the body panicked.
func drain(body io.Reader, n int64, log *zap.Logger) (ok bool) {
	defer guard.Contain(log, userBodyRead, nil)
	_, _ = io.Copy(io.Discard, io.LimitReader(body, n))
	return true
}

// closeBody closes body; an error or a panic changes nothing of the
// attempt (the panic is logged).
func closeBody(body io.Closer, log *zap.Logger) {
	defer guard.Contain(log, userBodyClose, nil)
	_ = body.Close()
}
