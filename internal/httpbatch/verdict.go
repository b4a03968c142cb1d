package httpbatch

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Outcome is what one attempt came to, in terms that do not depend on
// HTTP: what the client is to do with the batch next.
type Outcome int

const (
	// Delivered: a 2xx; the server took the batch (R9).
	Delivered Outcome = iota
	// Retry: a counted retry with backoff (R26): a retryable status
	// without a usable Retry-After, or a transport error that is not
	// deterministic on the client (R14).
	Retry
	// RateLimited: the server asked to wait Verdict.Delay (a usable
	// Retry-After on a retryable status); not counted as a retry (R31).
	RateLimited
	// TooLarge: the body was too large (413); the server stored nothing
	// (R3, R67).
	TooLarge
	// Poison: the request as a whole was refused (400), for what may be
	// one event the server will never take (R66).
	Poison
	// TooMany: too many requests (429) without a usable Retry-After: a
	// counted retry, and a hint that the batch may carry too many events
	// (R68).
	TooMany
	// Failed: not to be retried: any other status (3xx, most 4xx, 501,
	// 505, statuses outside 200–599) or a transport error that is
	// deterministic on the client (R10, R12–R15).
	Failed
)

// Verdict is the judgement of one attempt's answer.
type Verdict struct {
	Outcome Outcome
	// Delay is how long the server asked to wait, for RateLimited: the
	// Retry-After in whole seconds, capped at MaxRetryAfter (R24).
	Delay time.Duration
	// InvalidRetryAfter reports a Retry-After on a retryable status that
	// could not be parsed; the attempt is a counted retry (R25).
	InvalidRetryAfter bool
	// Reauth reports that the attempt's bearer credentials were refused
	// (400, 401, 403 or 511 with a bearer): they are not to be used again
	// (R50). A 511 with a bearer is then a counted retry.
	Reauth bool
	// Redirect reports a Failed answer that was a redirect (R10, R11).
	Redirect bool
}

// Answer is what came back from one attempt: a status line (Err nil) or
// the error that stands for one (a transport error, a panic of the HTTP
// client).
type Answer struct {
	Status        int    // 0 when no response came
	RetryAfter    string // the Retry-After header, redacted; "" without one
	HasRetryAfter bool   // the response had a Retry-After header
	Err           error  // why no response came; nil when one came
}

// answered is the Answer of a response: its status and its Retry-After
// header, passed through redact.
func answered(resp *http.Response, redact func(string) string) Answer {
	a := Answer{Status: resp.StatusCode}
	if vals, ok := resp.Header["Retry-After"]; ok {
		a.HasRetryAfter = true
		if len(vals) > 0 {
			a.RetryAfter = redact(vals[0])
		}
	}
	return a
}

// unanswered is the Answer of an attempt that got no response; err says why.
func unanswered(err error) Answer { return Answer{Err: err} }

// Judge decides the verdict of one attempt from its answer alone: the
// body never matters (R3, R9–R16, R25, R50). bearer reports that the
// attempt carried a bearer token; now is the wall clock, for HTTP-dates
// in Retry-After only. Every answer gets its verdict here: the caller acts
// on the verdict and never looks at the status again.
func Judge(a Answer, bearer bool, now time.Time) Verdict {
	if a.Err != nil {
		if !transientError(a.Err) {
			return Verdict{Outcome: Failed} // R14: deterministic on the client
		}
		return Verdict{Outcome: Retry}
	}
	status := a.Status
	switch {
	case status >= 200 && status <= 299:
		return Verdict{Outcome: Delivered}
	case status >= 300 && status <= 399:
		return Verdict{Outcome: Failed, Redirect: true} // R10
	case status == http.StatusRequestEntityTooLarge:
		return Verdict{Outcome: TooLarge} // R3: the server stored nothing
	case status == http.StatusBadRequest:
		return Verdict{Outcome: Poison, Reauth: bearer} // R50: the next batch gets a fresh token
	case bearer && status == http.StatusNetworkAuthenticationRequired:
		return Verdict{Outcome: Retry, Reauth: true} // R50: a fresh token, as a counted retry
	case bearer && (status == http.StatusUnauthorized || status == http.StatusForbidden):
		return Verdict{Outcome: Failed, Reauth: true} // R50
	case !retryableStatus(status):
		return Verdict{Outcome: Failed} // R12, R13, R15
	}
	v := Verdict{Outcome: Retry}
	if status == http.StatusTooManyRequests {
		v.Outcome = TooMany
	}
	if a.HasRetryAfter {
		d, kind := parseRetryAfter(a.RetryAfter, now) // parsed once (R19)
		switch kind {
		case retryAfterUsable:
			v.Outcome, v.Delay = RateLimited, d
		case retryAfterInvalid:
			v.InvalidRetryAfter = true
		}
	}
	return v
}

// Retried reports whether the outcome is a retry of the batch, counted or
// not; such failures are of the retryable kind.
func (o Outcome) Retried() bool { return o == Retry || o == RateLimited || o == TooMany }

func retryableStatus(status int) bool {
	switch status {
	case 408, 429, 460:
		return true
	case 410:
		// R58: 410 is retried, bounded by MaxRetries and
		// MaxTotalBackoffDuration, for parity with the conformance suite.
		return true
	case 501, 505, 511:
		return false // R13; with a bearer, Judge makes 511 a counted retry with a fresh token (R50)
	}
	return status >= 500 && status <= 599
}

// transientError reports whether an error without a response is worth
// retrying (R14): everything is, except errors that are deterministic on
// the client.
func transientError(err error) bool {
	var (
		verifyErr  *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalidCrt x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &verifyErr), errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalidCrt):
		return false
	case strings.Contains(err.Error(), "unsupported protocol scheme"):
		return false
	}
	return true
}
