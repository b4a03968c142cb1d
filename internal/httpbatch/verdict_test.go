package httpbatch

import (
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// R3, R9–R16, R25, R58, R66, R68: the verdict over the whole status space,
// without and with a usable Retry-After.
func TestJudgeStatusSpace(t *testing.T) {
	now := time.Now()
	for status := 100; status <= 999; status++ {
		want := Failed
		switch {
		case status >= 200 && status <= 299:
			want = Delivered
		case status == 413:
			want = TooLarge
		case status == 400:
			want = Poison
		case status == 429:
			want = TooMany
		case status == 408 || status == 410 || status == 460:
			want = Retry
		case status >= 500 && status <= 599 && status != 501 && status != 505 && status != 511:
			want = Retry
		}
		v := Judge(Answer{Status: status}, false, now)
		require.Equal(t, want, v.Outcome, "status %d", status)
		assert.Equal(t, status >= 300 && status <= 399, v.Redirect, "status %d", status)
		assert.False(t, v.Reauth, "status %d", status)
		// A usable Retry-After turns every retried status into a rate limit
		// and changes nothing else (R25).
		v = Judge(Answer{Status: status, RetryAfter: "7", HasRetryAfter: true}, false, now)
		if want.Retried() {
			assert.Equal(t, RateLimited, v.Outcome, "status %d", status)
			assert.Equal(t, 7*time.Second, v.Delay)
		} else {
			assert.Equal(t, want, v.Outcome, "status %d with Retry-After", status)
			assert.Zero(t, v.Delay)
		}
		// An invalid one is a counted retry, and said so (R25).
		v = Judge(Answer{Status: status, RetryAfter: "soon", HasRetryAfter: true}, false, now)
		assert.Equal(t, want, v.Outcome, "status %d with an invalid Retry-After", status)
		assert.Equal(t, want.Retried(), v.InvalidRetryAfter, "status %d", status)
	}
}

// R50: with a bearer, a 511 asks for a fresh token as a counted retry;
// 400, 401 and 403 drop the token and keep their verdict.
func TestJudgeBearer(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		status int
		want   Outcome
		reauth bool
	}{
		{511, Retry, true},
		{401, Failed, true},
		{403, Failed, true},
		{400, Poison, true},
		{413, TooLarge, false},
		{429, TooMany, false},
		{500, Retry, false},
		{200, Delivered, false},
	} {
		v := Judge(Answer{Status: tc.status}, true, now)
		assert.Equal(t, tc.want, v.Outcome, "status %d", tc.status)
		assert.Equal(t, tc.reauth, v.Reauth, "status %d", tc.status)
	}
	assert.Equal(t, Failed, Judge(Answer{Status: 511}, false, now).Outcome, "without a bearer, 511 is not retried (R13)")
}

// R14: a transport error is retried unless it is deterministic on the
// client.
func TestJudgeTransportError(t *testing.T) {
	now := time.Now()
	assert.Equal(t, Retry, Judge(Answer{Err: io.EOF}, false, now).Outcome)
	assert.Equal(t, Retry, Judge(Answer{Err: errors.New("connection refused")}, false, now).Outcome)
	assert.Equal(t, Failed, Judge(Answer{Err: errors.New(`unsupported protocol scheme "ftp"`)}, false, now).Outcome)
}

// U1, R19, D27: one parse gives the verdict and the delay, rounded up to
// the stated second.
func TestJudgeRetryAfterDate(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 1_000_000, time.UTC) // 0.999 s before 12:00:01
	header := now.Truncate(time.Second).Add(time.Second).Format(http.TimeFormat)
	v := Judge(Answer{Status: 503, RetryAfter: header, HasRetryAfter: true}, false, now)
	assert.Equal(t, RateLimited, v.Outcome)
	assert.Equal(t, time.Second, v.Delay)
}

func BenchmarkJudge(b *testing.B) {
	now := time.Now()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = Judge(Answer{Status: 200 + i%400, RetryAfter: "3", HasRetryAfter: i%3 == 0}, false, now)
	}
}

func BenchmarkParseRetryAfter(b *testing.B) {
	now := time.Now()
	for _, v := range []string{"120", "Wed, 21 Oct 2037 07:28:00 GMT", "Wed, 21 Oct 2037 07:28:00 -0000", "soon"} {
		b.Run(v, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_, _ = parseRetryAfter(v, now)
			}
		})
	}
}
