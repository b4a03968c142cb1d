// Package faultserver is a fault-injecting, recording stand-in for the
// tracking API, for tests and examples of github.com/relaykit/analytics-go.
//
// A Server listens on a loopback address only. It records every request it
// receives (arrival time, method, path, headers, raw and decoded body, the
// batch's messageIds) as soon as the request body has been read, and then
// answers from a per-scenario script: an ordered list of responses (status,
// headers, body, a delay before the headers, "close the socket without a
// response", "send the headers and then truncate the body", "answer 101
// Switching Protocols and hold the connection"). When the script
// runs out its last entry repeats. Rules can key a script on the messageId a
// batch carries, or on the request path, and Options.Respond allows a
// programmatic answer (for example seeded random faults). In gateway mode the
// server first rejects malformed requests the way a real ingestion gateway
// would. With Options.Token it also serves an OAuth 2.0 token endpoint that
// verifies private-key JWT client assertions (token.go).
//
// This is the harness of docs/delivery.md §6.1:
//
//	srv, err := faultserver.Start(faultserver.Options{
//		Script: []faultserver.Response{
//			faultserver.RetryAfter(429, "1"),
//			{Status: 500},
//			{Status: 200, Body: "{}"},
//		},
//	})
//	if err != nil { ... }
//	defer srv.Close()
//	// point the SDK at srv.URL(), then inspect srv.Requests() / srv.Delivered().
//
// All methods of Server are safe for concurrent use.
package faultserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// DefaultMaxBodyBytes is the gateway-mode limit of a decoded request body
// when Options.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 500_000

// maxReadBytes bounds how much of a request body (raw, and after gunzip) the
// server reads and records, so a runaway client cannot exhaust memory.
const maxReadBytes = 64 << 20

// ErrClosed is returned by the Wait methods when the server has been closed
// before the awaited condition became true.
var ErrClosed = errors.New("faultserver: server closed")

// Response describes how the server answers one request.
//
// The zero value answers 200 with an empty body.
type Response struct {
	// Status is the status code; 0 means 200. Codes from 200 to 999 are
	// supported (for example 600 or 999); for a 1xx answer use
	// SwitchProtocols.
	Status int
	// Header holds response headers, for example {"Retry-After": "2"}. Keys
	// are canonicalised; values are sent verbatim, and an empty value is
	// still sent as an empty header line ("Retry-After: ").
	Header map[string]string
	// Body is the response body. When it is non-empty, valid JSON and Header
	// has no Content-Type, the server sends Content-Type: application/json.
	Body string
	// Delay holds the request this long after its body has been read (and
	// recorded), before anything is written. The wait is abandoned when the
	// client goes away or the server is closed; the request is then marked
	// Aborted and the connection is closed without a response.
	Delay time.Duration
	// RecordThenDelay documents the default behaviour and has no effect:
	// every request is recorded as soon as its body has been read, before
	// Delay starts.
	RecordThenDelay bool
	// CloseWithoutResponse hijacks the connection after the request has been
	// read (and after Delay) and closes it without sending a status line.
	CloseWithoutResponse bool
	// TruncateBody sends the status line and headers with a Content-Length
	// of ContentLength (or len(Body)+1000 when ContentLength is 0), writes
	// Body, and closes the connection, so the client's body read fails.
	TruncateBody bool
	// ContentLength is the Content-Length announced with TruncateBody.
	ContentLength int
	// SwitchProtocols answers "101 Switching Protocols" (with Connection:
	// Upgrade, Upgrade: h2c and the headers of Header) after Delay, and then
	// holds the connection open, sending nothing more, until the client
	// closes it or the server is closed. Status and Body are ignored; the
	// record's Status is 101 and Finished is set when the connection ends.
	SwitchProtocols bool
}

// SwitchingProtocols returns a response that answers 101 Switching
// Protocols and holds the connection (see Response.SwitchProtocols).
func SwitchingProtocols() Response {
	return Response{SwitchProtocols: true}
}

// StatusCode returns the status the response answers with (Status, or 200
// when Status is 0).
func (r Response) StatusCode() int {
	if r.Status == 0 {
		return http.StatusOK
	}
	return r.Status
}

// Reply returns a response with the given status and body.
func Reply(status int, body string) Response {
	return Response{Status: status, Body: body}
}

