package httpbatch

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// body is an attempt's body: ten events and the attempt's sentAt, as the
// client's encoder would write it.
func body(buf []byte, sentAt time.Time) []byte {
	buf = append(buf[:0], `{"batch":[`...)
	for i := range 10 {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"messageId":"m`...)
		buf = append(buf, byte('0'+i))
		buf = append(buf, `"}`...)
	}
	buf = append(buf, `],"sentAt":"`...)
	buf = sentAt.UTC().AppendFormat(buf, time.RFC3339Nano)
	return append(buf, `","writeKey":"wk"}`...)
}

func newTestSender(client *http.Client, url string, gz bool) *Sender {
	return New(Config{Client: client, URL: url, WriteKey: "wk", Secrets: WriteKeyForms("wk", "wk"),
		UserAgent: "test/1", Gzip: gz})
}

func gunzip(t *testing.T, p []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(p))
	require.NoError(t, err)
	out, err := io.ReadAll(zr)
	require.NoError(t, err)
	return out
}

// recorder is a real HTTP server that records what it got and answers
// with answer.
type recorder struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
	bodies  [][]byte
}

func newRecorder(t *testing.T, answer func(w http.ResponseWriter)) *recorder {
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.headers, rec.bodies = append(rec.headers, r.Header.Clone()), append(rec.bodies, raw)
		rec.mu.Unlock()
		answer(w)
	}))
	t.Cleanup(rec.Close)
	return rec
}

// R5–R7: the header set, the credentials (Basic from the write key, or
// the bearer given), the retry count and gzip, as the server gets them.
func TestSendHeadersAndBody(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter) {})
	for _, gz := range []bool{false, true} {
		s := newTestSender(NewClient(nil, 1), rec.URL+"/v1/batch", gz)
		r := s.Send(context.Background(), Attempt{Body: body})
		require.NoError(t, r.Err)
		assert.Equal(t, Delivered, r.Outcome)
		r = s.Send(context.Background(), Attempt{Body: body, Retry: 2, Bearer: "Bearer tok"})
		assert.Equal(t, Delivered, r.Outcome)
		s.Client().CloseIdleConnections()
	}
	require.Len(t, rec.headers, 4)
	for i, h := range rec.headers {
		gz := i >= 2
		assert.Equal(t, "application/json", h.Get("Content-Type"))
		assert.Equal(t, "test/1", h.Get("User-Agent"))
		raw := rec.bodies[i]
		if gz {
			assert.Equal(t, "gzip", h.Get("Content-Encoding"))
			raw = gunzip(t, raw)
		} else {
			assert.Empty(t, h.Values("Content-Encoding"))
		}
		assert.Contains(t, string(raw), `"messageId":"m9"`)
		if i%2 == 0 {
			assert.Equal(t, "Basic d2s6", h.Get("Authorization"), "the write key and a colon")
			assert.Empty(t, h.Values("X-Retry-Count"))
		} else {
			assert.Equal(t, "Bearer tok", h.Get("Authorization"))
			assert.Equal(t, "2", h.Get("X-Retry-Count"))
		}
	}
}

// R18: the server's text reaches the result excerpted, with every form of
// the write key redacted, and the Retry-After as received (redacted too).
func TestSendExcerptRedacted(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "soon wk")
		w.WriteHeader(503)
		_, _ = io.WriteString(w, `{"message":"bad key wk (d2s6)"}`)
	})
	s := newTestSender(NewClient(nil, 1), rec.URL, false)
	r := s.Send(context.Background(), Attempt{Body: body})
	require.NoError(t, r.Err)
	assert.Equal(t, 503, r.Status)
	assert.Equal(t, "bad key [redacted] ([redacted])", r.Message)
	assert.Equal(t, "soon [redacted]", r.RetryAfter)
	assert.Equal(t, Retry, r.Outcome)
	assert.True(t, r.InvalidRetryAfter)
	s.Client().CloseIdleConnections()
}

