package analytics

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// R9–R16, R25, R58: the classifier over the whole status space.
func TestClassifyResponseStatusSpace(t *testing.T) {
	now := time.Now()
	for status := 100; status <= 999; status++ {
		want := outcomeFailed
		switch {
		case status >= 200 && status <= 299:
			want = outcomeDelivered
		case status == 408 || status == 410 || status == 429 || status == 460:
			want = outcomeRetry
		case status >= 500 && status <= 599 && status != 501 && status != 505 && status != 511:
			want = outcomeRetry
		}
		v := classifyResponse(status, "", false, now)
		require.Equal(t, want, v.outcome, "status %d", status)
		if status >= 300 && status <= 399 {
			assert.Equal(t, KindRedirect, v.kind, "status %d", status)
		}
		// A usable Retry-After turns every retryable status into a rate limit
		// and changes nothing else (R25).
		v = classifyResponse(status, "7", true, now)
		if want == outcomeRetry {
			assert.Equal(t, outcomeRateLimited, v.outcome, "status %d", status)
			assert.Equal(t, 7*time.Second, v.delay)
		} else {
			assert.Equal(t, want, v.outcome, "status %d with Retry-After", status)
			assert.Zero(t, v.delay)
		}
	}
}

func TestClassifyTransportError(t *testing.T) {
	assert.True(t, classifyTransportError(io.EOF))
	assert.True(t, classifyTransportError(errors.New("connection refused")))
	assert.False(t, classifyTransportError(errors.New(`unsupported protocol scheme "ftp"`)))
}

// R16, R18: extracting the server's text never fails and is bounded.
func TestExcerpt(t *testing.T) {
	assert.Equal(t, "nope", excerpt([]byte(`{"code":"bad","message":"nope"}`)))
	assert.Equal(t, "denied", excerpt([]byte(`{"error":"denied"}`)))
	assert.Equal(t, `{"message":7}`, excerpt([]byte(`{"message":7}`)))
	assert.Equal(t, "[]", excerpt([]byte(`[]`)))
	assert.Equal(t, "", excerpt(nil))
	long := excerpt(bytes.Repeat([]byte("é"), 2000))
	assert.LessOrEqual(t, len(long), maxExcerpt+len("…"))
	assert.True(t, strings.HasSuffix(long, "…"))
	assert.Equal(t, "\uFFFD", excerpt([]byte{0xff}))
	// Exactly maxExcerpt bytes are kept whole, without an ellipsis; one
	// more is cut there.
	exact := strings.Repeat("x", maxExcerpt)
	assert.Equal(t, exact, excerpt([]byte(exact)))
	assert.Equal(t, exact+"…", excerpt([]byte(exact+"y")))
	// A cut never splits a character: 3-byte runes do not end on byte 512.
	euros := excerpt(bytes.Repeat([]byte("€"), 400))
	assert.Equal(t, strings.Repeat("€", maxExcerpt/3)+"…", euros)
	// A long body of continuation bytes has no place to cut: nothing of it
	// is kept, and nothing panics.
	assert.Equal(t, "…", excerpt(bytes.Repeat([]byte{0x80}, 600)))
}

// loopback is a real HTTP server on 127.0.0.1 recording requests.
type loopback struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
	bods [][]byte
}

func newLoopback(t *testing.T, h func(w http.ResponseWriter, r *http.Request, n int)) *loopback {
	l := &loopback{}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			require.NoError(t, err)
			body, _ = io.ReadAll(zr)
		}
		l.mu.Lock()
		n := len(l.reqs)
		l.reqs = append(l.reqs, r)
		l.bods = append(l.bods, body)
		l.mu.Unlock()
		if h != nil {
			h(w, r, n)
		}
	}))
	t.Cleanup(l.Close)
	return l
}

func (l *loopback) requests() ([]*http.Request, [][]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*http.Request(nil), l.reqs...), append([][]byte(nil), l.bods...)
}