// RetryAfter returns a response with the given status and a Retry-After
// header set verbatim to value (which may be empty or malformed on purpose).
func RetryAfter(status int, value string) Response {
	return Response{Status: status, Header: map[string]string{"Retry-After": value}}
}

// RedirectTo returns a redirect response with the given status (e.g. 307)
// and Location header. An empty location sends no Location header at all.
func RedirectTo(status int, location string) Response {
	r := Response{Status: status}
	if location != "" {
		r.Header = map[string]string{"Location": location}
	}
	return r
}

// Rule answers the requests it matches from its own list of responses. Rules
// are checked in order before the default script; the first matching rule
// wins, and requests it matches do not advance the script.
type Rule struct {
	// MessageID matches a request whose batch contains this messageId; ""
	// matches any request.
	MessageID string
	// Path matches a request with exactly this URL path (e.g.
	// "/v1/batch-alt"); "" matches any path.
	Path string
	// Responses are consumed in order by the requests that match the rule;
	// the last one repeats. Empty means 200 "{}".
	Responses []Response
}

func (r Rule) matches(req *Request) bool {
	if r.Path != "" && r.Path != req.Path {
		return false
	}
	if r.MessageID == "" {
		return true
	}
	for _, id := range req.MessageIDs {
		if id == r.MessageID {
			return true
		}
	}
	return false
}

// Options configures a Server. The order of decision for a request is:
// the token endpoint (when Token is set and the path is its path), the
// bearer check (Token.RequireBearer), gateway checks (when Gateway),
// Respond, Rules, Script.
type Options struct {
	// Script holds responses by request index, counted over the requests
	// that reach the script (those not rejected by the gateway, not answered
	// by Respond and not matched by a Rule). When it is exhausted the last
	// entry repeats; empty means always 200 "{}".
	Script []Response
	// Rules are checked in order before Script; see Rule.
	Rules []Rule
	// Gateway makes the server reject bad input like a real ingestion
	// gateway before Respond, Rules and Script are consulted: a method other
	// than POST → 405; an unsupported Content-Encoding → 415; corrupt gzip →
	// 400; a decoded body larger than MaxBodyBytes → 413; invalid JSON or no
	// "batch" array → 400; a write key not in WriteKeys → 401; an event that
	// is not an object, or that has neither a userId nor an anonymousId
	// (for type "alias": userId and previousId) → 400 for the whole batch;
	// a batch of more than MaxEvents events → 429 without Retry-After. An
	// id counts as absent when it is not a string or is blank: empty after
	// removing white space and invisible characters (Blank), as
	// rudder-server's gateway checks. Each rejection has a JSON body
	// {"code":"...","message":"..."}; Request.Rejected holds the code.
	Gateway bool
	// WriteKeys lists the write keys the gateway accepts; empty accepts any
	// (including none). The key is taken from the Authorization Basic user
	// name, falling back to the body's writeKey.
	WriteKeys []string
	// MaxBodyBytes is the gateway limit of the decoded body; 0 means
	// DefaultMaxBodyBytes. It stays fixed: every larger body gets a 413.
	MaxBodyBytes int
	// MaxEvents, when positive, makes the gateway answer a batch of more
	// than MaxEvents events with 429 and no Retry-After (code
	// "too_many_events"), as a gateway whose rate limit counts events does
	// when one request alone is over the limit: waiting never helps such a
	// batch. 0 means no limit.
	MaxEvents int
	// Respond, when set, is asked first (after the gateway) for every
	// request, with the request's index and a copy of its record. Returning
	// false falls back to Rules and Script. Calls are serialised by the
	// server, so Respond need not be safe for concurrent use; it may call
	// Server methods other than Close.
	Respond func(index int, r *Request) (Response, bool)
	// Token, when set, turns on the OAuth token endpoint (see TokenOptions
	// and token.go). Token requests are answered before anything else and
	// recorded apart (TokenRequests).
	Token *TokenOptions
}

func (o Options) clone() Options {
	c := o
	c.Script = append([]Response(nil), o.Script...)
	c.WriteKeys = append([]string(nil), o.WriteKeys...)
	c.Rules = make([]Rule, len(o.Rules))
	for i, r := range o.Rules {
		r.Responses = append([]Response(nil), r.Responses...)
		c.Rules[i] = r
	}
	c.Token = o.Token.clone()
	return c
}