// R16, R18: extracting the server's text never fails and is bounded.
func TestExcerpt(t *testing.T) {
	assert.Equal(t, "nope", excerpt([]byte(`{"code":"bad","message":"nope"}`)))
	assert.Equal(t, "denied", excerpt([]byte(`{"error":"denied"}`)))
	assert.Equal(t, `{"message":7}`, excerpt([]byte(`{"message":7}`)))
	assert.Equal(t, "[]", excerpt([]byte(`[]`)))
	assert.Equal(t, "", excerpt(nil))
	long := clip(excerpt(bytes.Repeat([]byte("é"), 2000)))
	assert.LessOrEqual(t, len(long), MaxExcerpt+len("…"))
	assert.True(t, strings.HasSuffix(long, "…"))
	assert.Equal(t, "\uFFFD", clip(excerpt([]byte{0xff})))
	// Exactly MaxExcerpt bytes are kept whole, without an ellipsis; one
	// more is cut there.
	exact := strings.Repeat("x", MaxExcerpt)
	assert.Equal(t, exact, clip(excerpt([]byte(exact))))
	assert.Equal(t, exact+"…", clip(excerpt([]byte(exact+"y"))))
	// A cut never splits a character: 3-byte runes do not end on byte 512.
	euros := clip(excerpt(bytes.Repeat([]byte("€"), 400)))
	assert.Equal(t, strings.Repeat("€", MaxExcerpt/3)+"…", euros)
	// A long body of continuation bytes has no place to cut: nothing of it
	// is kept, and nothing panics.
	assert.Equal(t, "…", clip(excerpt(bytes.Repeat([]byte{0x80}, 600))))
}

// A transport error's text never carries the write key; errors.Is still
// sees the original error.
func TestSendTransportErrorRedacted(t *testing.T) {
	cause := errors.New("dial failed for wk")
	s := newTestSender(&http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, cause
	})}, "http://api.test", false)
	r := s.Send(context.Background(), Attempt{Body: body})
	require.Error(t, r.Err)
	assert.NotContains(t, r.Err.Error(), "wk")
	assert.ErrorIs(t, r.Err, cause)
	assert.Equal(t, Retry, r.Outcome)
}

// Body buffers go back for reuse only when net/http reported, through
// httptrace, that it finished writing them; a RoundTripper without the
// hooks never has its body buffer reused (with gzip, the plain buffer goes
// back at once: the transport never sees it). Either way the server gets
// the whole body.
func TestBodyBufferReuse(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter) {})
	for _, gz := range []bool{false, true} {
		viaNet := newTestSender(NewClient(nil, 1), rec.URL, gz)
		for i := 0; i < 2; i++ {
			r := viaNet.Send(context.Background(), Attempt{Body: body})
			require.NoError(t, r.Err)
			require.Equal(t, 200, r.Status)
		}
		perAttempt := int32(1)
		if gz {
			perAttempt = 2
		}
		assert.Equal(t, 2*perAttempt, viaNet.recycled.Load(), "gzip=%t: every buffer of both attempts, after WroteRequest", gz)
		viaNet.Client().CloseIdleConnections()

		var got [][]byte
		fake := newTestSender(&http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			raw, _ := io.ReadAll(r.Body)
			got = append(got, raw)
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
		})}, "http://api.test", gz)
		for i := 0; i < 2; i++ {
			r := fake.Send(context.Background(), Attempt{Body: body})
			require.NoError(t, r.Err)
		}
		assert.Equal(t, 2*(perAttempt-1), fake.recycled.Load(), "gzip=%t: no reuse of what the transport read without its word", gz)
		for _, raw := range got {
			if gz {
				raw = gunzip(t, raw)
			}
			assert.Contains(t, string(raw), `"messageId":"m9"}],"sentAt"`, "the whole body arrived")
		}
	}
}

// retryingTransport writes a request the way net/http does when a
// connection closes under it: it reports the first write finished
// (WroteRequest, so the client may reuse that buffer at once), scribbles
// over every body buffer the client has given back, and sends the body
// GetBody returns. The server must get the same body twice.
type retryingTransport struct{ bodies [][]byte }

