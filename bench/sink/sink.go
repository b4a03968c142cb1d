// Package sink is a loopback HTTP endpoint for the SDK comparison. It
// accepts the batch uploads of the three SDKs (POST /v1/batch for ours and
// Segment v3, POST /batch/ for posthog-go), decodes them, and counts events,
// distinct events and duplicates. A fault mode makes a seeded fraction of
// requests fail; an outage makes every request fail for a while. GET /stats
// reports the counts and the sink's own CPU time; GET /seen reports when
// each event was first recorded.
//
// Distinctness is judged two ways:
//   - by sequence number: every driver puts the loop index in
//     properties.amount, which is unique per event in a run and present for
//     all three SDKs. Lost and duplicate counts in the report use this.
//   - by messageId (ours, Segment) or uuid (posthog), when the SDK sets one.
//     posthog-go v1.5.2 sends an empty uuid unless the caller sets one, so
//     for it only the sequence number is available.
package sink

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/relaykit/analytics-go/bench/internal/rusage"
)

// Fault modes.
const (
	FaultNone    = "none"
	Fault500     = "500"     // a fraction of requests answered 500, not recorded
	Fault429     = "429"     // a fraction answered 429 + Retry-After: 1, not recorded
	FaultLostAck = "lostack" // a fraction recorded, then answered 500
	// FaultLimiter answers 429 with a whole-second Retry-After when a
	// token bucket of Limit events/s (burst: one second's worth) has too
	// few tokens for the batch; nothing is recorded then.
	FaultLimiter = "limiter"
)

// Outage modes.
const (
	Outage500   = "500"   // every request answered 500, not recorded
	OutageReset = "reset" // every connection closed with a reset (RST), as if nothing listened
)

// retryAfter is the Retry-After the 429 fault mode sends.
const retryAfter = time.Second

// Config configures a Server.
type Config struct {
	Fault string  // one of the Fault… constants ("" = none)
	Rate  float64 // fraction of requests that get the fault (default 0.2)
	Seed  uint64  // RNG seed for the fault decisions
	Limit float64 // FaultLimiter: events/s the bucket refills (default 15 000)

	// Outage > 0 makes every request fail for that long, starting
	// OutageAfter after the first batch request. OutageMode is Outage500
	// (default) or OutageReset. Fault decisions still apply outside it.
	Outage      time.Duration
	OutageAfter time.Duration
	OutageMode  string
}

