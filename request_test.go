package analytics

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

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
		auditLater(t, c, cb)
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
		auditLater(t, c, cb)
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
		auditLater(t, c, cb)
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
	auditLater(t, c, cb)
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
	auditLater(t, c, nil)
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

// rawServer is a TCP listener on 127.0.0.1 that reads one HTTP request per
// connection and writes answer(n) as raw bytes; with hold it then keeps the
// connection open until the server is closed. It speaks HTTP only as far as
// a test needs, so it can send what net/http's server never would.
type rawServer struct {
	ln     net.Listener
	answer func(n int) (raw string, hold bool)
	mu     sync.Mutex
	conns  []net.Conn
	n      int
	wg     sync.WaitGroup
	closed bool
}

func newRawServer(t testing.TB, answer func(n int) (string, bool)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &rawServer{ln: ln, answer: answer}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() }

func (s *rawServer) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *rawServer) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = conn.Close()
			return
		}
		s.conns = append(s.conns, conn)
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(conn)
	}
}

func (s *rawServer) serve(conn net.Conn) {
	defer s.wg.Done()
	defer conn.Close()
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		s.mu.Lock()
		n := s.n
		s.n++
		s.mu.Unlock()
		raw, hold := s.answer(n)
		if _, err := io.WriteString(conn, raw); err != nil {
			return
		}
		if hold {
			_, _ = io.Copy(io.Discard, conn) // until the client or close() ends it
			return
		}
	}
}

func (s *rawServer) close() {
	s.mu.Lock()
	s.closed = true
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	_ = s.ln.Close()
	s.wg.Wait()
}

// R15, R56: a server that answers 101 Switching Protocols and holds the
// connection gets a non-retryable failure at once; no consumer is held, the
// event gets its OnError before Close, Close returns on time and nothing of
// the connection outlives Close.
func TestSwitchingProtocolsDoesNotWedgeConsumers(t *testing.T) {
	srv := newRawServer(t, func(int) (string, bool) {
		return "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", true
	})
	const timeout = 2 * time.Second
	failed := make(chan error, 10)
	c, err := New("wk", WithEndpoint(srv.url()), WithFlushAt(1), WithConsumers(1), WithHTTPTimeout(timeout),
		WithOnError(func(err error, _ []Message) { failed <- err }))
	require.NoError(t, err)
	auditLater(t, c, nil)
	start := time.Now()
	// One consumer and two batches: the second is sent only if the first
	// did not wedge the consumer.
	mustTrack(t, c, "m1")
	mustTrack(t, c, "m2")
	for i := 0; i < 2; i++ {
		select {
		case err := <-failed:
			var he *HTTPError
			if assert.ErrorAs(t, err, &he) {
				assert.Equal(t, 101, he.StatusCode)
				assert.Equal(t, KindNonRetryable, he.Kind)
			}
		case <-time.After(timeout + time.Second):
			t.Errorf("event %d: no OnError within the HTTP timeout (%v) of a 101 answer", i+1, timeout)
		}
	}
	assert.Less(t, time.Since(start), timeout, "a 101 is decided without waiting for its body")
	assert.Equal(t, 2, srv.requests())

	closeStart := time.Now()
	err = closeClient(t, c, time.Second)
	assert.NoError(t, err, "both events already had their disposition")
	assert.Less(t, time.Since(closeStart), 1500*time.Millisecond, "Close within its deadline + 0.5 s")
	assert.Empty(t, failed, "no callback after Close")
	// Nothing of the client survives Close, though the server still holds
	// its end of both connections.
	goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/relaykit/analytics-go.(*rawServer).serve"),
		goleak.IgnoreAnyFunction("github.com/relaykit/analytics-go.(*rawServer).accept"))
}

// redirectRig maps host names to loopback servers through the client's
// dialer, so a test can redirect across hosts, ports, subdomains and
// schemes without DNS.
type redirectRig struct {
	hosts  map[string]string // "host:port" → listener address
	client *http.Client
}

func newRedirectRig(tlsServers ...*httptest.Server) *redirectRig {
	rig := &redirectRig{hosts: map[string]string{}}
	pool := x509.NewCertPool()
	for _, s := range tlsServers {
		if s.TLS != nil {
			pool.AddCert(s.Certificate())
		}
	}
	var d net.Dialer
	rig.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			to, ok := rig.hosts[addr]
			if !ok {
				return nil, fmt.Errorf("no server for %s", addr)
			}
			return d.DialContext(ctx, network, to)
		},
		// httptest's certificate is for example.com.
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
	}}
	return rig
}

