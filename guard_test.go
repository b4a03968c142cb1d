package analytics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// misbehaving is a transport that misbehaves on its first `times` round
// trips and then behaves: it passes each request to api (which records it
// and answers 200), and for a misbehaving round trip hands the answer to
// bad instead.
type misbehaving struct {
	next  http.RoundTripper
	times int
	bad   func(req *http.Request) (*http.Response, error)
	n     atomic.Int32
}

func (m *misbehaving) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := m.next.RoundTrip(req)
	if int(m.n.Add(1)) > m.times {
		return resp, err
	}
	return m.bad(req)
}

// answer is a response with status and body, as a RoundTripper under test
// might build it.
func answer(status int, body io.ReadCloser) func(*http.Request) (*http.Response, error) {
	return func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: http.Header{},
			Body: body, Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
	}
}

// Bodies that misbehave.
type (
	readPanics   struct{ data string } // returns data, then panics
	readFails    struct{}
	closePanics  struct{ io.Reader }
	closeFails   struct{ io.Reader }
	allPanic     struct{}
	valuePanic   struct{}
	readerPanics struct{} // Read panics with an error value
)

func (r *readPanics) Read(p []byte) (int, error) {
	if r.data != "" {
		n := copy(p, r.data)
		r.data = r.data[n:]
		return n, nil
	}
	panic("body read exploded")
}
func (*readPanics) Close() error              { return nil }
func (readFails) Read([]byte) (int, error)    { return 0, errors.New("read failed") }
func (readFails) Close() error                { return nil }
func (closePanics) Close() error              { panic("body close exploded") }
func (closeFails) Close() error               { return errors.New("close failed") }
func (allPanic) Read([]byte) (int, error)     { panic("body read exploded") }
func (allPanic) Close() error                 { panic("body close exploded") }
func (valuePanic) Read([]byte) (int, error)   { panic(fmt.Errorf("wrapped: %w", io.ErrClosedPipe)) }
func (valuePanic) Close() error               { return nil }
func (readerPanics) Read([]byte) (int, error) { var p *strings.Reader; return p.Read(nil) } // nil dereference
func (readerPanics) Close() error             { return nil }

// stuck is a body whose Read blocks until Close, and whose Close panics
// (after it has ended the Read): only the attempt's timeout, which closes
// the body on a goroutine of its own, ends the attempt.
type stuck struct {
	once   sync.Once
	closed chan struct{}
}

func newStuck() io.ReadCloser { return &stuck{closed: make(chan struct{})} }

func (s *stuck) Read([]byte) (int, error) {
	<-s.closed
	return 0, errors.New("read on closed body")
}

func (s *stuck) Close() error {
	s.once.Do(func() { close(s.closed) })
	panic("body close exploded")
}

// transportCase is one way a transport misbehaves and what the client
// must make of it.
type transportCase struct {
	name string
	// bad answers a misbehaving round trip; a fresh body each call.
	bad func(req *http.Request) (*http.Response, error)
	// requests the client makes when the transport misbehaves twice and
	// then behaves: 1 when the status that was read decides at once, 3
	// when the misbehaviour is a retryable transport error (or a
	// retryable status).
	requests int
	// failed: the text of the error OnError gets (the status read was
	// not retryable); "" when the events are delivered.
	failed string
	// panics the client logs at ERROR per misbehaving attempt.
	panics int
	// one: the batch holds one event (a 400 of several is isolated,
	// R66, which is not what these cases are about).
	one bool
}

func status(code int, newBody func() io.ReadCloser) func(*http.Request) (*http.Response, error) {
	return func(req *http.Request) (*http.Response, error) {
		var b io.ReadCloser
		if newBody != nil {
			b = newBody()
		}
		return answer(code, b)(req)
	}
}

