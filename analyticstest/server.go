package analyticstest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/internal/shared"
)

// maxRequestBody bounds how much of a request body the Server reads; the
// client never sends more than analytics.MaxBatchBytes.
const maxRequestBody = 4 << 20

// Server is a recording tracking endpoint on 127.0.0.1: it accepts
// POST /v1/batch as the tracking API does, decodes the body (gzip
// included), checks the Basic authorization and remembers every request.
// Pass URL to analytics.WithEndpoint. Create it with NewServer in a test or
// StartServer elsewhere. Its methods are safe for concurrent use.
//
// By default it answers 200 with {} to every well-formed request.
// SetResponse scripts another answer. Requests that are not
// POST /v1/batch get 404, those without Basic authorization (a non-empty
// user name and an empty password) or with a write key other than the one
// given to WithWriteKey get 401, and bodies that are not a JSON object
// with a "batch" array of objects get 400. Every request is recorded whatever the
// answer.
//
// It can play the faults of a real endpoint: FailNext and FailFor answer
// an error status, with Retry-After if asked, for a number of requests or
// for a while; Down refuses connections until Up listens again on the same
// address; SetBodyLimit answers 413 to larger bodies.
type Server struct {
	writeKey string
	now      func() time.Time

	mu        sync.Mutex
	http      *httptest.Server // the current listener's server (replaced by Up)
	addr      string
	down      bool
	closed    bool
	requests  []Request
	status    int
	body      string
	fault     Fault
	faultN    int       // requests still to fail (FailNext)
	faultTill time.Time // fail until then (FailFor)
	bodyLimit int
}

// Fault is an error answer of the Server: see FailNext and FailFor.
type Fault struct {
	// Status is the status code; default 503 Service Unavailable.
	Status int
	// RetryAfter, when positive, is sent as a Retry-After header, in
	// whole seconds rounded up (the form servers use; the client reads
	// it as the wait before its next attempt).
	RetryAfter time.Duration
	// Body is the response body; default {"message":"<status text>"}.
	Body string
}

func (f Fault) answer() (status int, body string, header http.Header) {
	status = f.Status
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	body = f.Body
	if body == "" {
		b, _ := json.Marshal(map[string]string{"message": http.StatusText(status)})
		body = string(b)
	}
	if f.RetryAfter > 0 {
		secs := (f.RetryAfter + time.Second - 1) / time.Second
		header = http.Header{"Retry-After": {strconv.FormatInt(int64(secs), 10)}}
	}
	return status, body, header
}

// Request is one request as the Server received and answered it.
type Request struct {
	Method string
	Path   string
	Header http.Header
	// Body is the request body, decompressed when it was sent with
	// Content-Encoding: gzip.
	Body []byte
	// Gzip reports whether the body was sent with Content-Encoding: gzip.
	Gzip bool
	// WriteKey is the user name of the Basic authorization ("" if absent).
	WriteKey string
	// Events are the decoded elements of the body's "batch" array, with
	// JSON numbers as float64.
	Events []map[string]any
	// RawEvents are the same elements as they were sent, one JSON object
	// each.
	RawEvents []json.RawMessage
	// Messages are the same elements decoded into the message types of
	// package analytics (analytics.Track, analytics.Identify, …, as
	// values), for typed assertions. Numbers in maps are float64; Context
	// includes the "library" entry the client adds; Timestamp is in UTC.
	// An element whose "type" is not one of the six, or whose fields do
	// not decode into the type's fields, is left out (Events and RawEvents
	// have it).
	Messages []analytics.Message
	// SentAt is the body's "sentAt" field.
	SentAt string
	// Status is the status code the Server answered.
	Status int
}

// RetryCount returns the X-Retry-Count header ("" on a first attempt).
func (r Request) RetryCount() string { return r.Header.Get("X-Retry-Count") }

// ServerOption configures a Server in NewServer or StartServer.
type ServerOption interface {
	applyServer(*Server)
}

type serverOptionFunc func(*Server)

func (f serverOptionFunc) applyServer(s *Server) { f(s) }

// WithWriteKey makes the Server answer 401 to requests whose Basic
// authorization carries another write key. Default: any non-empty write
// key is accepted.
func WithWriteKey(key string) ServerOption {
	return serverOptionFunc(func(s *Server) { s.writeKey = key })
}

// WithServerClock sets the clock with which FailFor measures its duration
// (default time.Now), for tests that control time.
func WithServerClock(now func() time.Time) ServerOption {
	return serverOptionFunc(func(s *Server) {
		if now != nil {
			s.now = now
		}
	})
}

