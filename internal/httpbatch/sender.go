// Package httpbatch makes one attempt of one batch over HTTP: it builds the
// request (headers, gzip, credentials), sends it through the user's
// http.Client with the client's redirect policy, reads a bounded and
// redacted excerpt of the answer, and judges it (Judge) into a verdict
// that does not depend on HTTP. It also makes the OAuth token requests.
//
// It knows nothing of batches, queues or retries: the body comes as a
// function that encodes it, and what happens to the batch next is the
// caller's. It imports nothing from the rest of the module.
//
// This file is one attempt and its verdict: the sender, the calls into the
// user's http.Client and bodies, and Judge, which turns the Answer into an
// Outcome. The redirect policy, Retry-After parsing and the OAuth token
// source are in redirect.go, retryafter.go and token.go.
package httpbatch

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go/internal/guard"
)

const (
	// maxErrorBody is how much of a non-2xx body is read for the message (R56).
	maxErrorBody = 4 << 10
	// maxDrain is how much more of a body is read so the connection can be
	// reused; a longer body closes the connection instead.
	maxDrain = 64 << 10
	// MaxExcerpt bounds Result.Message, in bytes before the ellipsis (R18).
	MaxExcerpt = 512
)

// Config is what a Sender needs.
type Config struct {
	Client    *http.Client // used as it is: see NewClient
	URL       string       // where batches are posted
	WriteKey  string       // the Basic credentials of an attempt without a bearer (R7)
	Secrets   []string     // texts removed from what the server sends back (WriteKeyForms)
	UserAgent string
	Gzip      bool        // compress bodies (R6)
	Log       *zap.Logger // for panics of the HTTP client and its bodies; nil: none
}

// Sender sends one attempt of a batch at a time (R1–R8). It is not safe
// for concurrent use: each consumer of the client owns one, so that its
// buffers need no lock.
type Sender struct {
	client    *http.Client
	url       string
	basic     string
	userAgent string
	secrets   []string
	gzip      bool
	log       *zap.Logger
	zw        *gzip.Writer // reused across attempts
	// request is what every attempt's request starts from (Clone): the
	// method, the parsed URL and the headers of an attempt with the write
	// key's credentials; nil when the URL does not parse (badURL).
	// Performance: the URL is parsed once, not per attempt.
	request *http.Request
	badURL  error

	recycled atomic.Int32 // body buffers given back for reuse (tests)
}

// New returns a Sender for c.
func New(c Config) *Sender {
	s := &Sender{
		client:    c.Client,
		url:       c.URL,
		basic:     "Basic " + base64.StdEncoding.EncodeToString([]byte(c.WriteKey+":")),
		userAgent: c.UserAgent,
		secrets:   c.Secrets,
		gzip:      c.Gzip,
		log:       c.Log,
	}
	s.request, s.badURL = http.NewRequest(http.MethodPost, s.url, nil)
	if s.request != nil {
		// Exactly the header set of R5–R7; docs/reference.md lists it.
		// Each attempt's request has a copy (Clone) and adds to it.
		s.request.Header = http.Header{
			"Content-Type":  {"application/json"},
			"User-Agent":    {s.userAgent},
			"Authorization": {s.basic},
		}
		if s.gzip {
			s.request.Header["Content-Encoding"] = []string{"gzip"}
		}
	}
	return s
}

// Client is the http.Client the Sender uses.
func (s *Sender) Client() *http.Client { return s.client }

