package analytics

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// R21, R23, R24, D27: dates are rounded up, past dates are not usable,
// far dates are capped.
func TestParseRetryAfterDateEdges(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 250_000_000, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).UTC().Format(http.TimeFormat) }
	d, kind := parseRetryAfter(at(3*time.Second), now) // 2.75 s away after truncation to seconds
	assert.Equal(t, retryAfterUsable, kind)
	assert.Equal(t, 3*time.Second, d, "rounded up to whole seconds")
	_, kind = parseRetryAfter(at(0), now)
	assert.Equal(t, retryAfterNotPositive, kind, "a date at or before now")
	_, kind = parseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT", now)
	assert.Equal(t, retryAfterNotPositive, kind)
	d, _ = parseRetryAfter(at(time.Hour), now)
	assert.Equal(t, MaxRetryAfter, d)
}

// U1, R19: one parse gives one value for the decision and the deadline,
// also 0.999 s before a second boundary.
func TestParseOnceAcrossSecondBoundary(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 1_000_000, time.UTC) // 0.999 s before 12:00:01
	header := now.Truncate(time.Second).Add(time.Second).Format(http.TimeFormat)
	v := classifyResponse(429, header, true, now)
	require.Equal(t, outcomeRateLimited, v.outcome)
	assert.Equal(t, time.Second, v.delay, "the path and the deadline use the same rounded-up value")

	r := newWaitingRoom(time.Hour, newCapacity(10))
	mono := time.Now()
	_, expired, ok := r.rateLimited(mono, v.delay, &batch{})
	require.True(t, ok)
	require.Empty(t, expired)
	wait, _ := r.gate(mono)
	assert.Equal(t, time.Second, wait, "episode open implies a deadline")
}

// R31, R33, R34, R35, R55: the room keeps the episode apart from the
// deadline, and an expired episode fails only the batches that wait for a
// deadline, not those waiting for their backoff.
func TestWaitingRoomEpisodeAndDeadline(t *testing.T) {
	t0 := time.Now()
	places := newCapacity(100)
	r := newWaitingRoom(10*time.Second, places)
	one := func() *batch { return &batch{events: make([]event, 1)} }
	opened, _, _ := r.rateLimited(t0, 5*time.Second, one())
	assert.True(t, opened)
	// A shorter Retry-After never shortens the deadline (max).
	opened, _, _ = r.rateLimited(t0.Add(time.Second), time.Second, one())
	assert.False(t, opened, "one episode")
	wait, _ := r.gate(t0)
	assert.Equal(t, 5*time.Second, wait)
	assert.Equal(t, int64(2), places.held.Load(), "waiting events count against capacity")
	// Nothing is taken while the gate is closed.
	b, _, closed, _ := r.next(t0.Add(4 * time.Second))
	assert.Nil(t, b)
	assert.True(t, closed)
	// A 2xx from an in-flight request ends the episode, not the deadline.
	assert.True(t, r.endEpisode())
	wait, _ = r.gate(t0.Add(3 * time.Second))
	assert.Equal(t, 2*time.Second, wait)
	// Served: cleared; both batches are due, oldest due first.
	b1, _, closed, _ := r.next(t0.Add(5 * time.Second))
	require.NotNil(t, b1)
	assert.False(t, closed)
	b2, _, _, _ := r.next(t0.Add(5 * time.Second))
	require.NotNil(t, b2)
	assert.Zero(t, places.held.Load())
	wait, _ = r.gate(t0.Add(5 * time.Second))
	assert.Zero(t, wait)

	// A new episode: a batch waits for a deadline, another for its backoff.
	limited, backingOff := one(), one()
	r.rateLimited(t0.Add(20*time.Second), time.Second, limited)
	require.True(t, r.wait(backingOff, t0.Add(40*time.Second)))
	// Waits never run past start + limit.
	r.rateLimited(t0.Add(28*time.Second), 300*time.Second, one())
	wait, _ = r.gate(t0.Add(28 * time.Second))
	assert.Equal(t, 2*time.Second, wait)
	// At start + limit the episode expires: the deadline batches fail, the
	// gate opens at once, the backoff batch waits on.
	wait, expired := r.gate(t0.Add(30 * time.Second))
	assert.Zero(t, wait)
	assert.Len(t, expired, 2)
	assert.NotContains(t, expired, backingOff)
	_, due, closed, _ := r.next(t0.Add(30 * time.Second))
	assert.False(t, closed)
	assert.Equal(t, 10*time.Second, due, "the backoff batch is due at its own time")
	// Close empties the room and refuses later arrivals.
	assert.Equal(t, []*batch{backingOff}, r.close())
	assert.False(t, r.wait(one(), t0))
}

// MaxRateLimitDuration 0: a usable Retry-After fails the batch at once
// (R35), with every batch that waits for a deadline.
func TestWaitingRoomZeroLimit(t *testing.T) {
	r := newWaitingRoom(0, newCapacity(10))
	b := &batch{}
	_, expired, ok := r.rateLimited(time.Now(), time.Second, b)
	assert.True(t, ok)
	assert.Equal(t, []*batch{b}, expired)
	wait, _ := r.gate(time.Now())
	assert.Zero(t, wait, "no deadline is left behind")
}

// The parser never panics, and a usable delay is whole seconds in (0, 300].
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
	})
}
