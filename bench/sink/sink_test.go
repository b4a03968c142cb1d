package sink

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs s on a loopback port the way cmd/sink does and returns its base URL.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s, ConnState: s.ConnState, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(s.Listener(ln)) }()
	t.Cleanup(func() { _ = hs.Close(); <-done })
	return "http://" + ln.Addr().String()
}

func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// post sends a batch with the given amounts and sentAt; it returns the
// status, or 0 and the error for a transport failure.
func post(t *testing.T, hc *http.Client, base string, sentAt time.Time, amounts ...int) (int, error) {
	t.Helper()
	var evs []string
	for _, a := range amounts {
		evs = append(evs, fmt.Sprintf(`{"messageId":"m%d","properties":{"amount":%d}}`, a, a))
	}
	body := fmt.Sprintf(`{"batch":[%s],"sentAt":%q}`, strings.Join(evs, ","), sentAt.UTC().Format(time.RFC3339Nano))
	resp, err := hc.Post(base+"/v1/batch", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestGateViolationsCountRequestsBeforeTheDeadlineOnly(t *testing.T) {
	s, err := New(Config{Fault: Fault429, Rate: 1}) // every request is answered 429
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, s)
	hc := client(t)

	before := time.Now() // built before any 429 was sent
	if code, err := post(t, hc, base, before, 1); code != http.StatusTooManyRequests {
		t.Fatalf("first request: %d %v, want 429", code, err)
	}
	if st := s.Stats(); st.Sent429 != 1 || st.GateViolations != 0 {
		t.Fatalf("after the first 429: sent_429=%d violations=%d, want 1 and 0", st.Sent429, st.GateViolations)
	}
	// Arrives after the 429 was sent, within its 1 s deadline; its sentAt
	// precedes the 429, so only the arrival count sees a violation.
	if code, _ := post(t, hc, base, before, 2); code != http.StatusTooManyRequests {
		t.Fatalf("second request: %d", code)
	}
	st := s.Stats()
	if st.GateViolations != 1 || st.SentAtViolations != 0 || st.SentAtRequests != 2 {
		t.Fatalf("arrival violations=%d sentAt violations=%d sentAt requests=%d, want 1, 0, 2",
			st.GateViolations, st.SentAtViolations, st.SentAtRequests)
	}
	// Built now, inside the second 429's deadline: both counts.
	post(t, hc, base, time.Now(), 3)
	if st := s.Stats(); st.GateViolations != 2 || st.SentAtViolations != 1 {
		t.Fatalf("violations=%d sentAt violations=%d, want 2 and 1", st.GateViolations, st.SentAtViolations)
	}
}

func TestGateHonouredAfterTheDeadline(t *testing.T) {
	s, err := New(Config{Fault: Fault429, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, s)
	hc := client(t)
	post(t, hc, base, time.Now(), 1)
	time.Sleep(retryAfter + 50*time.Millisecond)
	post(t, hc, base, time.Now(), 2)
	if st := s.Stats(); st.GateViolations != 0 || st.SentAtViolations != 0 || st.Sent429 != 2 {
		t.Fatalf("violations=%d sentAt=%d sent_429=%d, want 0, 0, 2", st.GateViolations, st.SentAtViolations, st.Sent429)
	}
}

func TestOutage500ThenRecovery(t *testing.T) {
	s, err := New(Config{Outage: 300 * time.Millisecond, OutageMode: Outage500})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, s)
	hc := client(t)
	for i := range 3 {
		if code, err := post(t, hc, base, time.Now(), i); code != http.StatusInternalServerError {
			t.Fatalf("request %d during the outage: %d %v, want 500", i, code, err)
		}
	}
	time.Sleep(350 * time.Millisecond)
	if code, err := post(t, hc, base, time.Now(), 7); code != http.StatusOK {
		t.Fatalf("after recovery: %d %v, want 200", code, err)
	}
	st := s.Stats()
	if st.OutageAttempts != 3 || st.OutageMaxIn1s != 3 || st.DistinctSeq != 1 {
		t.Fatalf("outage attempts=%d max in 1 s=%d distinct=%d, want 3, 3, 1", st.OutageAttempts, st.OutageMaxIn1s, st.DistinctSeq)
	}
	if got := time.Duration(st.OutageEndUnixNS - st.OutageStartUnixNS); got != 300*time.Millisecond {
		t.Fatalf("outage window %v, want 300ms", got)
	}
}

func TestOutageResetClosesConnections(t *testing.T) {
	s, err := New(Config{Outage: 300 * time.Millisecond, OutageAfter: 100 * time.Millisecond, OutageMode: OutageReset})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, s)
	hc := client(t)
	if code, err := post(t, hc, base, time.Now(), 1); code != http.StatusOK { // starts the clock; keeps a connection open
		t.Fatalf("before the outage: %d %v", code, err)
	}
	time.Sleep(150 * time.Millisecond)
	if code, err := post(t, hc, base, time.Now(), 2); err == nil {
		t.Fatalf("during a reset outage: got status %d, want a transport error", code)
	}
	time.Sleep(300 * time.Millisecond)
	if code, err := post(t, hc, base, time.Now(), 3); code != http.StatusOK {
		t.Fatalf("after recovery: %d %v", code, err)
	}
	if st := s.Stats(); st.OutageAttempts < 1 || st.DistinctSeq != 2 || st.OutageMode != OutageReset {
		t.Fatalf("attempts=%d distinct=%d mode=%q, want ≥1, 2, reset", st.OutageAttempts, st.DistinctSeq, st.OutageMode)
	}
}