// WriteKeyForms lists the ways the write key key can appear in text a
// server echoes: as the Basic credentials (with and without the trailing
// colon), as escaped in a JSON string (inBody, as the body encodes it
// without its quotes; encoding/json's with HTML escapes; and with "/"
// escaped), and as is. Longer forms come first.
func WriteKeyForms(key, inBody string) []string {
	std, _ := json.Marshal(key) // a string always encodes
	unquoted := string(std[1 : len(std)-1])
	forms := []string{
		base64.StdEncoding.EncodeToString([]byte(key + ":")),
		base64.StdEncoding.EncodeToString([]byte(key)),
		unquoted,
		strings.ReplaceAll(unquoted, "/", `\/`),
		strings.ReplaceAll(inBody, "/", `\/`),
		inBody,
		key,
	}
	out := forms[:0]
	for _, f := range forms {
		if f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// Attempt is one attempt of a batch.
type Attempt struct {
	// Body appends the batch's body, as of sentAt (R4), to buf and returns
	// it. It is called once per attempt, and again, with a nil buf, for
	// each retry net/http makes of its own (GetBody), possibly on another
	// goroutine while Send waits: for a given sentAt it must return the
	// same bytes every time.
	Body func(buf []byte, sentAt time.Time) []byte
	// Retry is the number of earlier attempts of the batch (X-Retry-Count).
	Retry int
	// Bearer is the Authorization header of an OAuth client (R50); "" for
	// the write key's Basic credentials.
	Bearer string
}

// Result is an attempt's answer and its verdict.
type Result struct {
	Answer
	Verdict
	Message  string // bounded, redacted excerpt of a non-2xx body (R18)
	Location string // a 3xx's Location, resolved, redacted and bounded
	Sent     int    // the body's size as sent
	Plain    int    // and before gzip
}

// Send makes attempt a, bounded by ctx, and judges its answer (Judge).
func (s *Sender) Send(ctx context.Context, a Attempt) Result {
	r := s.send(ctx, a)
	r.Verdict = Judge(r.Answer, a.Bearer != "", time.Now())
	return r
}

// send makes one attempt. r.Err is nil when a status line was received.
func (s *Sender) send(ctx context.Context, a Attempt) (r Result) {
	sentAt := time.Now()
	plain := getBodyBuffer()
	*plain = a.Body(*plain, sentAt)
	r.Sent, r.Plain = len(*plain), len(*plain)
	wire := plain
	if s.gzip {
		wire = getBodyBuffer()
		*wire = s.compress(*wire, *plain)
		r.Sent = len(*wire)
		putBodyBuffer(plain, &s.recycled) // the transport reads only the compressed copy
	}
	if s.badURL != nil {
		r.Answer = unanswered(s.badURL)
		return r
	}
	use := newBodyUse(wire, &s.recycled)
	ctx = httptrace.WithClientTrace(ctx, &use.trace)
	// As http.NewRequestWithContext makes it with a *bytes.Reader body,
	// from the URL parsed once (s.request).
	req := s.request.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(*wire))
	req.ContentLength = int64(len(*wire))
	// A retry of net/http's own (a connection that closed under the
	// request) reads the body again: encoded afresh, byte for byte the
	// same, since the buffer may be in use elsewhere by then.
	gz := s.gzip
	req.GetBody = func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(bodyAgain(a.Body, sentAt, gz))), nil
	}
	if a.Bearer != "" {
		req.Header["Authorization"] = []string{a.Bearer}
	}
	if a.Retry > 0 {
		req.Header["X-Retry-Count"] = []string{strconv.Itoa(a.Retry)}
	}
	resp, err := do(s.client, req, s.log) // a panic or a nil response is a transport error (do, below)
	if use.released() {
		use.giveBack() // Do has returned: no retry of its own reads it again
	}
	if err != nil {
		r.Answer = unanswered(s.redactErr(err))
		return r
	}
	// No read of this body may outlive the attempt (R15, R56): when the
	// attempt's context ends (timeout or Close), the body is closed, which
	// ends a read that the transport itself would not end (the raw
	// connection of a 101, a RoundTripper that ignores the context).
	// net/http's own Transport ends such a read itself (it closes the
	// connection when the request's context ends), so the close is
	// registered for other RoundTrippers only. Performance: that saves a
	// registration on the attempt's context per request.
	defer closeBody(resp.Body, s.log)
	if !endsReadsWithContext(s.client) {
		stop := context.AfterFunc(ctx, func() { closeBody(resp.Body, s.log) })
		defer stop()
	}
	r.Answer = answered(resp, s.redact)
	if resp.StatusCode < 200 {
		// A 1xx that reaches the client (101 Switching Protocols) carries
		// the raw connection as its body: it is decided without reading it
		// (R15), and closing it closes the connection.
		return r
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		if loc, err := resp.Location(); err == nil {
			r.Location = clip(s.redact(RedactURL(loc.String())))
		}
	}
	if resp.StatusCode > 299 {
		// A read error part-way changes nothing (R16), nor does a panic:
		// the status decides, and a body that panicked is read no more.
		raw, ok := readBody(resp.Body, maxErrorBody, s.log)
		r.Message = clip(s.redact(excerpt(raw)))
		if !ok {
			return r
		}
	}
	drain(resp.Body, maxDrain, s.log) // R56
	return r
}

