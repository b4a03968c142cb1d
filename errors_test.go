package analytics

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// HTTPError texts start with "analytics:" and say what to do for the
// statuses that usually mean a configuration mistake.
func TestHTTPErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  HTTPError
		want string
	}{
		{HTTPError{StatusCode: 401, Kind: KindNonRetryable, Message: "Invalid write key"},
			"analytics: non-retryable response 401 Unauthorized: Invalid write key (check the write key)"},
		{HTTPError{StatusCode: 403, Kind: KindNonRetryable},
			"analytics: non-retryable response 403 Forbidden (check the write key)"},
		{HTTPError{StatusCode: 404, Kind: KindNonRetryable, Message: "<html>Not Found</html>"},
			"analytics: non-retryable response 404 Not Found: <html>Not Found</html> (the endpoint must be the API's base URL, such as https://api.segment.io)"},
		{HTTPError{StatusCode: 503, Kind: KindRetryable, Message: "busy"},
			"analytics: retryable response 503 Service Unavailable: busy"},
		{HTTPError{StatusCode: 101, Kind: KindNonRetryable},
			"analytics: non-retryable response 101 Switching Protocols"},
		{HTTPError{StatusCode: 307, Kind: KindRedirect},
			"analytics: redirect response 307 Temporary Redirect"},
		{HTTPError{StatusCode: 301, Kind: KindRedirect, Location: "https://api.eu.example.com/v1/batch"},
			"analytics: redirect response 301 Moved Permanently to https://api.eu.example.com/v1/batch (not followed, nothing was sent there; " +
				`if that is the API, point WithEndpoint at it: WithEndpoint("https://api.eu.example.com"))`},
	} {
		assert.Equal(t, tc.want, tc.err.Error())
	}
	// Wrapped in a DeliveryError the prefix is not repeated.
	de := &DeliveryError{Reason: ErrRetriesExhausted, Last: &HTTPError{StatusCode: 503, Kind: KindRetryable}, Attempts: 2}
	assert.Equal(t, "analytics: retries exhausted after 2 attempt(s): retryable response 503 Service Unavailable", de.Error())
}

// Enqueue(nil), a nil pointer and a foreign type give a *MessageError that
// says what to pass.
func TestEnqueueNotAMessage(t *testing.T) {
	c := newTestClient(t, newFakeAPI(nil), nil)
	defer func() { require.NoError(t, closeClient(t, c, time.Second)) }()
	type embedded struct{ Track }
	for _, tc := range []struct {
		m    Message
		want string
	}{
		{nil, "analytics: invalid message: Message is nil (pass a Track, Identify, Group, Page, Screen or Alias, or a non-nil pointer to one)"},
		{(*Track)(nil), "analytics: invalid track message: Message is a nil pointer (pass a Track, Identify, Group, Page, Screen or Alias, or a non-nil pointer to one)"},
		{(*Alias)(nil), "analytics: invalid alias message: Message is a nil pointer (pass a Track, Identify, Group, Page, Screen or Alias, or a non-nil pointer to one)"},
		{embedded{}, "analytics: invalid message: Message has type analytics.embedded (pass a Track, Identify, Group, Page, Screen or Alias, or a non-nil pointer to one)"},
	} {
		err := c.Enqueue(tc.m)
		var me *MessageError
		require.ErrorAs(t, err, &me)
		assert.ErrorIs(t, err, ErrInvalidMessage)
		assert.Equal(t, tc.want, err.Error())
		assert.ErrorAs(t, c.EnqueueContext(context.Background(), tc.m), &me)
	}
}

// After Close every enqueue call returns ErrClosed, whatever the event:
// invalid, nil, too large.
func TestInvalidEventAfterCloseIsErrClosed(t *testing.T) {
	c := newTestClient(t, newFakeAPI(nil), nil)
	require.NoError(t, closeClient(t, c, time.Second))
	huge := Properties{"x": strings.Repeat("x", MaxEventBytes)}
	for i, m := range []Message{Track{}, nil, (*Track)(nil), Alias{UserID: "u"}, Track{UserID: "u", Event: "e", Properties: huge}} {
		assert.ErrorIs(t, c.Enqueue(m), ErrClosed, "#%d", i)
		assert.NotErrorIs(t, c.Enqueue(m), ErrInvalidMessage, "#%d", i)
	}
	assert.ErrorIs(t, c.Track(Track{}), ErrClosed)
}

// R18: a server that echoes the write key (as is, as in the JSON body, or
// as the Basic credentials) does not get it into OnError's error, the
// HTTPError's Message or the logs; nor does a transport error that names it.
func TestWriteKeyRedactedFromServerText(t *testing.T) {
	const key = "wk-SECRET-42/x"
	basic := base64.StdEncoding.EncodeToString([]byte(key + ":"))
	bodies := []string{
		`{"message":"invalid write key wk-SECRET-42/x"}`,
		`{"error":"bad credentials Basic ` + basic + `"}`,
		`not json, body was {"writeKey":"wk-SECRET-42\/x"}`,
		`<html>` + strings.Repeat("·", 500) + `wk-SECRET-42/x</html>`, // the key where the excerpt is clipped
	}
	for i, body := range bodies {
		synctest.Test(t, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			api := newFakeAPI(sequence(
				reply{status: 503, header: map[string]string{"Retry-After": "soon, " + key}, body: body},
				reply{status: 400, body: body},
			))
			cb := &callbacks{}
			c, err := New(key, append(cb.options(), WithEndpoint("http://api.test"),
				WithHTTPClient(&http.Client{Transport: api}), WithFlushAt(1), WithLogger(zap.New(core)))...)
			require.NoError(t, err)
			auditLater(t, c, cb)
			mustTrack(t, c, fmt.Sprintf("m%d", i))
			require.NoError(t, closeClient(t, c, time.Minute))
			errs := cb.errors()
			require.Len(t, errs, 1)
			var he *HTTPError
			require.ErrorAs(t, errs[0].err, &he)
			assert.Equal(t, 400, he.StatusCode)
			for _, secret := range []string{key, basic, `wk-SECRET-42\/x`, "SECRET"} {
				assert.NotContains(t, errs[0].err.Error(), secret, "body %d", i)
				assert.NotContains(t, he.Message, secret)
				for _, e := range logs.All() {
					assert.NotContains(t, fmt.Sprint(e.Message, e.ContextMap()), secret, "log %q", e.Message)
				}
			}
		})
	}
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{err: fmt.Errorf("proxy refused Basic %s for %s", basic, key)}))
		cb := &callbacks{}
		c, err := New(key, append(cb.options(), WithEndpoint("http://api.test"),
			WithHTTPClient(&http.Client{Transport: api}), WithFlushAt(1), WithMaxRetries(0))...)
		require.NoError(t, err)
		auditLater(t, c, cb)
		mustTrack(t, c, "t1")
		require.NoError(t, closeClient(t, c, time.Minute))
		errs := cb.errors()
		require.Len(t, errs, 1)
		var te *TransportError
		require.ErrorAs(t, errs[0].err, &te)
		assert.NotContains(t, errs[0].err.Error(), "SECRET")
		assert.NotContains(t, te.Error(), basic)
		assert.Contains(t, te.Error(), "proxy refused Basic [redacted] for [redacted]")
		assert.True(t, errors.Is(errs[0].err, ErrRetriesExhausted))
	})
}
