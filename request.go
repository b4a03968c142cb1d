package analytics

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
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go/internal/wire"
)

const (
	// maxErrorBody is how much of a non-2xx body is read for the message (R56).
	maxErrorBody = 4 << 10
	// maxDrain is how much more of a body is read so the connection can be
	// reused; a longer body closes the connection instead.
	maxDrain = 64 << 10
	// maxExcerpt bounds HTTPError.Message (R18).
	maxExcerpt = 512
)

// sender builds and sends one attempt of a batch (R1–R8). Each consumer owns
// one, so its buffers need no lock.
type sender struct {
	client    *http.Client
	url       string
	auth      string
	userAgent string
	secrets   []string // forms of the write key removed from server text
	gzip      bool
	frame     wire.Frame   // the body around the events: write key, shared.Compat BodyFields, per-event sentAt
	zw        *gzip.Writer // reused across attempts
	log       *zap.Logger  // for panics of the transport and its bodies (guard.go)

	sent      int          // size of the last attempt's body, as sent
	plainSize int          // and before gzip
	recycled  atomic.Int32 // body buffers given back for reuse (tests)
}

func newSender(s *settings, client *http.Client) *sender {
	return &sender{
		client:    client,
		url:       s.Endpoint + "/v1/batch",
		auth:      "Basic " + base64.StdEncoding.EncodeToString([]byte(s.writeKey+":")),
		userAgent: LibraryName + "/" + Version,
		secrets:   writeKeyForms(s.writeKey),
		gzip:      s.Gzip,
		frame:     wire.NewFrame(s.writeKey, s.compat.BodyFields, s.EventSentAt),
		log:       s.logger,
	}
}