// R10, R11: a 307/308 is followed only within the origin (or from http to
// https on the same host); anything else fails as a redirect with nothing
// sent to the other server, and the write key (Authorization or body) never
// reaches any other host, port or subdomain.
func TestRedirectsStayWithinTheOrigin(t *testing.T) {
	const key = "wk-redirect-secret"
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(key+":"))
	cases := []struct {
		name     string
		origin   string // endpoint
		location string
		follow   bool
	}{
		{"other port", "http://api.test", "http://api.test:8080/v1/batch", false},
		{"other host", "http://api.test", "http://other.test/v1/batch", false},
		{"subdomain", "http://api.test", "http://eu.api.test/v1/batch", false},
		{"parent domain", "http://eu.api.test", "http://api.test/v1/batch", false},
		{"scheme-relative other host", "http://api.test", "//other.test/v1/batch", false},
		{"https to http same host", "https://api.test", "http://api.test/v1/batch", false},
		{"http to https other host", "http://api.test", "https://other.test/v1/batch", false},
		{"http to https subdomain", "http://api.test", "https://eu.api.test/v1/batch", false},
		{"http to https same host", "http://api.test", "https://api.test/v1/batch-alt", true},
		{"same origin", "http://api.test", "http://api.test/v1/batch-alt", true},
	}
	for _, tc := range cases {
		for _, status := range []int{307, 308} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, status), func(t *testing.T) {
				var (
					mu       sync.Mutex
					atOrigin []*http.Request
					atTarget []*http.Request
					bodies   [][]byte
				)
				record := func(list *[]*http.Request, r *http.Request) {
					body, _ := io.ReadAll(r.Body)
					mu.Lock()
					*list = append(*list, r)
					bodies = append(bodies, body)
					mu.Unlock()
				}
				originH := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					record(&atOrigin, r)
					if r.URL.Path == "/v1/batch" {
						w.Header().Set("Location", tc.location)
						w.WriteHeader(status)
					}
				})
				targetH := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { record(&atTarget, r) })
				newSrv := func(h http.Handler, https bool) *httptest.Server {
					var s *httptest.Server
					if https {
						s = httptest.NewTLSServer(h)
					} else {
						s = httptest.NewServer(h)
					}
					t.Cleanup(s.Close)
					return s
				}
				ou, err := url.Parse(tc.origin)
				require.NoError(t, err)
				lu, err := ou.Parse(tc.location)
				require.NoError(t, err)
				origin := newSrv(originH, ou.Scheme == "https")
				target := origin
				sameServer := tc.follow && ou.Scheme == lu.Scheme
				if !sameServer {
					target = newSrv(targetH, lu.Scheme == "https")
				}
				rig := newRedirectRig(origin, target)
				defer rig.client.CloseIdleConnections()
				rig.hosts[hostPort(ou)] = origin.Listener.Addr().String()
				rig.hosts[hostPort(lu)] = target.Listener.Addr().String()

				cb := &callbacks{}
				c, err := New(key, append(cb.options(), WithEndpoint(tc.origin), WithHTTPClient(rig.client))...)
				require.NoError(t, err)
				auditLater(t, c, cb)
				mustTrack(t, c, "m1")
				require.NoError(t, closeClient(t, c, 5*time.Second))

				mu.Lock()
				defer mu.Unlock()
				if lu.Host != ou.Host {
					for _, r := range atTarget {
						assert.NotEqual(t, auth, r.Header.Get("Authorization"), "Authorization sent to %s", tc.location)
					}
					for _, b := range bodies[len(atOrigin):] {
						assert.NotContains(t, string(b), key, "the body (and its writeKey) sent to %s", tc.location)
					}
				}
				if !tc.follow {
					assert.Empty(t, atTarget, "nothing reaches %s", tc.location)
					assert.Len(t, atOrigin, 1)
					require.Len(t, cb.errors(), 1)
					var he *HTTPError
					require.ErrorAs(t, cb.errors()[0].err, &he)
					assert.Equal(t, KindRedirect, he.Kind)
					assert.Equal(t, status, he.StatusCode)
					assert.Empty(t, cb.delivered())
					return
				}
				assert.Equal(t, []string{"m1"}, cb.delivered())
				all := append(append([]*http.Request(nil), atOrigin...), atTarget...)
				require.Len(t, all, 2)
				assert.Equal(t, "/v1/batch-alt", all[1].URL.Path)
				assert.Equal(t, http.MethodPost, all[1].Method)
				assert.Equal(t, bodies[0], bodies[1], "the same body")
				assert.Equal(t, auth, all[1].Header.Get("Authorization"), "same host: Authorization kept")
			})
		}
	}
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return u.Hostname() + ":443"
	}
	return u.Hostname() + ":80"
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