// endsReadsWithContext reports whether client's responses come from
// net/http's own Transport (its Transport, or http.DefaultTransport when
// that is nil), whose response bodies end a read when the request's
// context ends.
func endsReadsWithContext(client *http.Client) bool {
	rt := client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	_, std := rt.(*http.Transport)
	return std
}

// bodyAgain is the attempt's body encoded anew into fresh buffers, for
// GetBody. It may run on a transport goroutine while the consumer waits in
// Do, so it shares nothing with the Sender: it uses its own gzip writer.
func bodyAgain(body func([]byte, time.Time) []byte, sentAt time.Time, gz bool) []byte {
	plain := body(nil, sentAt)
	if !gz {
		return plain
	}
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	_, _ = zw.Write(plain)
	_ = zw.Close()
	return out.Bytes()
}

func (s *Sender) compress(dst, body []byte) []byte {
	out := bytes.NewBuffer(dst[:0])
	if s.zw == nil {
		s.zw, _ = gzip.NewWriterLevel(out, gzip.BestSpeed)
	} else {
		s.zw.Reset(out)
	}
	_, _ = s.zw.Write(body) // writes to a bytes.Buffer cannot fail
	_ = s.zw.Close()
	return out.Bytes()
}

// bodyUse tracks, through httptrace hooks, whether the transport is done
// with an attempt's body, so that its buffer can be reused. net/http may
// go on writing a request body after RoundTrip returned (an early
// response), so the buffer goes back only once a write of it finished
// without error (WroteRequest), or once Do has returned and every write
// that started (GetConn) has finished. A retry of net/http's own after a
// complete write reads the body from GetBody, which encodes it afresh (see
// send), never from the buffer given back. A RoundTripper that does not
// call the hooks never has its buffer reused.
type bodyUse struct {
	started, finished atomic.Int32
	trace             httptrace.ClientTrace
	body              *[]byte       // the buffer the transport reads
	given             atomic.Bool   // body went back to bodyBuffers
	recycled          *atomic.Int32 // the Sender's count of buffers given back
}

func newBodyUse(body *[]byte, recycled *atomic.Int32) *bodyUse {
	u := &bodyUse{body: body, recycled: recycled}
	u.trace.GetConn = func(string) { u.started.Add(1) }
	u.trace.WroteRequest = func(info httptrace.WroteRequestInfo) {
		u.finished.Add(1)
		if info.Err == nil {
			u.giveBack() // written in full: net/http reads it no more
		}
	}
	return u
}

func (u *bodyUse) released() bool {
	n := u.started.Load()
	return n > 0 && u.finished.Load() == n
}

// giveBack returns the body's buffer to bodyBuffers, once.
func (u *bodyUse) giveBack() {
	if u.given.CompareAndSwap(false, true) {
		putBodyBuffer(u.body, u.recycled)
	}
}

// bodyBuffers holds request body buffers that no transport reads any more,
// shared by every Sender: a buffer is held from encoding a body until
// net/http has written it, so a client keeps about as many as it has
// requests being written at once, not one or two per consumer.
var bodyBuffers sync.Pool // of *[]byte

func getBodyBuffer() *[]byte {
	if p, ok := bodyBuffers.Get().(*[]byte); ok {
		return p
	}
	return new([]byte)
}

func putBodyBuffer(p *[]byte, recycled *atomic.Int32) {
	bodyBuffers.Put(p)
	recycled.Add(1)
}

// redacted is what replaces the write key in server text.
const redacted = "[redacted]"

