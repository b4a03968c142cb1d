package analytics

// The simulated world of TestSimulation (sim_test.go): a scenario drawn from
// a seed, the in-memory server that answers the client, the producers,
// Flush and Close calls that drive it, and the record of everything the
// client did and was told. The checkers are in sim_check_test.go.

import (
	"bytes"
	"compress/gzip"
	"context"
	crand "crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault classes a scenario may draw from (flag -sim.faults). Every class is
// on by default; a class can be turned off to look at the others alone.
const (
	faultMisbehave  = "misbehave"  // transports that return nil bodies, fail or panic in Read, Close, RoundTrip
	faultSmallLimit = "smalllimit" // body limits under 16 KiB
	faultDurable    = "durable"    // durable mode, and a second client on the directory
)

// simScenario is one seed's world, as plain data: it is printed, shrunk
// and replayed (-sim.scenario) as JSON.
type simScenario struct {
	Seed uint64 `json:"seed"` // the server's dice, keyed per batch attempt

	Consumers       int   `json:"consumers"`
	FlushAt         int   `json:"flushAt"`
	FlushIntervalMS int   `json:"flushIntervalMs"`
	QueueCapacity   int   `json:"queueCapacity"`
	HTTPTimeoutMS   int   `json:"httpTimeoutMs"`
	MaxRetries      int   `json:"maxRetries"`     // -1: default
	MaxBackoffMS    int64 `json:"maxBackoffMs"`   // -1: default
	MaxRateLimitMS  int64 `json:"maxRateLimitMs"` // -1: default
	CloseTimeoutMS  int   `json:"closeTimeoutMs"` // -1: default
	Gzip            bool  `json:"gzip,omitempty"`
	EventSentAt     bool  `json:"eventSentAt,omitempty"`
	Defaults        bool  `json:"defaults,omitempty"`
	OnSuccess       bool  `json:"onSuccess,omitempty"` // register OnSuccess (else OnError alone)
	CallbackSlowMS  int   `json:"callbackSlowMs,omitempty"`
	CallbackPanic   int   `json:"callbackPanic,omitempty"` // every n-th callback call panics

	Producers []simProducer `json:"producers"`

	// The server.
	Answers    []simWeight `json:"answers"`              // the mix of answers, by kind
	Outages    []simOutage `json:"outages,omitempty"`    // windows where every request gets one kind
	BodyLimit  int         `json:"bodyLimit,omitempty"`  // 413 above this many bytes (0: none)
	BodyLimit2 int         `json:"bodyLimit2,omitempty"` // the limit from LimitAtMS on
	LimitAtMS  int         `json:"limitAtMs,omitempty"`
	EventLimit int         `json:"eventLimit,omitempty"` // 429 without Retry-After above this many events
	HoldMaxMS  int         `json:"holdMaxMs,omitempty"`  // answers take up to this long
	// Unlucky batches: one in UnluckyEvery (by its first event) is answered
	// 500 on its first UnluckyTimes attempts, whatever the others get.
	UnluckyEvery int `json:"unluckyEvery,omitempty"`
	UnluckyTimes int `json:"unluckyTimes,omitempty"`

	// Durable mode: a disk buffer in a fresh directory; after Close a
	// second client opens it against a server that answers 200 and must
	// send every event the first one kept (docs/durable.md).
	Durable bool `json:"durable,omitempty"`
	// CrashAtMS: in durable mode, the process dies at this instant (0:
	// never); a new client opens what it left (sim_crash_test.go).
	CrashAtMS int `json:"crashAtMs,omitempty"`

	// OAuth: bearer tokens from the simulated auth server, which issues
	// them with expires_in TokenTTL seconds (R50).
	OAuth    bool `json:"oauth,omitempty"`
	TokenTTL int  `json:"tokenTtl,omitempty"`
	// The auth server answers 503 to token requests from AuthDownMS for
	// AuthDownForMS (0: never).
	AuthDownMS    int `json:"authDownMs,omitempty"`
	AuthDownForMS int `json:"authDownForMs,omitempty"`

	Flushes   []simCall `json:"flushes,omitempty"`
	CloseAtMS int       `json:"closeAtMs"`
	Close     simCall   `json:"close"`
}

type simProducer struct {
	StartMS     int  `json:"startMs"`
	Count       int  `json:"count"`
	GapMS       int  `json:"gapMs"`           // between bursts
	Burst       int  `json:"burst"`           // events per burst
	Size        int  `json:"size"`            // padding bytes, up to
	Context     bool `json:"ctx,omitempty"`   // EnqueueContext (else Track/Enqueue)
	CtxMS       int  `json:"ctxMs,omitempty"` // EnqueueContext's timeout
	PoisonEvery int  `json:"poison,omitempty"`
	GenID       bool `json:"gen,omitempty"` // leave MessageID empty: the client generates it (R2); the event's own id is properties.sid
	BadEvery    int  `json:"bad,omitempty"` // invalid or too large events
}

type simWeight struct {
	Kind   string `json:"k"`
	Weight int    `json:"w"`
}

type simOutage struct {
	FromMS int    `json:"from"`
	ToMS   int    `json:"to"`
	Kind   string `json:"k"`
}

// simCall is a Flush or Close: when, and its context.
type simCall struct {
	AtMS int    `json:"at,omitempty"`
	Ctx  string `json:"ctx"` // "timeout", "done", "background"
	MS   int    `json:"ms,omitempty"`
}

// Answer kinds. The server picks one per attempt from the scenario's mix.
var simKinds = []string{
	"ok", "ok-odd", // 2xx: 200 {}, or 201/202/204 with odd bodies
	"retry5xx", "retry4xx", // retryable statuses, Retry-After in any form or none
	"ratelimit",          // 429 or 503 with a usable Retry-After
	"fail4xx", "fail5xx", // not retried
	"redirect", "redirect307", "redirect-away", // 3xx; 307/308 same origin; 307 to another host
	"odd-status",                      // 1xx and out of range
	"reset", "timeout", "slow", "cut", // transport errors, attempt timeouts, slow and truncated bodies
	// A transport that misbehaves (fault class misbehave): a nil Body, a
	// Body whose reader is nil, Read or Close failing or panicking, a
	// panic in RoundTrip, a nil response with a nil error.
	"mb-nil-body", "mb-nil-reader", "mb-read-error", "mb-read-panic", "mb-close-error", "mb-close-panic", "mb-roundtrip-panic", "mb-nil-nil",
}

// simGenerate draws the scenario of one seed from the whole valid space.
func simGenerate(seed uint64, faults map[string]bool) simScenario {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	pick := func(xs ...int) int { return xs[r.IntN(len(xs))] }
	maybe := func(p float64) bool { return r.Float64() < p }
	s := simScenario{Seed: seed}
	s.Consumers = pick(1, 1, 2, 3, 4, 8)
	s.FlushAt = pick(1, 2, 3, 5, 10, 25, 100, 250)
	s.FlushIntervalMS = pick(50, 200, 1000, 5000, 60000)
	s.QueueCapacity = pick(1, 2, 5, 20, 100, 1000, 30000)
	s.HTTPTimeoutMS = pick(300, 1000, 5000, 10000)
	s.MaxRetries = pick(-1, 0, 1, 2, 5, 20, 1000)
	s.MaxBackoffMS = int64(pick(-1, -1, 0, 1000, 5000, 60000, 3600000))
	s.MaxRateLimitMS = int64(pick(-1, -1, 0, 1000, 4000, 30000, 600000))
	s.CloseTimeoutMS = pick(-1, 500, 2000, 10000)
	s.Gzip = maybe(0.3)
	s.EventSentAt = maybe(0.2)
	s.Defaults = maybe(0.2)
	s.OnSuccess = maybe(0.7)
	if maybe(0.2) {
		s.CallbackSlowMS = pick(1, 50, 300, 2000)
	}
	if maybe(0.15) {
		s.CallbackPanic = pick(1, 2, 5)
	}

	for range 1 + r.IntN(3) {
		p := simProducer{
			StartMS: pick(0, 0, 100, 1000, 5000),
			Count:   pick(1, 3, 10, 40, 120, 300),
			GapMS:   pick(0, 1, 10, 100, 500),
			Burst:   pick(1, 1, 5, 50),
			Size:    pick(10, 10, 200, 2000, 20000, 32000),
			Context: maybe(0.3),
		}
		if p.Context {
			p.CtxMS = pick(0, 10, 1000, 60000)
		}
		if maybe(0.2) {
			p.PoisonEvery = pick(1, 3, 17, 60)
		}
		if maybe(0.15) {
			p.BadEvery = pick(2, 7, 30)
		}
		s.Producers = append(s.Producers, p)
	}

	// The server: a mix of answers, the 2xx usually weighty.
	s.Answers = []simWeight{{"ok", pick(0, 5, 20, 50, 100)}}
	for _, k := range simKinds[1:] {
		mb := strings.HasPrefix(k, "mb-")
		if mb && !faults[faultMisbehave] {
			continue
		}
		if maybe(0.35) && (!mb || maybe(0.3)) {
			s.Answers = append(s.Answers, simWeight{k, pick(1, 2, 5, 10, 30)})
		}
	}
	if maybe(0.3) {
		s.HoldMaxMS = pick(10, 200, 2000, 15000)
	}
	for range r.IntN(3) {
		from := r.IntN(60000)
		s.Outages = append(s.Outages, simOutage{FromMS: from, ToMS: from + pick(100, 1000, 10000, 60000, 300000),
			Kind: []string{"retry5xx", "reset", "ratelimit", "timeout", "fail4xx"}[r.IntN(5)]})
	}
	if maybe(0.25) {
		lo := 16 << 10
		if faults[faultSmallLimit] {
			lo = 600
		}
		s.BodyLimit = lo + r.IntN(pick(4000, 60000, 500000))
		if maybe(0.3) {
			s.BodyLimit2 = lo + r.IntN(pick(4000, 60000, 500000))
			s.LimitAtMS = r.IntN(20000)
		}
	}
	if maybe(0.15) {
		s.EventLimit = pick(1, 3, 20, 100)
	}

	if maybe(0.3) {
		s.UnluckyEvery, s.UnluckyTimes = pick(2, 5, 20), pick(1, 2, 3, 5)
	}
	if maybe(0.25) {
		// A plain world: a server that mostly answers, a few kinds of
		// failure, nothing that moves instants (holds, slow bodies, limits).
		s.Answers = []simWeight{{"ok", pick(20, 50, 100)}, {"plain5xx", pick(1, 5, 20)}}
		if maybe(0.5) {
			s.Answers = append(s.Answers, simWeight{"reset", pick(1, 5)})
		}
		if maybe(0.5) { // many small batches: the allowance binds in an outage (R63)
			s.FlushAt = 1
			s.Producers = append(s.Producers, simProducer{Count: 300, GapMS: pick(5, 20, 50), Burst: 1, Size: 10})
		}
		s.Outages = nil
		if maybe(0.6) {
			from := r.IntN(20000)
			s.Outages = []simOutage{{FromMS: from, ToMS: from + pick(2000, 10000, 30000), Kind: []string{"plain5xx", "reset"}[r.IntN(2)]}}
		}
		s.HoldMaxMS, s.BodyLimit, s.BodyLimit2, s.EventLimit, s.CallbackSlowMS = 0, 0, 0, 0, 0
	}
	s.Durable = maybe(0.12) && faults[faultDurable]
	for range r.IntN(4) {
		s.Flushes = append(s.Flushes, simCall{AtMS: r.IntN(30000), Ctx: []string{"timeout", "timeout", "done", "background"}[r.IntN(4)], MS: pick(10, 500, 5000, 60000)})
	}
	s.CloseAtMS = pick(0, 10, 1000, 5000, 30000, 120000)
	s.Close = simCall{Ctx: []string{"timeout", "timeout", "done", "background"}[r.IntN(4)], MS: pick(1, 100, 1000, 10000, 60000)}
	if maybe(0.12) {
		// A rate limiter in front of the server: a stretch of usable
		// Retry-Afters, answers that take time, several consumers with
		// batches waiting when the gate opens (R31–R35, R64), and a run
		// long enough to see the cap of 300 s served (R24).
		s.Consumers = pick(2, 3, 4, 8)
		from := r.IntN(5000)
		s.Outages = append(s.Outages, simOutage{FromMS: from, ToMS: from + pick(10000, 30000, 60000, 400000), Kind: "ratelimit"})
		s.HoldMaxMS = pick(10, 200, 2000)
		s.MaxRateLimitMS = int64(pick(-1, 600000, 30000, 4000))
		s.CloseAtMS = pick(70000, 400000, 700000)
		s.CallbackSlowMS = 0
		kept := s.Answers[:0]
		for _, w := range s.Answers {
			if w.Kind != "slow" && w.Kind != "cut" { // answers taken in when they arrive
				kept = append(kept, w)
			}
		}
		s.Answers = kept
	}
	for i := range s.Producers {
		s.Producers[i].GenID = maybe(0.25)
	}
	if maybe(0.15) {
		s.OAuth, s.TokenTTL = true, pick(2, 10, 60, 3600)
		if maybe(0.5) {
			s.AuthDownMS, s.AuthDownForMS = r.IntN(20000), pick(5000, 30000, 120000)
		}
	}
	simDrawCrash(&s)
	return s
}

// simKey is the RSA key of the OAuth worlds, made once per process.
var simKey = sync.OnceValue(func() []byte {
	k, err := rsa.GenerateKey(crand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
})

// simIDOf is the event's own id in a callback's message, and its ID().
func simIDOf(m Message) (id, wire string) {
	if t, ok := m.(Track); ok {
		if sid, ok := t.Properties["sid"].(string); ok {
			return sid, m.ID()
		}
	}
	return m.ID(), m.ID()
}

func (s simScenario) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// options turns the scenario into the client's options.
func (s simScenario) options() []Option {
	o := []Option{
		WithEndpoint("http://api.test"),
		WithConsumers(s.Consumers),
		WithFlushAt(s.FlushAt),
		WithFlushInterval(ms(s.FlushIntervalMS)),
		WithQueueCapacity(s.QueueCapacity),
		WithHTTPTimeout(ms(s.HTTPTimeoutMS)),
		WithGzip(s.Gzip),
		WithEventSentAt(s.EventSentAt),
	}
	if s.MaxRetries >= 0 {
		o = append(o, WithMaxRetries(s.MaxRetries))
	}
	if s.MaxBackoffMS >= 0 {
		o = append(o, WithMaxTotalBackoffDuration(ms64(s.MaxBackoffMS)))
	}
	if s.MaxRateLimitMS >= 0 {
		o = append(o, WithMaxRateLimitDuration(ms64(s.MaxRateLimitMS)))
	}
	if s.CloseTimeoutMS >= 0 {
		o = append(o, WithCloseTimeout(ms(s.CloseTimeoutMS)))
	}
	if s.OAuth {
		o = append(o, WithOAuth(OAuthConfig{ClientID: "sim", KeyID: "sim-kid", PrivateKey: simKey(), AuthServer: "http://auth.test"}))
	}
	if s.Defaults {
		o = append(o, WithDefaultContext(map[string]any{"app": map[string]any{"name": "sim"}}), WithDefaultProperties(map[string]any{"env": "sim"}))
	}
	return o
}

func (s simScenario) maxRetries() int {
	if s.MaxRetries < 0 {
		return 1000
	}
	return s.MaxRetries
}

func (s simScenario) maxBackoff() time.Duration {
	if s.MaxBackoffMS < 0 {
		return 12 * time.Hour
	}
	return ms64(s.MaxBackoffMS)
}

func (s simScenario) maxRateLimit() time.Duration {
	if s.MaxRateLimitMS < 0 {
		return 12 * time.Hour
	}
	return ms64(s.MaxRateLimitMS)
}

func (s simScenario) closeTimeout() time.Duration {
	if s.CloseTimeoutMS < 0 {
		return 30 * time.Second
	}
	return ms(s.CloseTimeoutMS)
}

func ms(n int) time.Duration     { return time.Duration(n) * time.Millisecond }
func ms64(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// simRequest is one request as the server saw it, and its answer.
type simRequest struct {
	at, done   time.Time
	end        time.Time // the body closed (the client's decision comes after); zero if never
	hop        bool      // a redirect hop: part of the attempt of the request before
	host, path string
	header     http.Header
	ids        []string
	size       int // uncompressed body bytes
	status     int // 0: no response (transport error, timeout, panic)
	kind       string
	raUsable   bool      // a usable Retry-After (R20–R25) on a retryable status
	raUntil    time.Time // the instant it names (capped at 300 s)
	next       int       // index of the hop that continued this attempt (307), or -1
	sentAtBody string
	events     []simWireEvent
	writeKey   string
	mids       []string // the messageIds as sent (ids holds the sid of an event whose id was generated)
	retryable  bool     // the status is retryable (R12, R13, R50)
}

// simWireEvent is what the checkers read of one event in a body.
type simWireEvent struct {
	ID, Type, SentAt, Timestamp string
	UserID                      string
	Event                       string
	I                           any
	Env                         any // properties.env (WithDefaultProperties)
	App                         any // context.app (WithDefaultContext)
	Library                     any // context.library
}

// simServer is the in-memory server and transport.
type simServer struct {
	sc     simScenario
	faults map[string]bool
	start  time.Time
	auth   string

	allOK bool // the second client's server in durable mode: 200 to everything

	mu     sync.Mutex
	tokens map[string]time.Time // OAuth: the tokens issued, and when
	reqs   []*simRequest
	orig   map[*http.Request]int // original request → its record, for redirect hops
}

func newSimServer(sc simScenario, faults map[string]bool) *simServer {
	return &simServer{sc: sc, faults: faults, start: time.Now(), orig: map[*http.Request]int{},
		auth: "Basic " + "c2ltLWtleTo="} // base64("sim-key:")
}

// dice is the server's randomness for one attempt of one batch: the same
// whatever the goroutines' interleaving.
func (s *simServer) dice(ids []string, retry string, hop bool) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%d|%s|%v|", s.sc.Seed, len(ids), retry, hop)
	if len(ids) > 0 {
		h.Write([]byte(ids[0]))
		h.Write([]byte(ids[len(ids)-1]))
	}
	return rand.New(rand.NewPCG(h.Sum64(), s.sc.Seed))
}

func (s *simServer) pickKind(r *rand.Rand, now time.Duration) string {
	for _, o := range s.sc.Outages {
		if now >= ms(o.FromMS) && now < ms(o.ToMS) {
			return o.Kind
		}
	}
	total := 0
	for _, w := range s.sc.Answers {
		total += w.Weight
	}
	if total == 0 {
		return "retry5xx"
	}
	n := r.IntN(total)
	for _, w := range s.sc.Answers {
		if n < w.Weight {
			return w.Kind
		}
		n -= w.Weight
	}
	return "ok"
}

// retryAfter draws a Retry-After header in any form, and what the
// contract makes of it: the instant it names if usable (R20–R24).
func simRetryAfter(r *rand.Rand, now time.Time, usable bool) (string, bool, time.Time) {
	wall := now.UTC()
	date := func(d time.Duration, layout string) string { return wall.Truncate(time.Second).Add(d).Format(layout) }
	capAt := func(t time.Time) time.Time { return minTime(t, now.Add(300*time.Second)) }
	if usable {
		switch r.IntN(6) {
		case 0, 1, 2:
			n := 1 + r.IntN(4)
			return strconv.Itoa(n), true, now.Add(time.Duration(n) * time.Second)
		case 3:
			n := []string{"400", "99999999999999999999", "9300000000"}[r.IntN(3)]
			return n, true, now.Add(300 * time.Second)
		default:
			d := time.Duration(2+r.IntN(4)) * time.Second
			forms := []string{http.TimeFormat, time.RFC850, time.ANSIC, "Mon, 02 Jan 2006 15:04:05 -0000", "Mon, 02 Jan 2006 15:04:05 +0000"}
			f := forms[r.IntN(len(forms))]
			v := date(d, f)
			if f == time.RFC850 {
				v = strings.Replace(v, "UTC", "GMT", 1)
			}
			if f == http.TimeFormat {
				v = wall.Truncate(time.Second).Add(d).Format(http.TimeFormat)
			}
			t := wall.Truncate(time.Second).Add(d)
			// The stated instant, on the monotonic clock.
			return v, true, capAt(now.Add(t.Sub(wall)))
		}
	}
	forms := []string{"0", "-3", "soon", "2.5", "+5", "1e3", "5 s", "", " ",
		date(-time.Hour, http.TimeFormat), date(3*time.Second, "Mon, 02 Jan 2006 15:04:05 EST")}
	return forms[r.IntN(len(forms))], false, time.Time{}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// retryable is R12 and R13, and R50's 511 with OAuth.
func (s *simServer) retryable(status int) bool {
	return simRetryable(status) || s.sc.OAuth && status == 511
}

// simRetryable is R12 and R13 (no OAuth).
func simRetryable(status int) bool {
	switch {
	case status == 408 || status == 410 || status == 429 || status == 460:
		return true
	case status >= 500 && status <= 599:
		return status != 501 && status != 505 && status != 511
	}
	return false
}

type simBody struct {
	srv      *simServer
	n        int
	r        io.Reader
	ctx      context.Context
	delay    time.Duration
	readErr  bool
	panicky  string // "read", "close"
	closeErr bool
}

func (b *simBody) Read(p []byte) (int, error) {
	if b.panicky == "read" {
		panic("sim: body Read panics")
	}
	if b.readErr {
		return 0, errors.New("sim: body read fails")
	}
	if b.delay > 0 {
		t := time.NewTimer(b.delay)
		select {
		case <-t.C:
		case <-b.ctx.Done():
			t.Stop()
			return 0, b.ctx.Err()
		}
		b.delay = 0
	}
	return b.r.Read(p)
}

func (b *simBody) Close() error {
	b.srv.mu.Lock()
	b.srv.reqs[b.n].end = time.Now()
	b.srv.mu.Unlock()
	if b.panicky == "close" {
		panic("sim: body Close panics")
	}
	if b.closeErr {
		return errors.New("sim: body close fails")
	}
	return nil
}

func (s *simServer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == "auth.test" {
		return s.token(req)
	}
	var raw []byte
	if req.Body != nil {
		raw, _ = io.ReadAll(req.Body)
		_ = req.Body.Close()
	}
	body := raw
	if req.Header.Get("Content-Encoding") == "gzip" {
		if zr, err := gzip.NewReader(bytes.NewReader(raw)); err == nil {
			body, _ = io.ReadAll(zr)
		}
	}
	now := time.Now()
	rec := &simRequest{at: now, hop: req.Response != nil, host: req.URL.Host, path: req.URL.Path, header: req.Header.Clone(), size: len(body), next: -1}
	var env struct {
		Batch []struct {
			MessageID  string         `json:"messageId"`
			Type       string         `json:"type"`
			SentAt     string         `json:"sentAt"`
			Timestamp  string         `json:"timestamp"`
			UserID     string         `json:"userId"`
			Event      string         `json:"event"`
			Properties map[string]any `json:"properties"`
			Context    map[string]any `json:"context"`
		} `json:"batch"`
		SentAt   string `json:"sentAt"`
		WriteKey string `json:"writeKey"`
	}
	if json.Unmarshal(body, &env) == nil {
		for _, e := range env.Batch {
			id := e.MessageID
			if sid, ok := e.Properties["sid"].(string); ok {
				id = sid // a generated messageId: the event is known by its sid
			}
			rec.ids = append(rec.ids, id)
			rec.mids = append(rec.mids, e.MessageID)
			rec.events = append(rec.events, simWireEvent{ID: id, Type: e.Type, SentAt: e.SentAt, Timestamp: e.Timestamp,
				UserID: e.UserID, Event: e.Event, I: e.Properties["i"], Env: e.Properties["env"], App: e.Context["app"], Library: e.Context["library"]})
		}
		rec.sentAtBody, rec.writeKey = env.SentAt, env.WriteKey
	}
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, rec)
	if rec.hop {
		if i, ok := s.orig[req.Response.Request]; ok {
			s.reqs[i].next = n
		}
	}
	s.orig[req] = n
	s.mu.Unlock()

	r := s.dice(rec.ids, req.Header.Get("X-Retry-Count"), rec.hop)
	elapsed := now.Sub(s.start)
	kind := s.pickKind(r, elapsed)
	limit := s.sc.BodyLimit
	if s.sc.BodyLimit2 > 0 && elapsed >= ms(s.sc.LimitAtMS) {
		limit = s.sc.BodyLimit2
	}
	poisoned := false
	for _, id := range rec.ids {
		poisoned = poisoned || strings.HasPrefix(id, "x")
	}
	switch {
	case rec.host != "api.test" || s.allOK:
		kind = "ok" // (another host: never reached by a correct client, R11; the checker says so)
	case limit > 0 && len(body) > limit:
		kind = "413"
	case s.sc.EventLimit > 0 && len(rec.ids) > s.sc.EventLimit:
		kind = "429-events"
	case poisoned:
		kind = "poison"
	case s.sc.UnluckyEvery > 0 && len(rec.ids) > 0 && !rec.hop && simHash(rec.ids[0])%uint64(s.sc.UnluckyEvery) == 0:
		if n, _ := strconv.Atoi(req.Header.Get("X-Retry-Count")); n < s.sc.UnluckyTimes {
			kind = "unlucky"
		}
	}
	if rec.hop && (strings.HasPrefix(kind, "redirect") || strings.HasPrefix(kind, "mb-")) {
		kind = "ok" // a hop is answered plainly: no redirect loops
	}
	rec.kind = kind

	status, header, text := 200, http.Header{}, "{}"
	var hold time.Duration
	if s.sc.HoldMaxMS > 0 && !s.allOK {
		hold = time.Duration(r.Int64N(int64(ms(s.sc.HoldMaxMS)) + 1))
	}
	raAny := func() {
		if r.IntN(3) == 0 {
			v, usable, until := simRetryAfter(r, now.Add(hold), r.IntN(2) == 0)
			header.Set("Retry-After", v)
			if usable && simRetryable(status) { // (with OAuth a 511 is a counted retry whatever its Retry-After, R50)
				rec.raUsable, rec.raUntil = true, until
			}
		}
	}
	var misbehave string
	var cut, slow bool
	switch kind {
	case "ok":
	case "ok-odd":
		status = []int{200, 201, 202, 204, 299}[r.IntN(5)]
		text = []string{"", "not json", "[]", "null", `{"success":true}`}[r.IntN(5)]
		raAny()
	case "retry5xx":
		status = []int{500, 502, 503, 504, 508, 529, 599}[r.IntN(7)]
		raAny()
	case "retry4xx":
		status = []int{408, 410, 429, 460}[r.IntN(4)]
		raAny()
	case "ratelimit":
		status = []int{429, 429, 503}[r.IntN(3)]
		v, _, until := simRetryAfter(r, now.Add(hold), true)
		header.Set("Retry-After", v)
		rec.raUsable, rec.raUntil = true, until
	case "fail4xx":
		status = []int{401, 403, 404, 418, 422, 499}[r.IntN(6)]
		text = `{"code":"invalid","message":"refused"}`
		raAny()
	case "fail5xx":
		status = []int{501, 505, 511}[r.IntN(3)]
		raAny()
	case "redirect":
		status = []int{300, 301, 302, 303, 304}[r.IntN(5)]
		if status != 304 && r.IntN(2) == 0 {
			header.Set("Location", "/v1/batch-alt")
		}
	case "redirect307":
		status = []int{307, 308}[r.IntN(2)]
		header.Set("Location", "/v1/batch-alt")
	case "redirect-away":
		status = []int{307, 308}[r.IntN(2)]
		header.Set("Location", []string{"http://other.test/v1/batch", "http://api.test:8080/v1/batch", "http://x.api.test/v1/batch"}[r.IntN(3)])
	case "odd-status":
		status = []int{150, 600, 999}[r.IntN(3)]
		raAny()
	case "reset":
		status = 0
	case "timeout":
		status, hold = 0, ms(s.sc.HTTPTimeoutMS)+time.Second
	case "slow":
		slow = true
		status = []int{200, 500, 429}[r.IntN(3)]
	case "cut":
		cut = true
		status = []int{200, 500, 400}[r.IntN(3)]
		if status == 400 && len(rec.ids) > 1 {
			status = 500
		}
		text = strings.Repeat("x", 500)
	case "mb-nil-body", "mb-nil-reader", "mb-read-error", "mb-read-panic", "mb-close-error", "mb-close-panic", "mb-roundtrip-panic", "mb-nil-nil":
		misbehave = strings.TrimPrefix(kind, "mb-")
		status = []int{200, 500, 400}[r.IntN(3)]
		if status == 400 && len(rec.ids) > 1 {
			status = 500
		}
	case "unlucky":
		status = 500
	case "plain5xx": // no Retry-After at all
		status = []int{500, 502, 503, 504}[r.IntN(4)]
	case "413":
		status = 413
		raAny()
	case "429-events":
		status = 429
	case "poison":
		status = 400
		text = `{"code":"invalid","message":"request neither has anonymousId nor userId"}`
		raAny()
	}
	if hold > 0 {
		t := time.NewTimer(hold)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
			s.finish(n, 0)
			return nil, req.Context().Err()
		}
	}
	if kind == "timeout" { // never reached: the attempt's timeout ends the hold
		s.finish(n, 0)
		return nil, errors.New("sim: timeout")
	}
	switch misbehave {
	case "roundtrip-panic":
		s.finish(n, 0)
		panic("sim: RoundTrip panics")
	case "nil-nil":
		s.finish(n, 0)
		return nil, nil
	}
	if status == 0 {
		s.finish(n, 0)
		return nil, errors.New("sim: connection reset by peer")
	}
	b := &simBody{srv: s, n: n, r: strings.NewReader(text), ctx: req.Context()}
	if slow {
		b.delay = time.Duration(r.Int64N(int64(2 * ms(s.sc.HTTPTimeoutMS))))
	}
	if cut {
		b.r = io.MultiReader(strings.NewReader(text[:3]), cutReader{})
	}
	resp := &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), Header: header,
		Body: b, Request: req, ContentLength: int64(len(text)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	switch misbehave {
	case "nil-body":
		resp.Body, resp.ContentLength = nil, 0 // as test doubles write it (with a length net/http refuses the response)
	case "nil-reader":
		resp.Body = io.NopCloser(nil)
	case "read-error":
		b.readErr = true
	case "read-panic":
		b.panicky = "read"
	case "close-error":
		b.closeErr = true
	case "close-panic":
		b.panicky = "close"
	}
	s.finish(n, status)
	return resp, nil
}

// token answers a token request of an OAuth world (R50): a fresh token
// that lasts TokenTTL seconds.
func (s *simServer) token(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	if el := time.Since(s.start); s.sc.AuthDownForMS > 0 && el >= ms(s.sc.AuthDownMS) && el < ms(s.sc.AuthDownMS+s.sc.AuthDownForMS) {
		return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("{}")), Request: req, ContentLength: 2, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
	}
	s.mu.Lock()
	if s.tokens == nil {
		s.tokens = map[string]time.Time{}
	}
	tok := fmt.Sprintf("tok-%d", len(s.tokens)+1)
	s.tokens[tok] = time.Now()
	s.mu.Unlock()
	text := fmt.Sprintf(`{"access_token":%q,"token_type":"Bearer","expires_in":%d}`, tok, s.sc.TokenTTL)
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(text)), Request: req, ContentLength: int64(len(text)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

func (s *simServer) finish(n, status int) {
	s.mu.Lock()
	s.reqs[n].done = time.Now()
	s.reqs[n].status = status
	s.reqs[n].retryable = s.retryable(status)
	if status == 0 {
		s.reqs[n].raUsable = false
	}
	s.mu.Unlock()
}

func (s *simServer) requests() []simRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]simRequest, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = *r
	}
	return out
}