func transportCases() []transportCase {
	nilReader := func() io.ReadCloser { return io.NopCloser(nil) }
	dataThenPanic := func() io.ReadCloser { return &readPanics{data: `{"message":"partial"}`} }
	readPanic := func() io.ReadCloser { return &readPanics{} }
	return []transportCase{
		{name: "200, Body io.NopCloser(nil)", bad: status(200, nilReader), requests: 1, panics: 1},
		{name: "200, nil Body", bad: status(200, nil), requests: 1},
		{name: "200, Read panics", bad: status(200, readPanic), requests: 1, panics: 1},
		{name: "200, Read returns data then panics", bad: status(200, dataThenPanic), requests: 1, panics: 1},
		{name: "200, Read nil dereference", bad: status(200, func() io.ReadCloser { return readerPanics{} }), requests: 1, panics: 1},
		{name: "200, Read fails", bad: status(200, func() io.ReadCloser { return readFails{} }), requests: 1},
		{name: "200, Close fails", bad: status(200, func() io.ReadCloser { return closeFails{strings.NewReader("ok")} }), requests: 1},
		{name: "200, Close panics", bad: status(200, func() io.ReadCloser { return closePanics{strings.NewReader("ok")} }), requests: 1, panics: 1},
		{name: "200, Read and Close panic", bad: status(200, func() io.ReadCloser { return allPanic{} }), requests: 1, panics: 2},
		{name: "200, Read blocks until Close, which panics", bad: status(200, newStuck), requests: 1, panics: 2},
		{name: "200, nil Body with Content-Length", bad: func(req *http.Request) (*http.Response, error) {
			r, _ := answer(200, nil)(req)
			r.ContentLength = 10
			return r, nil
		}, requests: 3},
		{name: "500, Body io.NopCloser(nil)", bad: status(500, nilReader), requests: 3, panics: 1},
		{name: "500, nil Body", bad: status(500, nil), requests: 3},
		{name: "500, Read panics", bad: status(500, readPanic), requests: 3, panics: 1},
		{name: "503, Read returns data then panics", bad: status(503, dataThenPanic), requests: 3, panics: 1},
		{name: "500, Read panics with an error", bad: status(500, func() io.ReadCloser { return valuePanic{} }), requests: 3, panics: 1},
		{name: "500, Read fails", bad: status(500, func() io.ReadCloser { return readFails{} }), requests: 3},
		{name: "500, Close panics", bad: status(500, func() io.ReadCloser { return closePanics{strings.NewReader("down")} }), requests: 3, panics: 1},
		{name: "500, Read and Close panic", bad: status(500, func() io.ReadCloser { return allPanic{} }), requests: 3, panics: 2},
		{name: "500, Read blocks until Close, which panics", bad: status(500, newStuck), requests: 3, panics: 2},
		{name: "400, Body io.NopCloser(nil)", bad: status(400, nilReader), requests: 1, panics: 1, one: true,
			failed: "analytics: non-retryable response 400 Bad Request"},
		{name: "400, Read panics", bad: status(400, readPanic), requests: 1, panics: 1, one: true,
			failed: "analytics: non-retryable response 400 Bad Request"},
		{name: "RoundTrip panics", bad: func(*http.Request) (*http.Response, error) { panic("round trip exploded") }, requests: 3, panics: 1},
		{name: "RoundTrip panics with an error", bad: func(*http.Request) (*http.Response, error) { panic(io.ErrUnexpectedEOF) }, requests: 3, panics: 1},
		{name: "RoundTrip panics with nil", bad: func(*http.Request) (*http.Response, error) { panic(nil) }, requests: 3, panics: 1},
		{name: "RoundTrip on a nil *http.Transport", bad: func(req *http.Request) (*http.Response, error) {
			var rt *http.Transport
			return rt.RoundTrip(req)
		}, requests: 3, panics: 1},
		{name: "nil response, nil error", bad: func(*http.Request) (*http.Response, error) { return nil, nil }, requests: 3},
	}
}