// Request is the record of one request received by the server. Records
// returned by Server methods are copies; their slices and maps are shared
// with the server and must be treated as read-only.
type Request struct {
	// Index is the 0-based position of the request in arrival order
	// (the order in which request bodies finished reading).
	Index int
	// Arrived is time.Now() when the handler started (carries the monotonic
	// clock reading).
	Arrived time.Time
	// Responded is when the status line and headers were about to be
	// written; zero when no response was sent.
	Responded time.Time
	// Finished is when the server was done with the request: the response
	// was written and flushed, the connection was closed, or the response
	// was abandoned.
	Finished time.Time
	// Method is the HTTP method.
	Method string
	// Path is the URL path.
	Path string
	// Header holds the request headers as received.
	Header http.Header
	// RawBody is the body as received.
	RawBody []byte
	// Body is the decoded body: RawBody gunzipped when Content-Encoding is
	// gzip, RawBody itself when there is no Content-Encoding, nil when the
	// gzip data is corrupt or the encoding is unsupported.
	Body []byte
	// MessageIDs lists batch[].messageId in order ("" for an event without
	// a string messageId).
	MessageIDs []string
	// Events holds the decoded batch events in order (nil for an element
	// that is not a JSON object).
	Events []map[string]any
	// SentAt is the body's sentAt when it is a string.
	SentAt string
	// WriteKey is the Authorization Basic user name, or the body's writeKey
	// when there is no usable Basic Authorization header.
	WriteKey string
	// BodyWriteKey is the body's writeKey when it is a string.
	BodyWriteKey string
	// Status is the status answered; 0 when no status line was sent
	// (closed without response, aborted, or still pending).
	Status int
	// Aborted reports that a held response was abandoned because the
	// client went away or the server was closed, or the body read failed.
	Aborted bool
	// Rejected is the gateway error code when the gateway rejected the
	// request, "" otherwise.
	Rejected string

	// parse results used by the gateway.
	encoding encodingState
	jsonErr  string
	hasBatch bool
	basicKey string
	hasBasic bool
}

// Done reports whether the server has finished with the request.
func (r Request) Done() bool { return !r.Finished.IsZero() }

// Delivered reports whether the request was answered with a 2xx status.
func (r Request) Delivered() bool { return r.Status >= 200 && r.Status <= 299 }

type encodingState int

const (
	encodingOK encodingState = iota
	encodingCorrupt
	encodingUnsupported
)

// Server is a running fault-injecting server. Create it with Start or
// StartOn and stop it with Close.
type Server struct {
	ln        net.Listener
	srv       *http.Server
	url       string
	serveDone chan struct{}
	done      chan struct{} // closed by Close: aborts held responses

	respondMu sync.Mutex // serialises Options.Respond calls

	mu        sync.Mutex
	opts      Options
	scriptPos int
	rulePos   []int
	reqs      []*Request
	changed   chan struct{} // closed and replaced on every state change
	closed    bool          // Close started: no new handlers
	stopped   bool          // Close finished: state is final
	hijacked  map[net.Conn]struct{}
	handlers  sync.WaitGroup
	token     tokenState // the token endpoint (token.go)

	closeOnce sync.Once
}

// Start starts a server on a free port of 127.0.0.1.
func Start(opts Options) (*Server, error) {
	return StartOn("127.0.0.1:0", opts)
}

// StartOn starts a server listening on addr, which must name a loopback
// address ("127.0.0.1:PORT", "[::1]:PORT" or "localhost:PORT"); use it with
// ReserveAddr to start a listener late.
func StartOn(addr string, opts Options) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("faultserver: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("faultserver: address %q is not loopback", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultserver: %w", err)
	}
	s := &Server{
		ln:        ln,
		url:       "http://" + ln.Addr().String(),
		serveDone: make(chan struct{}),
		done:      make(chan struct{}),
		changed:   make(chan struct{}),
		hijacked:  make(map[net.Conn]struct{}),
	}
	s.setOptionsLocked(opts)
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.handle),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() {
		defer close(s.serveDone)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// ReserveAddr returns a free "127.0.0.1:PORT" address. The port is closed
// again before returning, so connecting to it is refused until StartOn
// listens there (scenario S10, run B).
func ReserveAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("faultserver: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("faultserver: %w", err)
	}
	return addr, nil
}

// URL returns the base URL, "http://127.0.0.1:PORT", without a trailing
// slash.
func (s *Server) URL() string { return s.url }