// writeKeyForms lists the ways the write key can appear in text a server
// echoes: as the Basic credentials (with and without the trailing colon),
// as escaped in a JSON string (ours, encoding/json's with HTML escapes,
// and with "/" escaped), and as is. Longer forms come first.
func writeKeyForms(key string) []string {
	unquote := func(q string) string { return q[1 : len(q)-1] }
	ours := unquote(string(wire.AppendString(nil, key)))
	std, _ := json.Marshal(key) // a string always encodes
	forms := []string{
		base64.StdEncoding.EncodeToString([]byte(key + ":")),
		base64.StdEncoding.EncodeToString([]byte(key)),
		unquote(string(std)),
		strings.ReplaceAll(unquote(string(std)), "/", `\/`),
		strings.ReplaceAll(ours, "/", `\/`),
		ours,
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

// maxBodyFields is the most shared.Compat BodyFields may take of a batch:
// the rest still holds one event of MaxEventBytes.
const maxBodyFields = batchEventBytes - MaxEventBytes

// bodyAgain is the attempt's body encoded anew into fresh buffers, for
// GetBody (send encodes the first: {"batch":[…],"sentAt":…,"writeKey":…},
// sentAt being the time of the attempt, R4, on every event too with
// WithEventSentAt, R59). It may run on a transport goroutine while the consumer waits in
// Do, so it shares nothing with the sender that changes: b and sentAt are
// fixed for the attempt, and it uses its own gzip writer.
func (s *sender) bodyAgain(b *batch, sentAt time.Time) []byte {
	body := s.frame.Encode(nil, b, sentAt)
	if !s.gzip {
		return body
	}
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	_, _ = zw.Write(body)
	_ = zw.Close()
	return out.Bytes()
}

func (s *sender) compress(dst, body []byte) []byte {
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
	recycled          *atomic.Int32 // the sender's count of buffers given back
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
// shared by every consumer of every client: a buffer is held from encoding
// a body until net/http has written it, so a client keeps about as many as
// it has requests being written at once, not one or two per consumer.
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

// response is what classification needs from one attempt.
type response struct {
	status     int
	retryAfter string
	hasRA      bool
	text       string // bounded excerpt of the body (non-2xx only)
	location   string // a 3xx's Location, resolved, redacted and bounded
}

// transport is what a consumer needs for one attempt of a batch: send b
// and judge the answer. The consumer acts on the result and never reads
// the protocol behind it; sender is the HTTP transport. bearer is the
// Authorization header of an OAuth client (R50), "" without OAuth. The
// attempt is bounded by ctx.
type transport interface {
	attempt(ctx context.Context, b *batch, bearer string) attemptResult
}

// attemptResult is one attempt's answer, judged: what a consumer acts on,
// in terms that do not depend on the protocol.
type attemptResult struct {
	verdict            // classify's decision
	cause      error   // why no answer came (the transport error); nil when one came
	refused    refusal // what the server refused of the batch, for the learned limits and the cuts
	status     int     // the answer's status, 0 without one: for AttemptInfo and the logs only
	retryAfter string  // the Retry-After as received, for the logs only
	sent       int     // the body's size as sent
	plainSize  int     // and before compression
}

// refusal is what an answer says the server refused of a batch, beyond
// its outcome (R66–R68).
type refusal int

const (
	refusedNone    refusal = iota
	refusedBody            // the body was too large (413)
	refusedBatch           // the request as a whole was bad (400)
	refusedTooMany         // too many requests (429)
)

// refusalOf is the refusal a status says.
func refusalOf(status int) refusal {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return refusedBody
	case http.StatusBadRequest:
		return refusedBatch
	case http.StatusTooManyRequests:
		return refusedTooMany
	}
	return refusedNone
}

// attempt sends b (send) and judges the answer (classify).
func (s *sender) attempt(ctx context.Context, b *batch, bearer string) attemptResult {
	if bearer != "" {
		s.auth = bearer
	}
	resp, err := s.send(ctx, b)
	r := attemptResult{cause: err, sent: s.sent, plainSize: s.plainSize}
	r.verdict = classify(resp, err, attemptOf{now: time.Now(), events: len(b.events), bearer: bearer != ""})
	if err == nil {
		r.status, r.retryAfter, r.refused = resp.status, resp.retryAfter, refusalOf(resp.status)
	}
	return r
}

// send makes one attempt. A nil error means a status line was received.
func (s *sender) send(ctx context.Context, b *batch) (response, error) {
	sentAt := time.Now()
	plain := getBodyBuffer()
	*plain = s.frame.Encode(*plain, b, sentAt)
	s.sent, s.plainSize = len(*plain), len(*plain)
	wire := plain
	if s.gzip {
		wire = getBodyBuffer()
		*wire = s.compress(*wire, *plain)
		s.sent = len(*wire)
		putBodyBuffer(plain, &s.recycled) // the transport reads only the compressed copy
	}
	use := newBodyUse(wire, &s.recycled)
	ctx = httptrace.WithClientTrace(ctx, &use.trace)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(*wire))
	if err != nil {
		return response{}, err
	}
	// A retry of net/http's own (a connection that closed under the
	// request) reads the body again: encoded afresh, byte for byte the
	// same, since the buffer may be in use elsewhere by then.
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(s.bodyAgain(b, sentAt))), nil }
	// Exactly the header set of R5–R7; docs/reference.md lists it.
	req.Header = http.Header{
		"Content-Type":  {"application/json"},
		"User-Agent":    {s.userAgent},
		"Authorization": {s.auth},
	}
	if s.gzip {
		req.Header["Content-Encoding"] = []string{"gzip"}
	}
	if b.attempts > 0 {
		req.Header["X-Retry-Count"] = []string{strconv.Itoa(b.attempts)}
	}
	resp, err := do(s.client, req, s.log) // a panic or a nil response is a transport error (guard.go)
	if use.released() {
		use.giveBack() // Do has returned: no retry of its own reads it again
	}
	if err != nil {
		return response{}, s.redactErr(err)
	}
	// No read of this body may outlive the attempt (R15, R56): when the
	// attempt's context ends (timeout or Close), the body is closed, which
	// ends a read that the transport itself would not end (the raw
	// connection of a 101, a RoundTripper that ignores the context).
	stop := context.AfterFunc(ctx, func() { closeBody(resp.Body, s.log) })
	defer func() {
		stop()
		closeBody(resp.Body, s.log)
	}()
	r := response{status: resp.StatusCode}
	if vals, ok := resp.Header["Retry-After"]; ok {
		r.hasRA = true
		if len(vals) > 0 {
			r.retryAfter = s.redact(vals[0])
		}
	}
	if resp.StatusCode < 200 {
		// A 1xx that reaches the client (101 Switching Protocols) carries
		// the raw connection as its body: it is decided without reading it
		// (R15), and closing it closes the connection.
		return r, nil
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		if loc, err := resp.Location(); err == nil {
			r.location = clip(s.redact(redactURL(loc.String())))
		}
	}
	if resp.StatusCode > 299 {
		// A read error part-way changes nothing (R16), nor does a panic:
		// the status decides, and a body that panicked is read no more.
		raw, ok := readBody(resp.Body, maxErrorBody, s.log)
		r.text = clip(s.redact(excerpt(raw)))
		if !ok {
			return r, nil
		}
	}
	drain(resp.Body, maxDrain, s.log) // R56
	return r, nil
}

