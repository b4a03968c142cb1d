package httpbatch

import (
	"strconv"
	"strings"
	"time"
)

// retryAfterKind says what a Retry-After header amounts to (R19–R25).
type retryAfterKind int

// The zero value is "no header".
const (
	retryAfterUsable      retryAfterKind = iota + 1 // > 0 s: the rate-limited path
	retryAfterNotPositive                           // 0, negative or a past date: counted path (R23)
	retryAfterInvalid                               // unparseable: counted path and a warning (R25)
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

// MaxRetryAfter caps a server's Retry-After: longer values are waited as
// this long (R24). The client documents the same value as its own
// MaxRetryAfter.
const MaxRetryAfter = 300 * time.Second

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