// S1, S39, R1, R2, R5, R6, R7: the request on a real socket, exactly.
func TestRequestShapeAndHeaders(t *testing.T) {
	for _, gz := range []bool{false, true} {
		srv := newLoopback(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 0 {
				w.WriteHeader(500)
			}
		})
		cb := &callbacks{}
		c, err := New("abc", append(cb.options(), WithEndpoint(srv.URL+"/"), WithGzip(gz), WithFlushAt(3))...)
		require.NoError(t, err)
		for i := 0; i < 3; i++ {
			mustTrack(t, c, "")
		}
		require.NoError(t, flush(t, c, 10*time.Second))
		require.NoError(t, closeClient(t, c, time.Second))

		reqs, bodies := srv.requests()
		require.Len(t, reqs, 2)
		allowed := map[string]bool{"Authorization": true, "Content-Type": true, "User-Agent": true,
			"X-Retry-Count": true, "Content-Encoding": gz, "Content-Length": true, "Accept-Encoding": true}
		for i, r := range reqs {
			assert.Equal(t, http.MethodPost, r.Method)
			assert.Equal(t, "/v1/batch", r.URL.Path, "one trailing slash removed (R1)")
			assert.Equal(t, "Basic YWJjOg==", r.Header.Get("Authorization"))
			assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
			assert.Equal(t, LibraryName+"/"+Version, r.Header.Get("User-Agent"))
			if gz {
				assert.Equal(t, "gzip", r.Header.Get("Content-Encoding"))
			}
			var names []string
			for k := range r.Header {
				names = append(names, k)
				assert.True(t, allowed[k], "unexpected header %s", k)
			}
			sort.Strings(names)
			_, hasRetry := r.Header["X-Retry-Count"]
			assert.Equal(t, i == 1, hasRetry, "X-Retry-Count on attempt %d: %v", i+1, names)

			var env map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(bodies[i], &env))
			assert.ElementsMatch(t, []string{"batch", "sentAt", "writeKey"}, keys(env))
			assert.Equal(t, `"abc"`, string(env["writeKey"]))
			var batch []map[string]any
			require.NoError(t, json.Unmarshal(env["batch"], &batch))
			assert.Len(t, batch, 3)
			for _, ev := range batch {
				assert.NotEmpty(t, ev["messageId"])
				assert.Equal(t, "track", ev["type"])
			}
		}
		assert.Equal(t, "1", reqs[1].Header.Get("X-Retry-Count"))
		assert.Equal(t, bodies[0][:bytes.Index(bodies[0], []byte(`"sentAt"`))], bodies[1][:bytes.Index(bodies[1], []byte(`"sentAt"`))],
			"the batch is byte-identical across attempts (R3)")
		assert.Len(t, cb.delivered(), 3)
	}
}

func keys(m map[string]json.RawMessage) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// S38, R10, R11: 307/308 are followed as POST with the body; other 3xx fail.
func TestRedirects(t *testing.T) {
	for _, status := range []int{307, 308} {
		srv := newLoopback(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.URL.Path == "/v1/batch" {
				w.Header().Set("Location", "/v1/batch-alt")
				w.WriteHeader(status)
			}
		})
		cb := &callbacks{}
		c, err := New("abc", append(cb.options(), WithEndpoint(srv.URL))...)
		require.NoError(t, err)
		mustTrack(t, c, "m1")
		require.NoError(t, closeClient(t, c, 5*time.Second))
		reqs, bodies := srv.requests()
		require.Len(t, reqs, 2)
		assert.Equal(t, http.MethodPost, reqs[1].Method)
		assert.Equal(t, "/v1/batch-alt", reqs[1].URL.Path)
		assert.Equal(t, bodies[0], bodies[1])
		assert.Equal(t, "Basic YWJjOg==", reqs[1].Header.Get("Authorization"))
		assert.Equal(t, []string{"m1"}, cb.delivered())
	}
	for _, status := range []int{300, 301, 302, 303, 304} {
		srv := newLoopback(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.URL.Path == "/v1/batch" {
				if status != 300 && status != 304 {
					w.Header().Set("Location", "/v1/batch-alt")
				}
				w.WriteHeader(status)
			}
		})
		cb := &callbacks{}
		c, err := New("abc", append(cb.options(), WithEndpoint(srv.URL))...)
		require.NoError(t, err)
		mustTrack(t, c, "m1")
		require.NoError(t, closeClient(t, c, 5*time.Second))
		reqs, _ := srv.requests()
		assert.Len(t, reqs, 1, "status %d is not followed", status)
		require.Len(t, cb.errors(), 1)
		var he *HTTPError
		require.ErrorAs(t, cb.errors()[0].err, &he)
		assert.Equal(t, KindRedirect, he.Kind)
		assert.Equal(t, status, he.StatusCode)
	}
}