// NewServer starts a Server for the duration of t: it is closed by
// t.Cleanup. It calls t.Fatal if no loopback port can be opened.
func NewServer(t testing.TB, opts ...ServerOption) *Server {
	t.Helper()
	s, err := StartServer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartServer starts a Server on a free port of 127.0.0.1. The caller must
// call Close.
func StartServer(opts ...ServerOption) (*Server, error) {
	s := &Server{status: http.StatusOK, body: "{}", now: time.Now}
	for _, o := range opts {
		if o != nil {
			o.applyServer(s)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("analyticstest: listen on 127.0.0.1: %w", err)
	}
	s.addr = l.Addr().String()
	s.start(l)
	return s, nil
}

// start serves on l; s.mu is held or s is not shared yet.
func (s *Server) start(l net.Listener) {
	s.http = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(s.serve)}}
	s.http.Start()
}

// URL returns the base URL (http://127.0.0.1:port), for
// analytics.WithEndpoint. It stays the same across Down and Up.
func (s *Server) URL() string { return "http://" + s.addr }

// Close shuts the Server down, closing its connections, and waits for
// requests in progress. It may be called more than once, and after Down.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	h := s.http
	s.mu.Unlock()
	h.Close()
}

// Down takes the Server off the network as a crashed endpoint goes: it
// stops listening, so new connections are refused, and closes the open
// ones, so requests in progress fail without an answer. Recorded requests
// are kept. Up brings it back. Down on a Server that is down or closed
// does nothing.
func (s *Server) Down() {
	s.mu.Lock()
	if s.down || s.closed {
		s.mu.Unlock()
		return
	}
	s.down = true
	h := s.http
	s.mu.Unlock()
	_ = h.Listener.Close()
	h.CloseClientConnections()
	h.Close()
}

// Up listens again on the address the Server had before Down, so URL is
// unchanged. It returns an error if the address cannot be listened on
// (taken by another program in the meantime) or the Server was closed; on
// a Server that is not down it does nothing.
func (s *Server) Up() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("analyticstest: Up on a closed Server")
	}
	if !s.down {
		return nil
	}
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("analyticstest: listen again on %s: %w", s.addr, err)
	}
	s.start(l)
	s.down = false
	return nil
}

// FailNext answers the next n requests to POST /v1/batch with f instead of
// the Server's response (they are recorded, with f's status). It replaces
// an earlier FailNext or FailFor; n ≤ 0 ends the fault.
func (s *Server) FailNext(n int, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault, s.faultN, s.faultTill = f, max(n, 0), time.Time{}
}

// FailFor answers every request to POST /v1/batch with f for d from now
// (by the clock of WithServerClock), then the Server's response again. It
// replaces an earlier FailNext or FailFor; d ≤ 0 ends the fault.
func (s *Server) FailFor(d time.Duration, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault, s.faultN, s.faultTill = f, 0, time.Time{}
	if d > 0 {
		s.faultTill = s.now().Add(d)
	}
}

// SetBodyLimit makes the Server answer 413 Request Entity Too Large to a
// request whose body, as sent (compressed with gzip), is longer than n
// bytes; such a request is recorded without its body. n ≤ 0 restores the
// default limit of 4 MiB, above anything the client sends.
func (s *Server) SetBodyLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bodyLimit = max(n, 0)
}

// SetResponse makes the Server answer later well-formed requests with
// status and body (default 200 and {}). Events of requests answered with a
// status outside 200–299 are not in Events or MessageIDs.
func (s *Server) SetResponse(status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

// Requests returns a copy of every request received, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	copy(out, s.requests)
	return out
}

// Events returns the events of every request answered 2xx, in arrival
// order. A batch that was sent more than once appears more than once; the
// real API drops such repeats by messageId.
func (s *Server) Events() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, r := range s.requests {
		if delivered(r.Status) {
			out = append(out, r.Events...)
		}
	}
	return out
}

// RawEvents returns the JSON of the events that Events returns, in the same
// order.
func (s *Server) RawEvents() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []json.RawMessage
	for _, r := range s.requests {
		if delivered(r.Status) {
			out = append(out, r.RawEvents...)
		}
	}
	return out
}

// Messages returns the events of every request answered 2xx, in arrival
// order, decoded into the message types of package analytics (see
// Request.Messages), so that assertions need no type assertions on maps. As
// with Events, a batch sent more than once appears more than once.
func (s *Server) Messages() []analytics.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []analytics.Message
	for _, r := range s.requests {
		if delivered(r.Status) {
			out = append(out, r.Messages...)
		}
	}
	return out
}

// Tracks returns the track events of Messages, in order.
func (s *Server) Tracks() []analytics.Track { return ofType[analytics.Track](s.Messages()) }