// Addr returns the listening address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// SetOptions replaces the options at runtime. The script position and the
// rule positions restart at 0; recorded requests are kept. Requests already
// past their decision are not affected.
func (s *Server) SetOptions(opts Options) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setOptionsLocked(opts)
}

func (s *Server) setOptionsLocked(opts Options) {
	s.opts = opts.clone()
	s.scriptPos = 0
	s.rulePos = make([]int, len(s.opts.Rules))
}

// Requests returns a copy of the records of all requests received so far,
// in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.copyLocked()
}

func (s *Server) copyLocked() []Request {
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = *r
	}
	return out
}

// WaitRequests blocks until at least n requests have been recorded (a
// request is recorded when its body has been read, before it is answered)
// and returns all records. It returns the records so far with ctx.Err() when
// ctx ends first, or with ErrClosed when the server is closed first.
func (s *Server) WaitRequests(ctx context.Context, n int) ([]Request, error) {
	return s.waitFor(ctx, func() bool { return len(s.reqs) >= n })
}

// WaitFinished blocks until at least n requests have been recorded and the
// server is done with the first n of them (answered, closed or aborted), so
// their Status, Responded and Finished fields are final. Errors as for
// WaitRequests.
func (s *Server) WaitFinished(ctx context.Context, n int) ([]Request, error) {
	return s.waitFor(ctx, func() bool {
		if len(s.reqs) < n {
			return false
		}
		for _, r := range s.reqs[:n] {
			if r.Finished.IsZero() {
				return false
			}
		}
		return true
	})
}

func (s *Server) waitFor(ctx context.Context, cond func() bool) ([]Request, error) {
	for {
		s.mu.Lock()
		if cond() {
			out := s.copyLocked()
			s.mu.Unlock()
			return out, nil
		}
		if s.stopped {
			out := s.copyLocked()
			s.mu.Unlock()
			return out, ErrClosed
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return s.Requests(), ctx.Err()
		}
	}
}

// Delivered maps each messageId to the number of requests answered with a
// 2xx status that carried it (a request counts once per messageId).
func (s *Server) Delivered() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int)
	for _, r := range s.reqs {
		if !r.Delivered() {
			continue
		}
		seen := make(map[string]bool, len(r.MessageIDs))
		for _, id := range r.MessageIDs {
			if id == "" || seen[id] {
				continue
			}
			seen[id] = true
			out[id]++
		}
	}
	return out
}

// Close stops the server: it closes the listener and every connection
// (including hijacked ones), aborts held responses, and waits for all
// request handlers to return. It is safe to call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		for c := range s.hijacked {
			_ = c.Close()
		}
		s.mu.Unlock()
		close(s.done)
		_ = s.srv.Close()
		s.handlers.Wait()
		<-s.serveDone
		s.mu.Lock()
		s.stopped = true
		s.notifyLocked()
		s.mu.Unlock()
	})
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// handle is the HTTP handler for every path and method.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		panic(http.ErrAbortHandler) // close the connection, send nothing
	}
	s.handlers.Add(1)
	opts := s.opts
	s.mu.Unlock()
	defer s.handlers.Done()
	if opts.Token.serves(r) {
		s.serveToken(w, r, opts.Token)
		return
	}

	raw, readErr := io.ReadAll(io.LimitReader(r.Body, maxReadBytes))
	rec := &Request{
		Arrived: arrived,
		Method:  r.Method,
		Path:    r.URL.Path,
		Header:  r.Header.Clone(),
		RawBody: raw,
	}
	if user, _, ok := r.BasicAuth(); ok {
		rec.basicKey, rec.hasBasic = user, true
	}
	parseBody(rec)

	s.mu.Lock()
	rec.Index = len(s.reqs)
	s.reqs = append(s.reqs, rec)
	s.notifyLocked()
	opts = s.opts
	s.mu.Unlock()

	if readErr != nil {
		s.abort(rec)
	}

	resp := s.decide(rec, opts)
	s.serve(w, r, rec, resp)
}