// Stats is what GET /stats returns.
type Stats struct {
	Fault        string           `json:"fault"`
	Requests     int64            `json:"requests"`      // batch POSTs received
	Status       map[string]int64 `json:"status"`        // responses by status code
	Paths        map[string]int64 `json:"paths"`         // batch POSTs by path
	Recorded     int64            `json:"recorded"`      // batches decoded and counted
	Events       int64            `json:"events"`        // events in recorded batches (with repeats)
	DistinctSeq  int64            `json:"distinct_seq"`  // distinct properties.amount values
	DupSeq       int64            `json:"dup_seq"`       // events whose amount was already seen
	NoSeq        int64            `json:"no_seq"`        // events without an integer properties.amount
	DistinctIDs  int64            `json:"distinct_ids"`  // distinct non-empty messageId/uuid
	DupIDs       int64            `json:"dup_ids"`       // events whose id was already seen
	NoID         int64            `json:"no_id"`         // events without messageId/uuid
	BodyBytes    int64            `json:"body_bytes"`    // request bytes on the wire
	GzipRequests int64            `json:"gzip_requests"` // requests with Content-Encoding: gzip
	DecodeErrors int64            `json:"decode_errors"` // bodies that failed to decode (answered 400)
	CPUUserUS    int64            `json:"cpu_user_us"`   // sink process CPU (getrusage RUSAGE_SELF)
	CPUSysUS     int64            `json:"cpu_sys_us"`
	MaxRSSKB     int64            `json:"max_rss_kb"`

	// 429 mode: every 429 sets a deadline (send time + Retry-After). A
	// request that arrives after a 429 was sent and before its deadline is a
	// gate violation; requests already in flight when the 429 was sent (they
	// arrived before its send time) are not.
	Sent429        int64 `json:"sent_429"`
	GateViolations int64 `json:"gate_violations"`
	// GateViolations10ms counts the violations that arrived 10 ms or more
	// after the 429 was sent, so a client's own in-process race (a request
	// leaving while the 429 is being read) cannot explain them.
	GateViolations10ms int64 `json:"gate_violations_10ms"`
	// GateViolationMaxMS is the latest arrival of a violation after the
	// 429 it violated was sent, in milliseconds.
	GateViolationMaxMS float64 `json:"gate_violation_max_ms"`
	// SentAtViolations judges by the body's "sentAt" instead of the
	// arrival: requests whose sentAt falls after a 429 was sent and before
	// its deadline. Ours stamps sentAt on every attempt (nanoseconds), so
	// for ours this is "sent while the gate was closed"; segment stamps it
	// once per batch (a retry keeps the first attempt's), posthog not at
	// all, so for them only the arrival count means anything.
	SentAtViolations     int64   `json:"sentat_violations"`
	SentAtViolationMaxMS float64 `json:"sentat_violation_max_ms"`
	SentAtRequests       int64   `json:"sentat_requests"` // requests with a parseable sentAt (429 mode only)

	// Outage: window in Unix nanoseconds (0 if it has not started), the
	// failed attempts during it (requests answered 500 or aborted, plus
	// connections reset at accept), their mean rate and the most in any
	// 1-second window.
	OutageMode        string  `json:"outage_mode,omitempty"`
	OutageStartUnixNS int64   `json:"outage_start_unix_ns,omitempty"`
	OutageEndUnixNS   int64   `json:"outage_end_unix_ns,omitempty"`
	OutageAttempts    int64   `json:"outage_attempts,omitempty"`
	OutageAttemptsPS  float64 `json:"outage_attempts_per_s,omitempty"`
	OutageMaxIn1s     int64   `json:"outage_max_in_1s,omitempty"`
}

// Server is the sink's http.Handler.
type Server struct {
	cfg  Config
	seed maphash.Seed

	mu        sync.Mutex
	rng       *rand.Rand
	st        Stats
	seqCounts []uint16         // index = amount, for amounts in [0, 1<<26)
	seqOther  map[int64]uint32 // amounts outside that range
	firstSeen []uint32         // index = amount: ms since start + 1 when first recorded, 0 = never
	ids       map[uint64]uint32

	start     time.Time // New
	last429   time.Time // send time of the latest 429 (its deadline is + last429RA)
	last429RA time.Duration
	tokens    float64     // FaultLimiter bucket
	refilled  time.Time   // FaultLimiter: last refill
	sends429  []time.Time // send times of every 429, ascending
	outStart  time.Time   // outage window; zero until the first batch request
	outEnd    time.Time
	outTimes  []time.Duration // attempt times during the outage, since outStart
	conns     map[net.Conn]struct{}
	connsOpen bool // Track has been called: conns is maintained

	bufs sync.Pool
}

// New returns a Server; an unknown fault mode is an error.
func New(cfg Config) (*Server, error) {
	switch cfg.Fault {
	case "":
		cfg.Fault = FaultNone
	case FaultNone, Fault500, Fault429, FaultLostAck, FaultLimiter:
	default:
		return nil, fmt.Errorf("sink: unknown fault mode %q (none, 500, 429, lostack, limiter)", cfg.Fault)
	}
	switch cfg.OutageMode {
	case "":
		cfg.OutageMode = Outage500
	case Outage500, OutageReset:
	default:
		return nil, fmt.Errorf("sink: unknown outage mode %q (500, reset)", cfg.OutageMode)
	}
	if cfg.Rate == 0 {
		cfg.Rate = 0.2
	}
	return &Server{
		cfg:      cfg,
		start:    time.Now(),
		conns:    map[net.Conn]struct{}{},
		seed:     maphash.MakeSeed(),
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		st:       Stats{Fault: cfg.Fault, Status: map[string]int64{}, Paths: map[string]int64{}},
		seqOther: map[int64]uint32{},
		ids:      make(map[uint64]uint32, 1<<16),
		bufs:     sync.Pool{New: func() any { return new(bytes.Buffer) }},
	}, nil
}