// redacted is what replaces the write key in server text.
const redacted = "[redacted]"

// redact removes the write key from text the server sent (R18): the key
// itself, as written in the JSON body, and the Authorization credentials.
func (s *sender) redact(text string) string {
	for _, secret := range s.secrets {
		if secret != "" && strings.Contains(text, secret) {
			text = strings.ReplaceAll(text, secret, redacted)
		}
	}
	return text
}

// redactErr returns err with the write key removed from its text; errors.Is
// and errors.As still see the original chain.
func (s *sender) redactErr(err error) error {
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

func clip(s string) string {
	if len(s) <= maxExcerpt {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	cut := maxExcerpt
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "\uFFFD") + "…"
}

// checkRedirect follows 307 and 308 only, and only within the origin
// (R11): to the same scheme, host and port, or from http to https on the
// same host (default ports, or the same explicit port). Go would re-send
// 301, 302 and 303 as a body-less GET whose 200 would look like delivery,
// and a redirect anywhere else would carry the write key (in the body and
// Authorization) to a server the user did not configure: those responses
// reach the classifier as redirect failures (R10), and nothing is sent to
// the other location. A followed request keeps the original Authorization.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) == 0 || len(via) >= 10 || req.Response == nil {
		return http.ErrUseLastResponse
	}
	switch req.Response.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return http.ErrUseLastResponse
	}
	origin, prev := via[0].URL, via[len(via)-1].URL
	if !sameOrigin(origin, req.URL) && !upgrade(origin, req.URL) {
		return http.ErrUseLastResponse
	}
	if prev.Scheme == "https" && req.URL.Scheme != "https" {
		return http.ErrUseLastResponse // no downgrade after an upgrade
	}
	if auth, ok := via[0].Header["Authorization"]; ok {
		req.Header["Authorization"] = auth
	}
	return nil
}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return a.Scheme == b.Scheme && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// upgrade reports whether to is from on https instead of http: the same
// host, and the default ports (80 → 443) or the same explicit port.
func upgrade(from, to *url.URL) bool {
	if from.Scheme != "http" || to.Scheme != "https" || !strings.EqualFold(from.Hostname(), to.Hostname()) {
		return false
	}
	return port(from) == "80" && port(to) == "443" || from.Port() != "" && from.Port() == to.Port()
}