// decide picks the response: Token.RequireBearer, gateway, Respond, Rules,
// Script.
func (s *Server) decide(rec *Request, opts Options) Response {
	if resp, ok := s.bearerCheck(rec, opts); !ok {
		s.mu.Lock()
		rec.Rejected = "invalid_token"
		s.mu.Unlock()
		return resp
	}
	if opts.Gateway {
		if resp, code, ok := gatewayCheck(rec, opts); !ok {
			s.mu.Lock()
			rec.Rejected = code
			s.mu.Unlock()
			return resp
		}
	}
	if opts.Respond != nil {
		s.mu.Lock()
		cp := *rec
		s.mu.Unlock()
		s.respondMu.Lock()
		resp, ok := opts.Respond(cp.Index, &cp)
		s.respondMu.Unlock()
		if ok {
			return resp
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, rule := range s.opts.Rules {
		if rule.matches(rec) {
			pos := s.rulePos[i]
			s.rulePos[i]++
			return pick(rule.Responses, pos)
		}
	}
	pos := s.scriptPos
	s.scriptPos++
	return pick(s.opts.Script, pos)
}

func pick(list []Response, i int) Response {
	if len(list) == 0 {
		return Response{Body: "{}"}
	}
	if i >= len(list) {
		return list[len(list)-1]
	}
	return list[i]
}

// serve carries out resp for rec.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, rec *Request, resp Response) {
	if !s.hold(r, resp.Delay) {
		s.abort(rec)
	}
	switch {
	case resp.CloseWithoutResponse:
		conn := s.hijack(w, rec)
		s.dropConn(conn)
		s.finish(rec)
	case resp.TruncateBody:
		s.truncated(w, rec, resp)
	case resp.SwitchProtocols:
		s.switchProtocols(w, rec, resp)
	default:
		h := w.Header()
		setHeaders(h, resp)
		status := resp.StatusCode()
		s.markResponded(rec, status)
		w.WriteHeader(status)
		if resp.Body != "" {
			_, _ = io.WriteString(w, resp.Body) // fails harmlessly for 204/304
		}
		_ = http.NewResponseController(w).Flush()
		s.finish(rec)
	}
}

// hold waits d before an answer is written; false when the client went
// away or the server was closed first.
func (s *Server) hold(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-s.done:
	}
	return false
}

// update changes the server's state with f under s.mu and wakes the
// waiters (waitFor).
func (s *Server) update(f func()) {
	s.mu.Lock()
	f()
	s.notifyLocked()
	s.mu.Unlock()
}

// abort marks rec aborted and closes the connection without a response.
func (s *Server) abort(rec *Request) {
	s.mu.Lock()
	rec.Aborted = true
	rec.Finished = time.Now()
	s.notifyLocked()
	s.mu.Unlock()
	panic(http.ErrAbortHandler)
}

func (s *Server) markResponded(rec *Request, status int) {
	s.mu.Lock()
	rec.Status = status
	rec.Responded = time.Now()
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *Server) finish(rec *Request) {
	s.mu.Lock()
	rec.Finished = time.Now()
	s.notifyLocked()
	s.mu.Unlock()
}

// hijack takes over the connection and tracks it so Close can close it. On
// failure the request is aborted.
func (s *Server) hijack(w http.ResponseWriter, rec *Request) net.Conn {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.abort(rec)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		s.abort(rec)
	}
	s.hijacked[conn] = struct{}{}
	s.mu.Unlock()
	return conn
}

func (s *Server) dropConn(conn net.Conn) {
	_ = conn.Close()
	s.mu.Lock()
	delete(s.hijacked, conn)
	s.mu.Unlock()
}

// truncated writes the status line, headers announcing more body than is
// sent, the body, and closes the connection.
func (s *Server) truncated(w http.ResponseWriter, rec *Request, resp Response) {
	conn := s.hijack(w, rec)
	defer s.dropConn(conn)
	status := resp.StatusCode()
	n := resp.ContentLength
	if n == 0 {
		n = len(resp.Body) + 1000
	}
	h := http.Header{}
	setHeaders(h, resp)
	h.Del("Content-Length")
	h.Del("Transfer-Encoding")
	var b bytes.Buffer
	text := http.StatusText(status)
	if text == "" {
		text = "status code " + strconv.Itoa(status)
	}
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", status, text)
	_ = h.Write(&b)
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", n)
	b.WriteString(resp.Body)
	s.markResponded(rec, status)
	_, _ = conn.Write(b.Bytes())
	s.finish(rec)
}