func TestSeenReportsFirstRecordingPerAmount(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, s)
	hc := client(t)
	post(t, hc, base, time.Now(), 0, 2)
	post(t, hc, base, time.Now(), 2) // a repeat keeps the first time
	resp, err := hc.Get(base + "/seen")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(b) < 8+4*3 {
		t.Fatalf("/seen returned %d bytes", len(b))
	}
	start := time.Unix(0, int64(binary.LittleEndian.Uint64(b)))
	if d := time.Since(start); d < 0 || d > 5*time.Second {
		t.Fatalf("start %v is %v ago", start, d)
	}
	at := func(i int) uint32 { return binary.LittleEndian.Uint32(b[8+4*i:]) }
	if at(0) == 0 || at(1) != 0 || at(2) == 0 {
		t.Fatalf("seen[0..2] = %d %d %d, want set, 0, set", at(0), at(1), at(2))
	}
	if st := s.Stats(); st.DistinctSeq != 2 || st.DupSeq != 1 {
		t.Fatalf("distinct=%d dups=%d, want 2 and 1", st.DistinctSeq, st.DupSeq)
	}
}

// The limiter admits Limit events per second (a second's worth at once)
// and answers the rest 429 with a whole-second Retry-After, recording
// nothing; it injects no other fault.
func TestLimiterAdmitsItsRate(t *testing.T) {
	s, err := New(Config{Fault: FaultLimiter, Limit: 3, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	base, hc := serve(t, s), client(t)
	if st, err := post(t, hc, base, time.Now(), 1, 2); err != nil || st != http.StatusOK {
		t.Fatalf("first batch: %d %v, want 200 (Rate does not apply to the limiter)", st, err)
	}
	resp, err := hc.Post(base+"/v1/batch", "application/json",
		strings.NewReader(`{"batch":[{"messageId":"m3","properties":{"amount":3}},{"messageId":"m4","properties":{"amount":4}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("second batch: %d Retry-After %q, want 429 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	st := s.Stats()
	if st.DistinctSeq != 2 || st.Sent429 != 1 {
		t.Fatalf("distinct %d, 429s %d; want 2 and 1", st.DistinctSeq, st.Sent429)
	}
}
