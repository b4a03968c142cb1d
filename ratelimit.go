package analytics

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// retryAfterKind says what a Retry-After header amounts to (R19–R25).
type retryAfterKind int

const (
	retryAfterAbsent      retryAfterKind = iota // no header
	retryAfterUsable                            // > 0 s: the rate-limited path
	retryAfterNotPositive                       // 0, negative or a past date: counted path (R23)
	retryAfterInvalid                           // unparseable: counted path and a warning (R25)
)

// httpDateLayouts are the HTTP-date forms accepted (R21). Zones are literal
// GMT or UTC, or numeric: a zone abbreviation would be resolved through the
// host's zone database and depend on TZ (R22).
var httpDateLayouts = []string{
	"Mon, 02 Jan 2006 15:04:05 GMT",   // IMF-fixdate
	"Monday, 02-Jan-06 15:04:05 GMT",  // RFC 850
	"Mon Jan _2 15:04:05 2006",        // asctime
	"Mon, 02 Jan 2006 15:04:05 -0700", // RFC 1123, numeric zone (-0000 is UTC)
	"Mon, 02 Jan 2006 15:04:05 UTC",   // RFC 1123 with UTC
	"Mon, 2 Jan 2006 15:04:05 GMT",    // one-digit day, seen in the wild
	"Mon, 2 Jan 2006 15:04:05 -0700",
}

// maxRetryAfterSeconds is MaxRetryAfter in integer seconds; values are capped
// in seconds before they become a Duration (R20, R53).
const maxRetryAfterSeconds = int64(MaxRetryAfter / time.Second)

// parseRetryAfter parses one Retry-After value, once per response (R19). now
// is the wall clock, used only for the HTTP-date form. The delay returned for
// a usable value is in whole seconds, capped at MaxRetryAfter (R24), and is
// the single value that both selects the path and sets the deadline.
func parseRetryAfter(value string, now time.Time) (time.Duration, retryAfterKind) {
	v := strings.Trim(value, " \t")
	if v == "" {
		return 0, retryAfterInvalid
	}
	if isDigits(v) {
		return secondsToDelay(v)
	}
	if v[0] == '-' && isDigits(v[1:]) {
		return 0, retryAfterNotPositive // R23: never reaches a timer
	}
	for _, layout := range httpDateLayouts {
		t, err := time.Parse(layout, v)
		if err != nil {
			continue
		}
		d := t.Sub(now.Round(0)) // wall clock only (R21, R36)
		if d <= 0 {
			return 0, retryAfterNotPositive
		}
		if d >= MaxRetryAfter {
			return MaxRetryAfter, retryAfterUsable
		}
		// Round up so the retry never lands before the stated instant (D27).
		secs := (d + time.Second - 1) / time.Second
		return secs * time.Second, retryAfterUsable
	}
	return 0, retryAfterInvalid
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// secondsToDelay converts a digits-only value; anything too large for int64
// saturates to the cap instead of overflowing (R20, R53, R54).
func secondsToDelay(digits string) (time.Duration, retryAfterKind) {
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil { // only ErrRange is possible for digits: saturate
		n = maxRetryAfterSeconds
	}
	if n == 0 {
		return 0, retryAfterNotPositive
	}
	if n > maxRetryAfterSeconds {
		n = maxRetryAfterSeconds
	}
	return time.Duration(n) * time.Second, retryAfterUsable
}

// rateLimitGate is the rate-limit state shared by every consumer (R55): the
// deadline before which nobody sends, and the episode, kept apart. The
// deadline is cleared when it has been served (R33); the episode start when
// rate limiting stops (R34). One mutex guards both.
type rateLimitGate struct {
	mu    sync.Mutex
	limit time.Duration // MaxRateLimitDuration

	deadline time.Time // zero: none. Monotonic.
	start    time.Time // episode start; zero: no episode. Monotonic.
	episode  uint64    // number of the latest episode opened
	expired  uint64    // latest episode ended by MaxRateLimitDuration
}

// rateLimited records a usable Retry-After of d received at now (R31). It
// returns the episode the batch is re-queued under, whether this response
// opened it, and exceeded when the
// episode has lasted MaxRateLimitDuration (R35): the episode and its
// deadline are then cleared and every re-queued batch must fail.
func (g *rateLimitGate) rateLimited(now time.Time, d time.Duration) (episode uint64, opened, exceeded bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.start.IsZero() {
		g.episode++
		g.start = now
		opened = true
	}
	if now.Sub(g.start) >= g.limit {
		g.expireLocked()
		return g.episode, opened, true
	}
	if dl := now.Add(d); dl.After(g.deadline) {
		g.deadline = dl
	}
	return g.episode, opened, false
}

func (g *rateLimitGate) expireLocked() {
	g.expired = g.episode
	g.start = time.Time{}
	g.deadline = time.Time{}
}

// endEpisode records a response that was not retryable-with-usable-Retry-After:
// the episode ends, but an unserved deadline stays, because that response
// came from a request already in flight (R34 a, c).
func (g *rateLimitGate) endEpisode() (ended bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ended = !g.start.IsZero()
	g.start = time.Time{}
	return ended
}

// gateDecision is what a consumer must do before sending a batch.
type gateDecision struct {
	wait        time.Duration // > 0: wait this long, then ask again
	doomed      bool          // the batch is a re-queued one whose episode exceeded its limit
	justExpired bool          // this call ended the episode: fail every re-queued batch
}

// check is the gate (R32): every consumer calls it before every request.
// A wait never runs past episode start + MaxRateLimitDuration (R35).
func (g *rateLimitGate) check(now time.Time, b *batch) gateDecision {
	g.mu.Lock()
	defer g.mu.Unlock()
	var d gateDecision
	if !g.start.IsZero() && now.Sub(g.start) >= g.limit {
		g.expireLocked()
		d.justExpired = true
	}
	if b.episode != 0 && b.episode <= g.expired {
		d.doomed = true
		return d
	}
	if g.deadline.IsZero() {
		return d
	}
	if !now.Before(g.deadline) {
		g.deadline = time.Time{} // served: it classifies nothing later (R33)
		return d
	}
	d.wait = g.deadline.Sub(now)
	if !g.start.IsZero() {
		if left := g.start.Add(g.limit).Sub(now); left < d.wait {
			d.wait = left
		}
	}
	return d
}