// switchProtocols writes a 101 status line and holds the connection until
// the client closes it or Close closes it.
func (s *Server) switchProtocols(w http.ResponseWriter, rec *Request, resp Response) {
	conn := s.hijack(w, rec)
	defer s.dropConn(conn)
	h := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"h2c"}}
	for k, v := range resp.Header {
		h[textproto.CanonicalMIMEHeaderKey(k)] = []string{v}
	}
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	_ = h.Write(&b)
	b.WriteString("\r\n")
	s.markResponded(rec, http.StatusSwitchingProtocols)
	if _, err := conn.Write(b.Bytes()); err == nil {
		_, _ = io.Copy(io.Discard, conn) // hold: returns when either side closes
	}
	s.finish(rec)
}

// TokenURL returns the token endpoint's base URL for the SDK's
// OAuthConfig.AuthServer: the server's URL (the SDK appends "/token").
func (s *Server) TokenURL() string { return s.url }

// TokenRequests returns a copy of the records of all token requests so far.
func (s *Server) TokenRequests() []TokenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token.records()
}

// WaitTokenRequests blocks until at least n token requests have been
// answered (or abandoned) and returns all records; errors as for
// WaitRequests.
func (s *Server) WaitTokenRequests(ctx context.Context, n int) ([]TokenRequest, error) {
	_, err := s.waitFor(ctx, func() bool { return s.token.finished(n) })
	return s.TokenRequests(), err
}

// serveToken answers one request to the token endpoint: token.go verifies
// it and decides the answer, which is served here as the tracking API's
// are, except that CloseWithoutResponse and an abandoned Delay close the
// connection without hijacking it and that TruncateBody and
// SwitchProtocols are not served.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request, o *TokenOptions) {
	rec := newTokenRequest(r, o)
	var resp Response
	s.update(func() { resp = s.token.answer(rec, o) })
	defer s.update(rec.finish)
	if !s.hold(r, resp.Delay) || resp.CloseWithoutResponse {
		panic(http.ErrAbortHandler) // closes the connection, sends nothing
	}
	h := w.Header()
	setHeaders(h, resp)
	h.Set("Cache-Control", "no-store")
	status := resp.StatusCode()
	s.update(func() { rec.answered(status) })
	w.WriteHeader(status)
	_, _ = io.WriteString(w, resp.Body)
}

// bearerCheck applies TokenOptions.RequireBearer to a tracking API request;
// ok is false with the rejection when the request has no valid token.
func (s *Server) bearerCheck(rec *Request, opts Options) (Response, bool) {
	s.mu.Lock()
	ok := s.token.admits(opts.Token, rec.Header.Get("Authorization"), time.Now())
	s.mu.Unlock()
	if ok {
		return Response{}, true
	}
	return Response{
		Status: http.StatusUnauthorized,
		Body:   `{"code":"invalid_token","message":"missing, unknown or expired bearer token"}`,
	}, false
}

// URLAs returns the server's base URL with host in place of 127.0.0.1,
// for example "http://localhost:PORT": a name that resolves to the same
// listener but is another host to an HTTP client (a redirect there crosses
// hosts).
func (s *Server) URLAs(host string) string {
	_, port, _ := net.SplitHostPort(s.Addr())
	return "http://" + net.JoinHostPort(host, port)
}

func setHeaders(h http.Header, resp Response) {
	for k, v := range resp.Header {
		h[textproto.CanonicalMIMEHeaderKey(k)] = []string{v}
	}
	if _, ok := h["Content-Type"]; !ok && resp.Body != "" && json.Valid([]byte(resp.Body)) {
		h.Set("Content-Type", "application/json")
	}
}

// parseBody fills the decoded fields of rec from rec.RawBody.
func parseBody(rec *Request) {
	switch enc := strings.ToLower(strings.TrimSpace(rec.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		rec.Body = rec.RawBody
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(rec.RawBody))
		if err != nil {
			rec.encoding = encodingCorrupt
			break
		}
		body, err := io.ReadAll(io.LimitReader(zr, maxReadBytes))
		if err != nil {
			rec.encoding = encodingCorrupt
			break
		}
		rec.Body = body
	default:
		rec.encoding = encodingUnsupported
	}
	if rec.Body == nil && rec.encoding != encodingOK {
		return
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body, &top); err != nil || top == nil {
		if err == nil {
			err = errors.New("body is not a JSON object")
		}
		rec.jsonErr = err.Error()
	}
	var batch []json.RawMessage
	if raw, ok := top["batch"]; ok && json.Unmarshal(raw, &batch) == nil && batch != nil {
		rec.hasBatch = true
	}
	rec.MessageIDs = make([]string, 0, len(batch))
	rec.Events = make([]map[string]any, 0, len(batch))
	for _, raw := range batch {
		var ev map[string]any
		_ = json.Unmarshal(raw, &ev)
		id, _ := ev["messageId"].(string)
		rec.MessageIDs = append(rec.MessageIDs, id)
		rec.Events = append(rec.Events, ev)
	}
	_ = json.Unmarshal(top["sentAt"], &rec.SentAt)
	_ = json.Unmarshal(top["writeKey"], &rec.BodyWriteKey)
	if rec.hasBasic {
		rec.WriteKey = rec.basicKey
	} else {
		rec.WriteKey = rec.BodyWriteKey
	}
}