// redact removes the write key from text the server sent (R18): the key
// itself, as written in the JSON body, and the Authorization credentials.
func (s *Sender) redact(text string) string {
	for _, secret := range s.secrets {
		if secret != "" && strings.Contains(text, secret) {
			text = strings.ReplaceAll(text, secret, redacted)
		}
	}
	return text
}

// redactErr returns err with the write key removed from its text; errors.Is
// and errors.As still see the original chain.
func (s *Sender) redactErr(err error) error {
	if text := err.Error(); s.redact(text) != text {
		return &redactedError{text: s.redact(text), err: err}
	}
	return err
}

// redactedError is an error whose text had the write key removed.
type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// excerpt extracts the server's message: the "message" (or "error") string
// of a JSON object, otherwise the text. It never fails (R16). The caller
// clips it (after redaction, so a clip never leaves part of a secret).
func excerpt(raw []byte) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		for _, key := range []string{"message", "error"} {
			var s string
			if json.Unmarshal(obj[key], &s) == nil && s != "" {
				return s
			}
		}
	}
	return strings.TrimSpace(string(raw))
}

// clip bounds s to MaxExcerpt bytes, on a rune boundary, with an ellipsis
// when it cut, and makes it valid UTF-8.
func clip(s string) string {
	if len(s) <= MaxExcerpt {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	cut := MaxExcerpt
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "\uFFFD") + "…"
}

// The http.Client, its RoundTripper and the response bodies they return
// are the user's code: none of it may take the process down. Every call
// into it goes through the functions below, which end a panic and
// log it once at ERROR with its value and stack.

// Names for guard.Caught, as they read in logs and errors.
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
	defer func() {
		if p := recover(); p != nil {
			err = guard.Caught(log, userHTTP, p)
		}
	}()
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
	defer func() {
		if p := recover(); p != nil {
			guard.Caught(log, userBodyRead, p)
		}
	}()
	raw, _ = io.ReadAll(io.LimitReader(body, n))
	return raw, true
}

// drain reads and discards up to n bytes of body, so that the connection
// can be reused; false when the body panicked.
func drain(body io.Reader, n int64, log *zap.Logger) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			guard.Caught(log, userBodyRead, p)
		}
	}()
	_, _ = io.Copy(io.Discard, io.LimitReader(body, n))
	return true
}

// closeBody closes body; an error or a panic changes nothing of the
// attempt (the panic is logged).
func closeBody(body io.Closer, log *zap.Logger) {
	defer func() {
		if p := recover(); p != nil {
			guard.Caught(log, userBodyClose, p)
		}
	}()
	_ = body.Close()
}

// Outcome is what one attempt came to, in terms that do not depend on
// HTTP: what the client is to do with the batch next.
type Outcome int

const (
	// Delivered: a 2xx; the server took the batch (R9).
	Delivered Outcome = iota
	// Retry: a counted retry with backoff (R26): a retryable status
	// without a usable Retry-After, or a transport error that is not
	// deterministic on the client (R14).
	Retry
	// RateLimited: the server asked to wait Verdict.Delay (a usable
	// Retry-After on a retryable status); not counted as a retry (R31).
	RateLimited
	// TooLarge: the body was too large (413); the server stored nothing
	// (R3, R67).
	TooLarge
	// Poison: the request as a whole was refused (400), for what may be
	// one event the server will never take (R66).
	Poison
	// TooMany: too many requests (429) without a usable Retry-After: a
	// counted retry, and a hint that the batch may carry too many events
	// (R68).
	TooMany
	// Failed: not to be retried: any other status (3xx, most 4xx, 501,
	// 505, statuses outside 200–599) or a transport error that is
	// deterministic on the client (R10, R12–R15).
	Failed
)

// Verdict is the judgement of one attempt's answer.
type Verdict struct {
	Outcome Outcome
	// Delay is how long the server asked to wait, for RateLimited: the
	// Retry-After in whole seconds, capped at MaxRetryAfter (R24).
	Delay time.Duration
	// InvalidRetryAfter reports a Retry-After on a retryable status that
	// could not be parsed; the attempt is a counted retry (R25).
	InvalidRetryAfter bool
	// Reauth reports that the attempt's bearer credentials were refused
	// (400, 401, 403 or 511 with a bearer): they are not to be used again
	// (R50). A 511 with a bearer is then a counted retry.
	Reauth bool
	// Redirect reports a Failed answer that was a redirect (R10, R11).
	Redirect bool
}