// simEnqueue is one enqueue call and what it returned.
type simEnqueue struct {
	id       string
	call, at time.Time // called, returned
	err      error
	bad      string // "invalid", "large" or ""
	ctxMS    int
	context  bool
}

// simOutcome is one event in one callback call.
type simOutcome struct {
	id      string
	wire    string // the message's ID() in the callback
	err     error  // nil: OnSuccess
	at      time.Time
	callIdx int
}

// simTimed is a Flush or Close call and its return.
type simTimed struct {
	call     simCall
	at, done time.Time
	err      error
	// the events accepted before the call (for Flush: those that must
	// have an outcome when it returns nil)
	before []string
}

// simRun is the record of one scenario.
type simRun struct {
	sc        simScenario
	faults    map[string]bool
	start     time.Time
	server    *simServer
	mu        sync.Mutex
	enq       []simEnqueue
	out       []simOutcome
	calls     int            // callback calls
	callSpans [][2]time.Time // each callback call's start and return
	successC  int            // OnSuccess calls
	flushes   []simTimed
	close     simTimed
	closeErr  error
	after     []error // enqueue and Flush after Close returned
	stats     Stats
	newErr    error
	// Durable mode: the second client on the directory.
	next simNextStart // the next start on the directory, in durable worlds
	// crash: what a crash left and the client that opened it (durable mode).
	crash *simCrashState
	// held is the highest accepted-and-not-settled count seen at an
	// accept (R43's memory bound).
	held int
}