// outcomeOf describes what the callbacks got, for the table in the test
// log: delivered, or OnError's text.
func outcomeOf(cb *callbacks) string {
	if errs := cb.errors(); len(errs) > 0 {
		return "OnError: " + errs[0].err.Error()
	}
	return fmt.Sprintf("delivered (%d events)", len(cb.delivered()))
}

// A transport that misbehaves in any of the ways above never takes the
// process down: a panic or a missing value is an error of the attempt,
// retried when no status was read, decided by the status otherwise; each
// event gets one outcome; the panic is logged once at ERROR with its
// value and stack.
func TestMisbehavingTransport(t *testing.T) {
	for _, tc := range transportCases() {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				core, logs := observer.New(zapcore.ErrorLevel)
				api := newFakeAPI(nil)
				wire := &misbehaving{next: api, times: 2, bad: tc.bad}
				cb := &callbacks{}
				c := newTestClient(t, wire, cb, WithLogger(zap.New(core)), WithConsumers(1))
				ids := []string{"a", "b", "c"}
				if tc.one {
					ids = ids[:1]
				}
				for _, id := range ids {
					mustTrack(t, c, id)
				}
				start := time.Now()
				require.NoError(t, flush(t, c, time.Minute))
				require.NoError(t, closeClient(t, c, 5*time.Second))
				took := time.Since(start)
				synctest.Wait() // a body closed at the attempt's timeout is closed on a goroutine of its own

				reqs := api.requests()
				assert.Len(t, reqs, tc.requests, "requests")
				for i, r := range reqs {
					assert.Equal(t, ids, r.ids, "request %d carries the batch", i)
				}
				n := cb.dispositions()
				for _, id := range ids {
					assert.Equal(t, 1, n[id], "outcomes of %s", id)
				}
				if tc.failed == "" {
					assert.ElementsMatch(t, ids, cb.delivered())
					assert.Empty(t, cb.errors())
				} else {
					require.Len(t, cb.errors(), 1)
					assert.Equal(t, tc.failed, cb.errors()[0].err.Error())
				}
				misbehaved := min(tc.requests, 2)
				panics := logs.FilterMessageSnippet("panicked").All()
				assert.Equal(t, misbehaved*tc.panics, len(panics), "panics logged")
				for _, p := range panics {
					assert.NotEmpty(t, p.ContextMap()["panic"], "the panic value is logged")
					assert.Contains(t, p.ContextMap()["stack"], "goroutine", "the stack is logged")
				}
				t.Logf("outcome | %s | %d request(s), %d retried | %s | %d panic(s) logged | Flush+Close %v",
					tc.name, len(reqs), len(reqs)-1, outcomeOf(cb), len(panics), took)
			})
		})
	}
}

// A transport that never behaves ends in OnError with its own error as
// Last once the retries are spent, and what happened is in the text.
func TestMisbehavingTransportForever(t *testing.T) {
	cases := []struct {
		name string
		bad  func(*http.Request) (*http.Response, error)
		text string
	}{
		{"RoundTrip panics", func(*http.Request) (*http.Response, error) { panic("round trip exploded") },
			"retries exhausted after 3 attempt(s): transport error: the HTTP client panicked: round trip exploded"},
		{"nil response, nil error", func(*http.Request) (*http.Response, error) { return nil, nil },
			"returned a nil *Response with a nil error"},
		{"500, Read and Close panic", status(500, func() io.ReadCloser { return allPanic{} }),
			"retries exhausted after 3 attempt(s): retryable response 500 Internal Server Error"},
		{"500, Body io.NopCloser(nil)", status(500, func() io.ReadCloser { return io.NopCloser(nil) }),
			"retries exhausted after 3 attempt(s): retryable response 500 Internal Server Error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(nil)
				cb := &callbacks{}
				c := newTestClient(t, &misbehaving{next: api, times: 1 << 30, bad: tc.bad}, cb, WithMaxRetries(2))
				mustTrack(t, c, "a")
				require.NoError(t, flush(t, c, time.Minute))
				require.NoError(t, closeClient(t, c, time.Second))
				assert.Len(t, api.requests(), 3)
				require.Len(t, cb.errors(), 1)
				err := cb.errors()[0].err
				assert.ErrorIs(t, err, ErrRetriesExhausted)
				assert.Contains(t, err.Error(), tc.text)
				t.Logf("outcome | %s, always | %d requests | OnError: %v", tc.name, len(api.requests()), err)
			})
		})
	}
}