// R14: a certificate that does not verify fails at once, without retries.
func TestTLSVerificationFailureIsNotRetried(t *testing.T) {
	var hits int
	var mu sync.Mutex
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	defer srv.Close()
	srv.Config.ErrorLog = nil
	cb := &callbacks{}
	c, err := New("abc", append(cb.options(), WithEndpoint(srv.URL))...)
	require.NoError(t, err)
	mustTrack(t, c, "m1")
	require.NoError(t, closeClient(t, c, 5*time.Second))
	require.Len(t, cb.errors(), 1)
	var te *TransportError
	require.ErrorAs(t, cb.errors()[0].err, &te)
	assert.False(t, te.Retryable)
	assert.Equal(t, int64(1), c.Stats().Requests)
	mu.Lock()
	assert.Zero(t, hits)
	mu.Unlock()
}

// Body buffers are reused only when net/http reported, through httptrace,
// that it finished writing them; a RoundTripper without the hooks never
// gets a reused buffer.
func TestBodyBufferReuse(t *testing.T) {
	srv := newLoopback(t, nil)
	s, err := resolve("wk", []Option{WithEndpoint(srv.URL)})
	require.NoError(t, err)
	bt := benchBatch(10)

	viaNet := newSender(&s, newHTTPClient(&s))
	_, err = viaNet.send(context.Background(), bt)
	require.NoError(t, err)
	first := viaNet.plain
	require.NotEmpty(t, first)
	assert.True(t, viaNet.inFlight.released())
	_, err = viaNet.send(context.Background(), bt)
	require.NoError(t, err)
	assert.Same(t, &first[0], &viaNet.plain[0], "buffer reused after WroteRequest")
	viaNet.client.CloseIdleConnections()

	fake := newSender(&s, &http.Client{Transport: newFakeAPI(nil)})
	_, err = fake.send(context.Background(), bt)
	require.NoError(t, err)
	first = fake.plain
	assert.False(t, fake.inFlight.released())
	_, err = fake.send(context.Background(), bt)
	require.NoError(t, err)
	assert.NotSame(t, &first[0], &fake.plain[0], "no reuse without the transport's word")
}

// The client's own transport keeps one idle connection per consumer, so
// consumers that send at the same time do not dial a new connection for
// every request (net/http keeps only 2 idle connections per host).
func TestConnectionsReusedAcrossConsumers(t *testing.T) {
	const consumers = 8
	var dials atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(5 * time.Millisecond) // keep consumers in flight together
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	c, err := New("wk", WithEndpoint(srv.URL), WithConsumers(consumers), WithFlushAt(5), WithQueueCapacity(1000))
	require.NoError(t, err)
	// Ten bursts of 8 batches, each followed by a pause (the Flush) in
	// which every connection goes idle.
	for round := 0; round < 10; round++ {
		for i := 0; i < 40; i++ {
			require.NoError(t, c.Track(Track{UserID: "u", Event: "e"}))
		}
		require.NoError(t, c.Flush(context.Background()))
	}
	require.NoError(t, c.Close(context.Background()))
	assert.Equal(t, int64(400), c.Stats().Delivered)
	assert.GreaterOrEqual(t, c.Stats().Requests, int64(80))
	// A dial started while another connection was being returned may
	// complete too, so a few more than one per consumer can happen; without
	// the idle pool it is one dial for most requests.
	assert.LessOrEqual(t, dials.Load(), int32(2*consumers), "connections dialled for %d requests", c.Stats().Requests)
}
