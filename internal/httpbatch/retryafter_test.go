package httpbatch

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// U2, R20, R53: delay-seconds parsing is strict and saturates.
func TestParseRetryAfterSeconds(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
		kind retryAfterKind
	}{
		{"10", 10 * time.Second, retryAfterUsable},
		{" \t10\t ", 10 * time.Second, retryAfterUsable},
		{"1", time.Second, retryAfterUsable},
		{"300", 300 * time.Second, retryAfterUsable},
		{"301", 300 * time.Second, retryAfterUsable},
		{"9300000000", 300 * time.Second, retryAfterUsable},
		{"99999999999999999999", 300 * time.Second, retryAfterUsable},
		{"0", 0, retryAfterNotPositive},
		{"000", 0, retryAfterNotPositive},
		{"-5", 0, retryAfterNotPositive},
		{"+5", 0, retryAfterInvalid},
		{"2.5", 0, retryAfterInvalid},
		{"1e3", 0, retryAfterInvalid},
		{"5 s", 0, retryAfterInvalid},
		{"", 0, retryAfterInvalid},
		{"soon", 0, retryAfterInvalid},
		{"-", 0, retryAfterInvalid},
		{"٣", 0, retryAfterInvalid}, // non-ASCII digit
	}
	for _, tc := range cases {
		d, kind := parseRetryAfter(tc.in, now)
		assert.Equal(t, tc.kind, kind, "kind of %q", tc.in)
		assert.Equal(t, tc.want, d, "delay of %q", tc.in)
	}
}

// U3, R21, R22: every date form gives the same instant under any host TZ;
// zone abbreviations other than GMT/UTC are rejected.
func TestParseRetryAfterDatesIndependentOfTZ(t *testing.T) {
	now := time.Date(2037, 10, 21, 7, 27, 50, 0, time.UTC)
	forms := []string{
		"Wed, 21 Oct 2037 07:28:00 GMT",
		"Wed, 21 Oct 2037 07:28:00 UTC",
		"Wed, 21 Oct 2037 07:28:00 -0000",
		"Wed, 21 Oct 2037 07:28:00 +0000",
		"Wed, 21 Oct 2037 09:28:00 +0200",
		"Wed, 21 Oct 2037 02:28:00 -0500",
		"Wednesday, 21-Oct-37 07:28:00 GMT",
		"Wed Oct 21 07:28:00 2037",
	}
	saved := time.Local
	defer func() { time.Local = saved }()
	for _, tz := range []string{"UTC", "Pacific/Kiritimati", "Etc/GMT+12", "America/New_York"} {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Skipf("no zone database: %v", err)
		}
		time.Local = loc
		for _, f := range forms {
			d, kind := parseRetryAfter(f, now)
			assert.Equal(t, retryAfterUsable, kind, "%s under %s", f, tz)
			assert.Equal(t, 10*time.Second, d, "%s under %s", f, tz)
		}
		_, kind := parseRetryAfter("Wed, 21 Oct 2037 07:28:00 EST", now)
		assert.Equal(t, retryAfterInvalid, kind, "EST under %s", tz)
	}
}

// R21: asctime pads a one-digit day with a space ("Nov  6"); both day
// widths parse to the stated instant, whatever today's date is.
func TestParseRetryAfterAsctimeDayWidths(t *testing.T) {
	for _, c := range []struct {
		now   time.Time
		value string
	}{
		{time.Date(2026, 12, 1, 8, 49, 30, 0, time.UTC), "Tue Dec  1 08:49:37 2026"},
		{time.Date(2026, 11, 6, 8, 49, 30, 0, time.UTC), "Fri Nov  6 08:49:37 2026"},
		{time.Date(2026, 11, 16, 8, 49, 30, 0, time.UTC), "Mon Nov 16 08:49:37 2026"},
	} {
		d, kind := parseRetryAfter(c.value, c.now)
		assert.Equal(t, retryAfterUsable, kind, c.value)
		assert.Equal(t, 7*time.Second, d, c.value)
	}
	_, kind := parseRetryAfter("Sun Nov  6 08:49:37 1994", time.Date(2026, 11, 6, 0, 0, 0, 0, time.UTC))
	assert.Equal(t, retryAfterNotPositive, kind, "a past asctime date parses and is not usable")
}

// R21, R23, R24, D27: dates are rounded up, past dates are not usable,
// far dates are capped.
func TestParseRetryAfterDateEdges(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 250_000_000, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).UTC().Format(http.TimeFormat) }
	d, kind := parseRetryAfter(at(3*time.Second), now) // 2.75 s away after truncation to seconds
	assert.Equal(t, retryAfterUsable, kind)
	assert.Equal(t, 3*time.Second, d, "rounded up to whole seconds")
	_, kind = parseRetryAfter(at(0), now)
	assert.Equal(t, retryAfterNotPositive, kind, "a date before now (0.25 s ago after truncation)")
	whole := now.Truncate(time.Second)
	d, kind = parseRetryAfter(whole.Format(http.TimeFormat), whole)
	assert.Equal(t, retryAfterNotPositive, kind, "a date equal to now")
	assert.Zero(t, d)
	d, kind = parseRetryAfter(whole.Add(time.Second).Format(http.TimeFormat), whole)
	assert.Equal(t, retryAfterUsable, kind, "a date one second after now")
	assert.Equal(t, time.Second, d)
	_, kind = parseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT", now)
	assert.Equal(t, retryAfterNotPositive, kind)
	d, _ = parseRetryAfter(at(time.Hour), now)
	assert.Equal(t, MaxRetryAfter, d)
}

// The parser never panics, a usable delay is whole seconds in (0, 300],
// and an IMF-fixdate is usable exactly when it is after now, with the
// distance rounded up and capped. The seed corpus in
// testdata/fuzz/FuzzParseRetryAfter covers the edges of R20–R25 (a date
// equal to now, one second either side, the cap, 0, negative, huge,
// fractional, garbage, whitespace); `go test` runs it on every run.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"10", "0", "-5", "+5", "2.5", "99999999999999999999", "Wed, 21 Oct 2037 07:28:00 GMT",
		"Wed, 21 Oct 2037 07:28:00 -0000", "Wednesday, 21-Oct-37 07:28:00 GMT", "Wed Oct 21 07:28:00 2037", "", " ", "\x00"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, kind := parseRetryAfter(s, now)
		switch kind {
		case retryAfterUsable:
			if d <= 0 || d > MaxRetryAfter || d%time.Second != 0 {
				t.Fatalf("parseRetryAfter(%q) = %v", s, d)
			}
		default:
			if d != 0 {
				t.Fatalf("parseRetryAfter(%q) = %v with kind %d", s, d, kind)
			}
		}
		if at, err := time.Parse(http.TimeFormat, strings.Trim(s, " \t")); err == nil {
			want, wantKind := time.Duration(0), retryAfterNotPositive
			switch dist := at.Sub(now); {
			case dist >= MaxRetryAfter:
				want, wantKind = MaxRetryAfter, retryAfterUsable
			case dist > 0:
				want, wantKind = (dist+time.Second-1)/time.Second*time.Second, retryAfterUsable
			}
			if kind != wantKind || d != want {
				t.Fatalf("parseRetryAfter(%q) = %v, %d; want %v, %d", s, d, kind, want, wantKind)
			}
		}
	})
}