// Answer is what came back from one attempt: a status line (Err nil) or
// the error that stands for one (a transport error, a panic of the HTTP
// client).
type Answer struct {
	Status        int    // 0 when no response came
	RetryAfter    string // the Retry-After header, redacted; "" without one
	HasRetryAfter bool   // the response had a Retry-After header
	Err           error  // why no response came; nil when one came
}

// answered is the Answer of a response: its status and its Retry-After
// header, passed through redact.
func answered(resp *http.Response, redact func(string) string) Answer {
	a := Answer{Status: resp.StatusCode}
	if vals, ok := resp.Header["Retry-After"]; ok {
		a.HasRetryAfter = true
		if len(vals) > 0 {
			a.RetryAfter = redact(vals[0])
		}
	}
	return a
}

// unanswered is the Answer of an attempt that got no response; err says why.
func unanswered(err error) Answer { return Answer{Err: err} }

// Judge decides the verdict of one attempt from its answer alone: the
// body never matters (R3, R9–R16, R25, R50). bearer reports that the
// attempt carried a bearer token; now is the wall clock, for HTTP-dates
// in Retry-After only. Every answer gets its verdict here: the caller acts
// on the verdict and never looks at the status again.
func Judge(a Answer, bearer bool, now time.Time) Verdict {
	if a.Err != nil {
		if !transientError(a.Err) {
			return Verdict{Outcome: Failed} // R14: deterministic on the client
		}
		return Verdict{Outcome: Retry}
	}
	status := a.Status
	switch {
	case status >= 200 && status <= 299:
		return Verdict{Outcome: Delivered}
	case status >= 300 && status <= 399:
		return Verdict{Outcome: Failed, Redirect: true} // R10
	case status == http.StatusRequestEntityTooLarge:
		return Verdict{Outcome: TooLarge} // R3: the server stored nothing
	case status == http.StatusBadRequest:
		return Verdict{Outcome: Poison, Reauth: bearer} // R50: the next batch gets a fresh token
	case bearer && status == http.StatusNetworkAuthenticationRequired:
		return Verdict{Outcome: Retry, Reauth: true} // R50: a fresh token, as a counted retry
	case bearer && (status == http.StatusUnauthorized || status == http.StatusForbidden):
		return Verdict{Outcome: Failed, Reauth: true} // R50
	case !retryableStatus(status):
		return Verdict{Outcome: Failed} // R12, R13, R15
	}
	v := Verdict{Outcome: Retry}
	if status == http.StatusTooManyRequests {
		v.Outcome = TooMany
	}
	if a.HasRetryAfter {
		d, kind := parseRetryAfter(a.RetryAfter, now) // parsed once (R19)
		switch kind {
		case retryAfterUsable:
			v.Outcome, v.Delay = RateLimited, d
		case retryAfterInvalid:
			v.InvalidRetryAfter = true
		}
	}
	return v
}

// Retried reports whether the outcome is a retry of the batch, counted or
// not; such failures are of the retryable kind.
func (o Outcome) Retried() bool { return o == Retry || o == RateLimited || o == TooMany }

func retryableStatus(status int) bool {
	switch status {
	case 408, 429, 460:
		return true
	case 410:
		// R58: 410 is retried, bounded by MaxRetries and
		// MaxTotalBackoffDuration, for parity with the conformance suite.
		return true
	case 501, 505, 511:
		return false // R13; with a bearer, Judge makes 511 a counted retry with a fresh token (R50)
	}
	return status >= 500 && status <= 599
}

// transientError reports whether an error without a response is worth
// retrying (R14): everything is, except errors that are deterministic on
// the client.
func transientError(err error) bool {
	var (
		verifyErr  *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalidCrt x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &verifyErr), errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalidCrt):
		return false
	case strings.Contains(err.Error(), "unsupported protocol scheme"):
		return false
	}
	return true
}