// A panicking OnSuccess, OnError or attempt hook, and a logger that
// panics, do not stop the consumer: later events are still delivered, and
// each gets its one outcome.
func TestPanickingUserCodeKeepsDelivering(t *testing.T) {
	boom := func() { panic("user code exploded") }
	cases := []struct {
		name      string
		status    int // the server's answer to the first batch
		delivered int64
		minCalls  int32 // a logger logs in New and on the consumer
		opts      func(calls *atomic.Int32) []Option
	}{
		{"OnSuccess panics", 200, 2, 2, func(calls *atomic.Int32) []Option {
			return []Option{WithOnSuccess(func([]Message) { calls.Add(1); boom() })}
		}},
		{"OnError panics", 400, 1, 1, func(calls *atomic.Int32) []Option {
			return []Option{WithOnError(func(error, []Message) { calls.Add(1); boom() })}
		}},
		{"attempt hook panics", 500, 2, 3, func(calls *atomic.Int32) []Option {
			return []Option{WithAttemptHook(func(AttemptInfo) { calls.Add(1); boom() })}
		}},
		{"zap core panics", 400, 1, 2, func(calls *atomic.Int32) []Option {
			return []Option{WithLogger(zap.New(panicCore{calls}))}
		}},
		{"slog handler panics", 400, 1, 2, func(calls *atomic.Int32) []Option {
			return []Option{WithSlog(slog.New(panicHandler{calls}))}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				api := newFakeAPI(sequence(reply{status: tc.status}, reply{status: 200}))
				opts := append(tc.opts(&calls), WithFlushAt(1), WithConsumers(1))
				c := newTestClient(t, api, nil, opts...)
				mustTrack(t, c, "first")
				require.NoError(t, flush(t, c, time.Minute))
				mustTrack(t, c, "second")
				require.NoError(t, flush(t, c, time.Minute))
				require.NoError(t, closeClient(t, c, time.Second))
				assert.GreaterOrEqual(t, calls.Load(), tc.minCalls, "the user code ran")
				st := c.Stats()
				assert.Equal(t, int64(2), st.Delivered+st.Failed, "each event has an outcome")
				assert.Equal(t, tc.delivered, st.Delivered, "delivered, the later event among them")
				assert.Zero(t, c.q.outstanding())
				t.Logf("outcome | %s | delivered %d, failed %d, requests %d, user code ran %d time(s)",
					tc.name, st.Delivered, st.Failed, st.Requests, calls.Load())
			})
		})
	}
}

// panicCore is a zap core whose Write panics.
type panicCore struct{ calls *atomic.Int32 }

func (panicCore) Enabled(zapcore.Level) bool          { return true }
func (c panicCore) With([]zapcore.Field) zapcore.Core { return c }
func (c panicCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, c)
}
func (c panicCore) Write(zapcore.Entry, []zapcore.Field) error {
	c.calls.Add(1)
	panic("logger exploded")
}
func (panicCore) Sync() error { return nil }

// panicHandler is a slog handler whose Handle panics.
type panicHandler struct{ calls *atomic.Int32 }

func (panicHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h panicHandler) Handle(context.Context, slog.Record) error {
	h.calls.Add(1)
	panic("handler exploded")
}
func (h panicHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h panicHandler) WithGroup(string) slog.Handler      { return h }