// gatewayCheck applies the gateway rules; ok is false with the rejection
// response and its code when the request is rejected.
func gatewayCheck(rec *Request, opts Options) (resp Response, code string, ok bool) {
	reject := func(status int, code, msg string) (Response, string, bool) {
		body, _ := json.Marshal(map[string]string{"code": code, "message": msg})
		r := Response{Status: status, Body: string(body), Header: map[string]string{"Content-Type": "application/json"}}
		if status == http.StatusMethodNotAllowed {
			r.Header["Allow"] = http.MethodPost
		}
		return r, code, false
	}
	if rec.Method != http.MethodPost {
		return reject(http.StatusMethodNotAllowed, "method_not_allowed", "method "+rec.Method+" is not allowed; use POST")
	}
	switch rec.encoding {
	case encodingUnsupported:
		return reject(http.StatusUnsupportedMediaType, "unsupported_encoding", "unsupported Content-Encoding "+strconv.Quote(rec.Header.Get("Content-Encoding")))
	case encodingCorrupt:
		return reject(http.StatusBadRequest, "invalid_encoding", "request body is not valid gzip")
	}
	limit := opts.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	if len(rec.Body) > limit {
		return reject(http.StatusRequestEntityTooLarge, "payload_too_large", fmt.Sprintf("decoded body of %d bytes exceeds the limit of %d bytes", len(rec.Body), limit))
	}
	if rec.jsonErr != "" {
		return reject(http.StatusBadRequest, "invalid_json", "request body is not valid JSON: "+rec.jsonErr)
	}
	if !rec.hasBatch {
		return reject(http.StatusBadRequest, "missing_batch", `request body has no "batch" array`)
	}
	if len(opts.WriteKeys) > 0 {
		known := false
		for _, k := range opts.WriteKeys {
			if k == rec.WriteKey {
				known = true
				break
			}
		}
		if !known {
			return reject(http.StatusUnauthorized, "unauthorized", "invalid or missing write key")
		}
	}
	for i, ev := range rec.Events {
		if ev == nil {
			return reject(http.StatusBadRequest, "invalid_event", fmt.Sprintf("batch[%d] is not a JSON object", i))
		}
		str := func(k string) string {
			v, _ := ev[k].(string)
			if Blank(v) {
				return ""
			}
			return v
		}
		if t, _ := ev["type"].(string); t == "alias" {
			if str("userId") == "" || str("previousId") == "" {
				return reject(http.StatusBadRequest, "missing_identity", fmt.Sprintf("batch[%d]: alias needs userId and previousId", i))
			}
			continue
		}
		if str("userId") == "" && str("anonymousId") == "" {
			return reject(http.StatusBadRequest, "missing_identity", fmt.Sprintf("batch[%d] has neither userId nor anonymousId", i))
		}
	}
	if opts.MaxEvents > 0 && len(rec.Events) > opts.MaxEvents {
		return reject(http.StatusTooManyRequests, "too_many_events", fmt.Sprintf("batch of %d events is over the limit of %d", len(rec.Events), opts.MaxEvents))
	}
	return Response{}, "", true
}

// Blank reports whether id is empty once white space (unicode.IsSpace),
// characters that are not printable (unicode.IsPrint: controls, format
// characters such as U+200B and U+FEFF) and the printable fillers that
// render as nothing (U+034F, U+115F, U+1160, U+17B4, U+17B5, U+2800,
// U+3164, U+FFA0) are removed: the gateway's test of an absent id.
func Blank(id string) bool {
	for _, r := range id {
		switch r {
		case '\u034F', '\u115F', '\u1160', '\u17B4', '\u17B5', '\u2800', '\u3164', '\uFFA0':
			continue
		}
		if !unicode.IsSpace(r) && unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