func (run *simRun) accepted() map[string]time.Time {
	m := map[string]time.Time{}
	for _, e := range run.enq {
		if e.err == nil {
			m[e.id] = e.at
		}
	}
	return m
}

// simExecute runs the scenario on the real client inside the caller's
// synctest bubble and returns the record.
func simExecute(sc simScenario, faults map[string]bool, dir string) *simRun {
	run := &simRun{sc: sc, faults: faults, start: time.Now()}
	srv := newSimServer(sc, faults)
	run.server = srv
	settled := 0
	record := func(err error, msgs []Message) {
		run.mu.Lock()
		run.calls++
		n := run.calls
		run.callSpans = append(run.callSpans, [2]time.Time{time.Now()})
		defer func() {
			run.mu.Lock()
			run.callSpans[n-1][1] = time.Now()
			run.mu.Unlock()
		}()
		if err == nil {
			run.successC++
		}
		for _, m := range msgs {
			id, wire := simIDOf(m)
			run.out = append(run.out, simOutcome{id: id, wire: wire, err: err, at: time.Now(), callIdx: n})
		}
		settled += len(msgs)
		run.mu.Unlock()
		if sc.CallbackSlowMS > 0 {
			time.Sleep(ms(sc.CallbackSlowMS))
		}
		if sc.CallbackPanic > 0 && n%sc.CallbackPanic == 0 {
			panic("sim: callback panics")
		}
	}
	opts := append(sc.options(), WithHTTPClient(&http.Client{Transport: srv}),
		WithOnError(func(err error, m []Message) { record(err, m) }))
	if sc.OnSuccess {
		opts = append(opts, WithOnSuccess(func(m []Message) { record(nil, m) }))
	}
	if sc.Durable {
		opts = append(opts, WithDiskBuffer(dir))
	}
	c, err := New("sim-key", opts...)
	if err != nil {
		run.newErr = err
		return run
	}

	waitCrash := simStartCrash(run, dir)
	var wg sync.WaitGroup
	for p, pr := range sc.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(ms(pr.StartMS))
			for i := range pr.Count {
				if i > 0 && pr.Burst > 0 && i%pr.Burst == 0 {
					time.Sleep(ms(pr.GapMS))
				}
				e := simEnqueue{id: fmt.Sprintf("e%d-%d", p, i), context: pr.Context, ctxMS: pr.CtxMS}
				pad := pr.Size
				if pr.Size > 0 {
					pad = (i*7919 + p*104729) % (pr.Size + 1)
				}
				m := Track{UserID: "u", Event: "Sim", Properties: Properties{"pad": strings.Repeat("p", pad), "i": i}}
				if pr.PoisonEvery > 0 && i%pr.PoisonEvery == pr.PoisonEvery-1 {
					e.id = "x" + e.id[1:]
				}
				if pr.BadEvery > 0 && i%pr.BadEvery == pr.BadEvery-1 {
					if i%2 == 0 {
						e.bad, m.UserID = "invalid", ""
					} else {
						e.bad = "large"
						m.Properties["pad"] = strings.Repeat("L", 33000)
					}
				}
				m.MessageID = e.id
				if pr.GenID {
					m.MessageID = ""
					m.Properties["sid"] = e.id
				}
				e.call = time.Now()
				var err error
				if pr.Context {
					ctx := context.Background()
					cancel := context.CancelFunc(func() {})
					if pr.CtxMS > 0 {
						ctx, cancel = context.WithTimeout(ctx, ms(pr.CtxMS))
					}
					err = c.EnqueueContext(ctx, m)
					cancel()
				} else if i%3 == 1 {
					err = c.Enqueue(m)
				} else {
					err = c.Track(m)
				}
				e.at, e.err = time.Now(), err
				run.mu.Lock()
				run.enq = append(run.enq, e)
				if err == nil {
					n := 0
					for _, x := range run.enq {
						if x.err == nil {
							n++
						}
					}
					run.held = max(run.held, n-settled)
				}
				run.mu.Unlock()
			}
		}()
	}
	ctxFor := func(call simCall) (context.Context, context.CancelFunc) {
		switch call.Ctx {
		case "done":
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		case "background":
			return context.Background(), func() {}
		}
		return context.WithTimeout(context.Background(), ms(call.MS))
	}
	acceptedNow := func() []string {
		run.mu.Lock()
		defer run.mu.Unlock()
		var ids []string
		for _, e := range run.enq {
			if e.err == nil {
				ids = append(ids, e.id)
			}
		}
		return ids
	}
	var fmu sync.Mutex
	closed := make(chan struct{})
	for _, f := range sc.Flushes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(ms(f.AtMS)):
			case <-closed:
				return
			}
			ctx, cancel := ctxFor(f)
			defer cancel()
			ft := simTimed{call: f, at: time.Now(), before: acceptedNow()}
			ft.err = c.Flush(ctx)
			ft.done = time.Now()
			fmu.Lock()
			run.flushes = append(run.flushes, ft)
			fmu.Unlock()
		}()
	}
	time.Sleep(ms(sc.CloseAtMS))
	ctx, cancel := ctxFor(sc.Close)
	run.close = simTimed{call: sc.Close, at: time.Now(), before: acceptedNow()}
	run.closeErr = c.Close(ctx)
	run.close.done = time.Now()
	cancel()
	close(closed)
	run.after = append(run.after, c.Track(Track{UserID: "u", Event: "late", MessageID: "late-1"}), c.Flush(context.Background()), c.Close(context.Background()))
	wg.Wait()
	// Hand-back callbacks may outlive Close (R39); let them end.
	for i, last := 0, -1; i < 360; i++ {
		time.Sleep(10 * time.Second)
		run.mu.Lock()
		n := len(run.out)
		run.mu.Unlock()
		if n == last {
			break
		}
		last = n
	}
	run.stats = c.Stats()
	waitCrash()
	if sc.Durable {
		simReopen(run, dir)
		simReopenCrashed(run)
	}
	return run
}

// simReopen is the next start on the directory after Close.
func simReopen(run *simRun, dir string) { run.next = simStartOn(run, dir) }

// simNextStart is what a client started on a directory of events left by
// the one before saw: its server, its callbacks' outcomes, its Stats and
// its Close.
type simNextStart struct {
	server *simServer
	out    []simOutcome
	stats  Stats
	close  error
}

// simStartOn starts a client on dir against a server that answers 200,
// and closes it once everything has an outcome.
func simStartOn(run *simRun, dir string) (next simNextStart) {
	srv := newSimServer(run.sc, run.faults)
	srv.allOK = true
	next.server = srv
	var mu sync.Mutex
	rec := func(err error, msgs []Message) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			id, wire := simIDOf(m)
			next.out = append(next.out, simOutcome{id: id, wire: wire, err: err, at: time.Now()})
		}
	}
	c, err := New("sim-key", WithEndpoint("http://api.test"), WithHTTPClient(&http.Client{Transport: srv}), WithDiskBuffer(dir),
		WithOnSuccess(func(m []Message) { rec(nil, m) }), WithOnError(rec))
	if err != nil {
		next.close = err
		return next
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	next.close = c.Close(ctx)
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	next.stats = c.Stats()
	return next
}

func simHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
