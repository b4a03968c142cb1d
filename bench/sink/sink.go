// Package sink is a loopback HTTP endpoint for the SDK comparison. It
// accepts the batch uploads of the three SDKs (POST /v1/batch for ours and
// Segment v3, POST /batch/ for posthog-go), decodes them, and counts events,
// distinct events and duplicates. A fault mode makes a seeded fraction of
// requests fail. GET /stats reports the counts and the sink's own CPU time.
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
	"encoding/json"
	"fmt"
	"hash/maphash"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"

	"github.com/relaykit/analytics-go/bench/internal/rusage"
)

// Fault modes.
const (
	FaultNone    = "none"
	Fault500     = "500"     // a fraction of requests answered 500, not recorded
	Fault429     = "429"     // a fraction answered 429 + Retry-After: 1, not recorded
	FaultLostAck = "lostack" // a fraction recorded, then answered 500
)

// Config configures a Server.
type Config struct {
	Fault string  // one of the Fault… constants ("" = none)
	Rate  float64 // fraction of requests that get the fault (default 0.2)
	Seed  uint64  // RNG seed for the fault decisions
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
	ids       map[uint64]uint32

	bufs sync.Pool
}

// New returns a Server; an unknown fault mode is an error.
func New(cfg Config) (*Server, error) {
	switch cfg.Fault {
	case "":
		cfg.Fault = FaultNone
	case FaultNone, Fault500, Fault429, FaultLostAck:
	default:
		return nil, fmt.Errorf("sink: unknown fault mode %q (none, 500, 429, lostack)", cfg.Fault)
	}
	if cfg.Rate == 0 {
		cfg.Rate = 0.2
	}
	return &Server{
		cfg:      cfg,
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
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/batch" || r.URL.Path == "/batch/" || r.URL.Path == "/batch"):
		s.batch(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	buf := s.bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer s.bufs.Put(buf)
	n, err := buf.ReadFrom(r.Body)
	if err != nil {
		s.respond(w, r, http.StatusBadRequest, n, false)
		return
	}

	s.mu.Lock()
	fault := s.cfg.Fault != FaultNone && s.rng.Float64() < s.cfg.Rate
	s.mu.Unlock()

	if fault && (s.cfg.Fault == Fault500 || s.cfg.Fault == Fault429) {
		if s.cfg.Fault == Fault429 {
			w.Header().Set("Retry-After", "1")
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

	s.mu.Lock()
	s.st.Recorded++
	for i := range p.Batch {
		e := &p.Batch[i]
		s.st.Events++
		if a := e.Properties.Amount; a != nil {
			if s.seen(*a) {
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

// seen records amount a and reports whether it had been seen before. s.mu held.
func (s *Server) seen(a int64) bool {
	const dense = 1 << 26
	if a >= 0 && a < dense {
		if int(a) >= len(s.seqCounts) {
			grow := max(int(a)+1, 2*len(s.seqCounts), 1<<16)
			s.seqCounts = append(s.seqCounts, make([]uint16, grow-len(s.seqCounts))...)
		}
		c := s.seqCounts[a]
		if c < ^uint16(0) {
			s.seqCounts[a] = c + 1
		}
		return c > 0
	}
	c := s.seqOther[a]
	s.seqOther[a] = c + 1
	return c > 0
}

func (s *Server) decodeError(w http.ResponseWriter, r *http.Request, n int64, gz bool) {
	s.mu.Lock()
	s.st.DecodeErrors++
	s.mu.Unlock()
	s.respond(w, r, http.StatusBadRequest, n, gz)
}

func (s *Server) respond(w http.ResponseWriter, r *http.Request, status int, n int64, gz bool) {
	s.mu.Lock()
	s.st.Requests++
	s.st.Status[strconv.Itoa(status)]++
	s.st.Paths[r.URL.Path]++
	s.st.BodyBytes += n
	if gz {
		s.st.GzipRequests++
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if status < 300 {
		_, _ = io.WriteString(w, `{"success":true}`)
	} else {
		_, _ = io.WriteString(w, `{"error":"injected fault"}`)
	}
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
	st.CPUUserUS = ru.User.Microseconds()
	st.CPUSysUS = ru.Sys.Microseconds()
	st.MaxRSSKB = ru.MaxRSSKB
	return st
}