// The token request goes through a user's transport too: one that panics
// or answers with a nil body reader is a failed token request, retried,
// and the events wait for the token instead of failing.
func TestMisbehavingTokenTransport(t *testing.T) {
	testKeys(t)
	cases := []struct {
		name string
		bad  func(*http.Request) (*http.Response, error)
	}{
		{"RoundTrip panics", func(*http.Request) (*http.Response, error) { panic("token round trip exploded") }},
		{"200, Body io.NopCloser(nil)", status(200, func() io.ReadCloser { return io.NopCloser(nil) })},
		{"200, Read returns data then panics", status(200, func() io.ReadCloser { return &readPanics{data: `{"access_token":`} })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				core, logs := observer.New(zapcore.ErrorLevel)
				fa := newFakeAuth()
				api := newFakeAPI(nil)
				cb := &callbacks{}
				auth := &misbehaving{next: fa, times: 2, bad: tc.bad}
				c := newTestClient(t, hostRouter{"auth.test": auth, "api.test": api}, cb,
					WithOAuth(oauthConfig()), WithLogger(zap.New(core)))
				mustTrack(t, c, "a")
				require.NoError(t, flush(t, c, time.Minute))
				require.NoError(t, closeClient(t, c, time.Second))
				assert.Len(t, fa.requests(), 3, "token requests")
				assert.Equal(t, []string{"a"}, cb.delivered())
				assert.Equal(t, []string{"Bearer tok-secret-3"}, authHeaders(api.requests()))
				assert.Equal(t, 2, logs.FilterMessageSnippet("panicked").Len(), "one line per panic")
				t.Logf("outcome | token transport: %s | %d token requests | %s", tc.name, len(fa.requests()), outcomeOf(cb))
			})
		})
	}
}

// hostRouter sends each request to the transport of its host.
type hostRouter map[string]http.RoundTripper

func (h hostRouter) RoundTrip(req *http.Request) (*http.Response, error) {
	return h[req.URL.Host].RoundTrip(req)
}

// The guarded logger keeps what the wrapped core does (a tee writes to
// its cores in order, a sampler samples, a write error reaches
// ErrorOutput) and loses only the line of a core that panics (from that
// core on, in a tee).
func TestGuardLogger(t *testing.T) {
	var calls atomic.Int32
	obs, logs := observer.New(zapcore.DebugLevel)
	l := guardLogger(zap.New(zapcore.NewTee(obs, panicCore{&calls})))
	l.Error("one")
	l.With(zap.Int("n", 2)).Warn("two")
	assert.Equal(t, []string{"one", "two"}, messages(logs))
	assert.Equal(t, int32(2), calls.Load())

	obs, logs = observer.New(zapcore.DebugLevel)
	sampled := zapcore.NewSamplerWithOptions(obs, time.Hour, 1, 0) // the first of each message per hour
	l = guardLogger(zap.New(sampled))
	for range 3 {
		l.Info("same")
	}
	assert.Equal(t, []string{"same"}, messages(logs), "sampled")

	var out strings.Builder
	l = guardLogger(zap.New(failingCore{}, zap.ErrorOutput(zapcore.AddSync(&out))))
	l.Error("lost")
	assert.Contains(t, out.String(), "write error: disk full")

	l = guardLogger(zap.New(zapcore.NewNopCore()))
	assert.NotPanics(t, func() { l.Error("nothing") })
	assert.Equal(t, l.Core(), guardLogger(l).Core(), "guarded once")
}

func messages(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.All() {
		out = append(out, e.Message)
	}
	return out
}

// failingCore is a zap core whose writes fail.
type failingCore struct{}

func (failingCore) Enabled(zapcore.Level) bool          { return true }
func (c failingCore) With([]zapcore.Field) zapcore.Core { return c }
func (c failingCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, c)
}
func (failingCore) Write(zapcore.Entry, []zapcore.Field) error { return errors.New("disk full") }
func (failingCore) Sync() error                                { return nil }