// payload is the part of a batch body the sink looks at. Ours and Segment
// send {"batch":[{"messageId":…}]}, posthog {"api_key":…,"batch":[{"uuid":…}]}.
type payload struct {
	Batch []struct {
		MessageID  string `json:"messageId"`
		UUID       string `json:"uuid"`
		Properties struct {
			Amount *int64 `json:"amount"`
		} `json:"properties"`
	} `json:"batch"`
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/stats":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Stats())
	case r.Method == http.MethodGet && r.URL.Path == "/seen":
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(s.Seen())
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/batch" || r.URL.Path == "/batch/" || r.URL.Path == "/batch"):
		s.batch(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	s.mu.Lock()
	if !s.last429.IsZero() && arrived.Before(s.last429.Add(s.last429RA)) {
		s.st.GateViolations++ // last429 was sent before this request arrived
		late := arrived.Sub(s.last429)
		if late >= 10*time.Millisecond {
			s.st.GateViolations10ms++
		}
		s.st.GateViolationMaxMS = max(s.st.GateViolationMaxMS, float64(late)/float64(time.Millisecond))
	}
	out := s.outage(arrived)
	s.mu.Unlock()
	if out && s.cfg.OutageMode == OutageReset {
		panic(http.ErrAbortHandler) // closes the connection without a response
	}

	buf := s.bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer s.bufs.Put(buf)
	n, err := buf.ReadFrom(r.Body)
	if err != nil {
		s.respond(w, r, http.StatusBadRequest, n, false)
		return
	}
	if out {
		s.respond(w, r, http.StatusInternalServerError, n, false)
		return
	}
	if s.cfg.Fault == Fault429 || s.cfg.Fault == FaultLimiter {
		s.checkSentAt(buf.Bytes())
	}

	s.mu.Lock()
	fault := s.cfg.Fault != FaultNone && s.cfg.Fault != FaultLimiter && s.rng.Float64() < s.cfg.Rate
	s.mu.Unlock()

	if fault && (s.cfg.Fault == Fault500 || s.cfg.Fault == Fault429) {
		if s.cfg.Fault == Fault429 {
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
			s.respond(w, r, http.StatusTooManyRequests, n, false)
		} else {
			s.respond(w, r, http.StatusInternalServerError, n, false)
		}
		return
	}

	body := buf.Bytes()
	gz := r.Header.Get("Content-Encoding") == "gzip"
	if gz {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err == nil {
			body, err = io.ReadAll(zr)
		}
		if err != nil {
			s.decodeError(w, r, n, gz)
			return
		}
	}
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		s.decodeError(w, r, n, gz)
		return
	}

	if s.cfg.Fault == FaultLimiter {
		if wait, ok := s.take(len(p.Batch)); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(wait))
			s.respond(w, r, http.StatusTooManyRequests, n, gz)
			return
		}
	}

	s.mu.Lock()
	s.st.Recorded++
	ms := uint32(time.Since(s.start)/time.Millisecond) + 1
	for i := range p.Batch {
		e := &p.Batch[i]
		s.st.Events++
		if a := e.Properties.Amount; a != nil {
			if s.seen(*a, ms) {
				s.st.DupSeq++
			} else {
				s.st.DistinctSeq++
			}
		} else {
			s.st.NoSeq++
		}
		id := e.MessageID
		if id == "" {
			id = e.UUID
		}
		if id == "" {
			s.st.NoID++
			continue
		}
		h := maphash.String(s.seed, id)
		if s.ids[h] > 0 {
			s.st.DupIDs++
		} else {
			s.st.DistinctIDs++
		}
		s.ids[h]++
	}
	s.mu.Unlock()

	status := http.StatusOK
	if fault { // lostack: recorded, but the client is told it failed
		status = http.StatusInternalServerError
	}
	s.respond(w, r, status, n, gz)
}