// Identifies returns the identify events of Messages, in order.
func (s *Server) Identifies() []analytics.Identify { return ofType[analytics.Identify](s.Messages()) }

// Groups returns the group events of Messages, in order.
func (s *Server) Groups() []analytics.Group { return ofType[analytics.Group](s.Messages()) }

// Pages returns the page events of Messages, in order.
func (s *Server) Pages() []analytics.Page { return ofType[analytics.Page](s.Messages()) }

// Screens returns the screen events of Messages, in order.
func (s *Server) Screens() []analytics.Screen { return ofType[analytics.Screen](s.Messages()) }

// Aliases returns the alias events of Messages, in order.
func (s *Server) Aliases() []analytics.Alias { return ofType[analytics.Alias](s.Messages()) }

func ofType[M analytics.Message](msgs []analytics.Message) []M {
	var out []M
	for _, m := range msgs {
		if v, ok := m.(M); ok {
			out = append(out, v)
		}
	}
	return out
}

// MessageIDs returns the messageId of each event that Events returns, in
// the same order.
func (s *Server) MessageIDs() []string {
	var ids []string
	for _, e := range s.Events() {
		id, _ := e["messageId"].(string)
		ids = append(ids, id)
	}
	return ids
}

// Reset forgets the recorded requests and restores the default response;
// it ends a fault of FailNext or FailFor and the limit of SetBodyLimit. It
// does not bring a Server that is down back up.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
	s.status, s.body = http.StatusOK, "{}"
	s.fault, s.faultN, s.faultTill, s.bodyLimit = Fault{}, 0, time.Time{}, 0
}

func delivered(status int) bool { return status >= 200 && status <= 299 }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rec := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}
	status, body := s.receive(w, r, &rec)
	s.mu.Lock()
	if status != http.StatusNotFound && s.faulty() {
		var h http.Header
		status, body, h = s.fault.answer()
		for k, v := range h {
			w.Header()[k] = v
		}
	}
	rec.Status = status
	s.requests = append(s.requests, rec)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// receive checks and decodes one request and returns the answer.
func (s *Server) receive(w http.ResponseWriter, r *http.Request, rec *Request) (int, string) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/batch" {
		return http.StatusNotFound, `{"message":"not found: the tracking API accepts POST /v1/batch"}`
	}
	user, password, ok := r.BasicAuth()
	rec.WriteKey = user
	if !ok || user == "" || password != "" {
		return http.StatusUnauthorized, `{"message":"missing Basic authorization with the write key as user name"}`
	}
	if s.writeKey != "" && user != s.writeKey {
		return http.StatusUnauthorized, `{"message":"invalid write key"}`
	}
	s.mu.Lock()
	limit := s.bodyLimit
	s.mu.Unlock()
	if limit == 0 {
		limit = maxRequestBody
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	if err != nil {
		return http.StatusRequestEntityTooLarge, `{"message":"body too large or unreadable"}`
	}
	if r.Header.Get("Content-Encoding") == "gzip" {
		rec.Gzip = true
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err == nil {
			raw, err = io.ReadAll(io.LimitReader(zr, maxRequestBody))
		}
		if err != nil {
			return http.StatusBadRequest, `{"message":"invalid gzip body"}`
		}
	}
	rec.Body = raw
	var payload struct {
		Batch  []json.RawMessage `json:"batch"`
		SentAt string            `json:"sentAt"`
	}
	if err := json.Unmarshal(raw, &payload); err != nil || payload.Batch == nil {
		return http.StatusBadRequest, `{"message":"body must be a JSON object with a batch array"}`
	}
	events := make([]map[string]any, len(payload.Batch))
	for i, e := range payload.Batch {
		if err := json.Unmarshal(e, &events[i]); err != nil || events[i] == nil {
			return http.StatusBadRequest, `{"message":"every element of batch must be a JSON object"}`
		}
		if m := decodeMessage(e); m != nil {
			rec.Messages = append(rec.Messages, m)
		}
	}
	rec.Events, rec.RawEvents, rec.SentAt = events, payload.Batch, payload.SentAt
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status, s.body
}

// faulty reports whether this request is answered with s.fault, and
// counts it; s.mu is held.
func (s *Server) faulty() bool {
	if s.faultN > 0 {
		s.faultN--
		return true
	}
	return !s.faultTill.IsZero() && s.now().Before(s.faultTill)
}

// decodeMessage returns the analytics message that raw encodes, or nil:
// the client's own decoder (the one that replays durable events).
func decodeMessage(raw json.RawMessage) analytics.Message {
	m, err := shared.Decode(raw)
	if err != nil {
		return nil
	}
	msg, _ := m.(analytics.Message)
	return msg
}