func (rt *retryingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	trace.GetConn(req.URL.Host)
	first, _ := io.ReadAll(req.Body)
	trace.WroteRequest(httptrace.WroteRequestInfo{})
	for i := 0; i < 4; i++ { // what another consumer would do with a buffer given back
		p := getBodyBuffer()
		*p = append((*p)[:0], strings.Repeat("x", cap(*p))...)
		bodyBuffers.Put(p)
	}
	again, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	trace.GetConn(req.URL.Host)
	second, _ := io.ReadAll(again)
	trace.WroteRequest(httptrace.WroteRequestInfo{})
	rt.bodies = append(rt.bodies, first, second)
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// A retry of net/http's own after the body was written in full sends the
// same bytes, although the first buffer went back for reuse.
func TestBodyRetriedByTheTransportIsTheSame(t *testing.T) {
	for _, gz := range []bool{false, true} {
		rt := &retryingTransport{}
		s := newTestSender(&http.Client{Transport: rt}, "http://api.test", gz)
		r := s.Send(context.Background(), Attempt{Body: body})
		require.NoError(t, r.Err)
		require.Len(t, rt.bodies, 2)
		first, second := rt.bodies[0], rt.bodies[1]
		if gz {
			first, second = gunzip(t, first), gunzip(t, second)
		}
		assert.Equal(t, string(first), string(second), "gzip=%t", gz)
		assert.Contains(t, string(first), `"writeKey":"wk"`)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// R15, R56: a body whose reads ignore the request context (here a pipe that
// never delivers) is closed when the attempt's timeout ends, for every
// status class; Send never outlives its context.
func TestBodyReadEndsWithTheAttempt(t *testing.T) {
	for _, status := range []int{101, 200, 500, 600} {
		synctest.Test(t, func(t *testing.T) {
			pr, pw := io.Pipe()
			defer pw.Close()
			rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: status, Header: http.Header{}, Body: pr, Request: r}, nil
			})
			s := newTestSender(&http.Client{Transport: rt}, "http://api.test", false)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			r := s.Send(ctx, Attempt{Body: body})
			require.NoError(t, r.Err)
			assert.Equal(t, status, r.Status)
			assert.LessOrEqual(t, time.Since(start), 3*time.Second, "status %d", status)
		})
	}
}

// R15, R56 with net/http's own Transport (the client closes no body on its
// own then): a server that sends its status and then part of a body that
// never ends, for every status class, holds Send no longer than the
// attempt's context.
func TestBodyReadEndsWithTheAttemptOnTheStandardTransport(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.Header().Set("Content-Length", "100000")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"message":"`))
		w.(http.Flusher).Flush()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	for _, client := range []*http.Client{{}, {Transport: http.DefaultTransport.(*http.Transport).Clone()}} {
		require.True(t, endsReadsWithContext(client))
		for _, status := range []int{200, 500} {
			s := newTestSender(client, srv.URL+"/v1/batch?status="+strconv.Itoa(status), false)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			start := time.Now()
			r := s.Send(ctx, Attempt{Body: body})
			took := time.Since(start)
			cancel()
			require.NoError(t, r.Err)
			assert.Equal(t, status, r.Status)
			assert.Less(t, took, 5*time.Second, "status %d: the read ended with the attempt", status)
		}
		client.CloseIdleConnections()
	}
	assert.False(t, endsReadsWithContext(&http.Client{Transport: roundTripFunc(nil)}), "any other RoundTripper gets the close")
}

// A panic of the RoundTripper, or a nil response without an error, is the
// attempt's transport error, a retry (net/http reports the nil response
// itself); a body whose Read panics leaves the
// status to decide.
func TestSendContainsTheUsersHTTPCode(t *testing.T) {
	s := newTestSender(&http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
		panic("boom")
	})}, "http://api.test", false)
	r := s.Send(context.Background(), Attempt{Body: body})
	require.Error(t, r.Err)
	assert.Equal(t, "the HTTP client panicked: boom", r.Err.Error())
	assert.Equal(t, Retry, r.Outcome)

	s = newTestSender(&http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, nil
	})}, "http://api.test", false)
	r = s.Send(context.Background(), Attempt{Body: body})
	require.Error(t, r.Err)
	assert.Equal(t, Retry, r.Outcome)

	s = newTestSender(&http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 500, Header: http.Header{}, Body: panicBody{}, Request: req}, nil
	})}, "http://api.test", false)
	r = s.Send(context.Background(), Attempt{Body: body})
	require.NoError(t, r.Err)
	assert.Equal(t, 500, r.Status)
	assert.Equal(t, Retry, r.Outcome)
}

type panicBody struct{}

func (panicBody) Read([]byte) (int, error) { panic("read") }
func (panicBody) Close() error             { panic("close") }