// seen records amount a, first seen at ms (since start, + 1), and reports
// whether it had been seen before. s.mu held.
func (s *Server) seen(a int64, ms uint32) bool {
	const dense = 1 << 26
	if a >= 0 && a < dense {
		if int(a) >= len(s.seqCounts) {
			grow := max(int(a)+1, 2*len(s.seqCounts), 1<<16)
			s.seqCounts = append(s.seqCounts, make([]uint16, grow-len(s.seqCounts))...)
			s.firstSeen = append(s.firstSeen, make([]uint32, grow-len(s.firstSeen))...)
		}
		c := s.seqCounts[a]
		if c < ^uint16(0) {
			s.seqCounts[a] = c + 1
		}
		if c == 0 {
			s.firstSeen[a] = ms
		}
		return c > 0
	}
	c := s.seqOther[a]
	s.seqOther[a] = c + 1
	return c > 0
}

// take asks the limiter's bucket for n events; when it has too few, it
// returns the whole seconds until it will have them (at least 1).
func (s *Server) take(n int) (wait int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.cfg.Limit
	if limit <= 0 {
		limit = 15000
	}
	now := time.Now()
	if s.refilled.IsZero() {
		s.tokens = limit
	} else {
		s.tokens = min(limit, s.tokens+now.Sub(s.refilled).Seconds()*limit)
	}
	s.refilled = now
	if s.tokens >= float64(n) {
		s.tokens -= float64(n)
		return 0, true
	}
	return max(1, int(math.Ceil((float64(n)-s.tokens)/limit))), false
}

func (s *Server) decodeError(w http.ResponseWriter, r *http.Request, n int64, gz bool) {
	s.mu.Lock()
	s.st.DecodeErrors++
	s.mu.Unlock()
	s.respond(w, r, http.StatusBadRequest, n, gz)
}

func (s *Server) respond(w http.ResponseWriter, r *http.Request, status int, n int64, gz bool) {
	if status == http.StatusTooManyRequests {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":"injected fault"}`)
		if f, ok := w.(http.Flusher); ok {
			f.Flush() // the response is on the wire: its deadline starts now
		}
		s.mu.Lock()
		s.last429 = time.Now()
		s.last429RA = retryAfter
		if secs, err := strconv.Atoi(w.Header().Get("Retry-After")); err == nil {
			s.last429RA = time.Duration(secs) * time.Second
		}
		s.sends429 = append(s.sends429, s.last429)
		s.st.Sent429++
		s.count(r, status, n, gz)
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	s.count(r, status, n, gz)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if status < 300 {
		_, _ = io.WriteString(w, `{"success":true}`)
	} else {
		_, _ = io.WriteString(w, `{"error":"injected fault"}`)
	}
}

// count adds one answered request. s.mu held.
func (s *Server) count(r *http.Request, status int, n int64, gz bool) {
	s.st.Requests++
	s.st.Status[strconv.Itoa(status)]++
	s.st.Paths[r.URL.Path]++
	s.st.BodyBytes += n
	if gz {
		s.st.GzipRequests++
	}
}

// checkSentAt counts a gate violation judged by the body's sentAt (an
// uncompressed body only).
func (s *Server) checkSentAt(body []byte) {
	const key = `"sentAt":"`
	i := bytes.LastIndex(body, []byte(key))
	if i < 0 {
		return
	}
	rest := body[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return
	}
	at, err := time.Parse(time.RFC3339Nano, string(rest[:j]))
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.SentAtRequests++
	k := sort.Search(len(s.sends429), func(k int) bool { return s.sends429[k].After(at) }) - 1
	if k >= 0 && at.Before(s.sends429[k].Add(retryAfter)) {
		s.st.SentAtViolations++
		s.st.SentAtViolationMaxMS = max(s.st.SentAtViolationMaxMS, float64(at.Sub(s.sends429[k]))/float64(time.Millisecond))
	}
}

// outage reports whether t is inside the outage window and records the
// attempt if so; the first call starts the clock. s.mu held.
func (s *Server) outage(t time.Time) bool {
	if s.cfg.Outage <= 0 {
		return false
	}
	if s.outStart.IsZero() {
		s.outStart = t.Add(s.cfg.OutageAfter)
		s.outEnd = s.outStart.Add(s.cfg.Outage)
		s.st.OutageMode = s.cfg.OutageMode
		if s.cfg.OutageMode == OutageReset {
			time.AfterFunc(s.cfg.OutageAfter, s.resetConns)
		}
	}
	if t.Before(s.outStart) || !t.Before(s.outEnd) {
		return false
	}
	s.outTimes = append(s.outTimes, t.Sub(s.outStart))
	return true
}

// resetConns closes every open connection at the start of a reset outage.
func (s *Server) resetConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		reset(c)
		delete(s.conns, c)
	}
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST instead of FIN
	}
	_ = c.Close()
}