// port is u's port, or the default port of its scheme.
func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch u.Scheme {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

func newHTTPClient(s *settings) *http.Client {
	var c http.Client
	if s.httpClient != nil {
		c = *s.httpClient
	} else if dt, ok := http.DefaultTransport.(*http.Transport); !ok {
		// Replaced (httpmock.Activate does so in tests): used as it is.
		c.Transport = http.DefaultTransport
	} else {
		t := dt.Clone()
		// A typical batch (250 events of up to ~500 B) then leaves in one
		// write. A body larger than the buffer makes net/http copy the rest
		// through a fresh 32 KB buffer on every request.
		t.WriteBufferSize = 128 << 10
		// Every consumer may hold a connection; with net/http's default of
		// 2 idle connections per host, the others would be closed after
		// each request and dialled again for the next one.
		t.MaxIdleConnsPerHost = max(s.Consumers, http.DefaultMaxIdleConnsPerHost)
		c.Transport = t
	}
	c.CheckRedirect = checkRedirect
	return &c
}

// outcome is the decision for one attempt, as classify takes it from the
// answer alone. A new way of handling an answer is a new outcome here,
// decided in classify, and a case in consumer.attempt; consumer.adapt may
// still take a batch over before its outcome is acted on, for what the
// server's refusals teach (R66–R68).
type outcome int

const (
	outcomeDelivered   outcome = iota // 2xx (R9)
	outcomeFailed                     // non-retryable: one attempt, OnError
	outcomeRetry                      // counted retry with backoff (R26)
	outcomeRateLimited                // usable Retry-After: re-queue and gate (R31, R32)
	outcomeSplit                      // 413 of more than one event: send again as two halves (R3)
)

// verdict is the classification of one attempt.
type verdict struct {
	outcome    outcome
	kind       ErrorKind      // for HTTP failures
	delay      time.Duration  // for outcomeRateLimited: capped Retry-After
	retryAfter retryAfterKind // how the header parsed, for logging (R51)
	dropToken  bool           // the bearer token of the attempt is not to be used again (R50)
	err        error          // *HTTPError or *TransportError, unless delivered
}

// attemptOf is what classify needs to know about the attempt besides its
// answer.
type attemptOf struct {
	now    time.Time // wall clock at the answer, for HTTP-dates only
	events int       // events in the batch (a lone event is never split, R3)
	bearer bool      // the attempt carried an OAuth bearer token (R50)
}

// classify decides the outcome of one attempt from what it got: a
// response (err == nil) or a transport error; the body never matters (R3,
// R9–R16, R25, R50). It looks at the answer alone: consumer.adapt may then
// cut a batch of several events instead of failing it on a 400 (R66) or
// retrying it whole after repeated 429s (R68).
func classify(r response, err error, a attemptOf) verdict {
	if err != nil {
		te := &TransportError{Err: err, Retryable: classifyTransportError(err)}
		if !te.Retryable {
			return verdict{outcome: outcomeFailed, err: te} // R14: deterministic on the client
		}
		return verdict{outcome: outcomeRetry, err: te}
	}
	v := classifyResponse(r.status, r.retryAfter, r.hasRA, a.now)
	switch {
	case r.status == http.StatusRequestEntityTooLarge && a.events > 1:
		v.outcome = outcomeSplit // R3: the server stored nothing
	case !a.bearer:
	case r.status == http.StatusNetworkAuthenticationRequired:
		// R50: with OAuth a 511 asks for a fresh token; it is a counted retry.
		v.outcome, v.kind, v.dropToken = outcomeRetry, KindRetryable, true
	case r.status == http.StatusBadRequest, r.status == http.StatusUnauthorized, r.status == http.StatusForbidden:
		v.dropToken = true // R50: still a failure, but the next batch gets a fresh token
	}
	if v.outcome != outcomeDelivered {
		v.err = &HTTPError{StatusCode: r.status, Kind: v.kind, Message: r.text, Location: r.location}
	}
	return v
}

// classifyResponse decides from the status and the Retry-After header alone;
// the body never matters (R9–R16, R25). now is the wall clock, for
// HTTP-dates only.
func classifyResponse(status int, retryAfter string, hasRetryAfter bool, now time.Time) verdict {
	switch {
	case status >= 200 && status <= 299:
		return verdict{outcome: outcomeDelivered}
	case status >= 300 && status <= 399:
		return verdict{outcome: outcomeFailed, kind: KindRedirect} // R10
	case !retryableStatus(status):
		return verdict{outcome: outcomeFailed, kind: KindNonRetryable} // R12, R13, R15
	}
	v := verdict{outcome: outcomeRetry, kind: KindRetryable}
	if hasRetryAfter {
		v.delay, v.retryAfter = parseRetryAfter(retryAfter, now) // parsed once (R19)
		if v.retryAfter == retryAfterUsable {
			v.outcome = outcomeRateLimited
		} else {
			v.delay = 0
		}
	}
	return v
}

func retryableStatus(status int) bool {
	switch status {
	case 408, 429, 460:
		return true
	case 410:
		// R58: 410 is retried, bounded by MaxRetries and
		// MaxTotalBackoffDuration, for parity with the conformance suite.
		return true
	case 501, 505, 511:
		return false // R13; with OAuth, classify makes 511 a counted retry with a fresh token (R50)
	}
	return status >= 500 && status <= 599
}

// classifyTransportError reports whether an error without a response is
// worth retrying (R14): everything is, except errors that are deterministic
// on the client.
func classifyTransportError(err error) (retryable bool) {
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