// ConnState is the http.Server ConnState hook; the sink needs it to close
// open connections when a reset outage begins.
func (s *Server) ConnState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	}
}

// Listener wraps ln: during a reset outage it accepts each connection and
// resets it at once, counting it as a failed attempt.
func (s *Server) Listener(ln net.Listener) net.Listener { return &resetListener{ln, s} }

type resetListener struct {
	net.Listener
	s *Server
}

func (l *resetListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.s.cfg.OutageMode != OutageReset {
			return c, err
		}
		l.s.mu.Lock()
		out := l.s.outage(time.Now())
		l.s.mu.Unlock()
		if !out {
			return c, nil
		}
		reset(c)
	}
}

// Seen returns, little-endian, the sink's start time (int64 Unix ns) and
// then one uint32 per amount 0, 1, …: the millisecond since the start at
// which that amount was first recorded, plus 1; 0 if never.
func (s *Server) Seen() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := make([]byte, 8+4*len(s.firstSeen))
	binary.LittleEndian.PutUint64(b, uint64(s.start.UnixNano()))
	for i, v := range s.firstSeen {
		binary.LittleEndian.PutUint32(b[8+4*i:], v)
	}
	return b
}

// Stats returns a snapshot of the counts plus the process's CPU time.
func (s *Server) Stats() Stats {
	ru := rusage.Self()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Status = make(map[string]int64, len(s.st.Status))
	for k, v := range s.st.Status {
		st.Status[k] = v
	}
	st.Paths = make(map[string]int64, len(s.st.Paths))
	for k, v := range s.st.Paths {
		st.Paths[k] = v
	}
	if !s.outStart.IsZero() {
		st.OutageStartUnixNS = s.outStart.UnixNano()
		st.OutageEndUnixNS = s.outEnd.UnixNano()
		st.OutageAttempts = int64(len(s.outTimes))
		if d := min(time.Since(s.outStart), s.cfg.Outage); d > 0 {
			st.OutageAttemptsPS = float64(len(s.outTimes)) / d.Seconds()
		}
		// Most attempts in any 1 s window.
		ts := slices.Clone(s.outTimes)
		slices.Sort(ts)
		j := 0
		for i, t := range ts {
			for t-ts[j] >= time.Second {
				j++
			}
			st.OutageMaxIn1s = max(st.OutageMaxIn1s, int64(i-j+1))
		}
	}
	st.CPUUserUS = ru.User.Microseconds()
	st.CPUSysUS = ru.Sys.Microseconds()
	st.MaxRSSKB = ru.MaxRSSKB
	return st
}
