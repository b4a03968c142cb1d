package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memTransport is a transport without HTTP: it records the messageIds of
// every attempt and answers each with the verdict judge gives them. It
// is this file alone, plugged in through withTransport: the engine does
// not change for it.
type memTransport struct {
	mu       sync.Mutex
	attempts [][]string // the messageIds of each attempt, in order
	judge    func(ids []string, attempt int) attemptResult
}

func (m *memTransport) attempt(ctx context.Context, b *batch, _ string) attemptResult {
	if err := ctx.Err(); err != nil {
		return attemptResult{outcome: outcomeRetry, err: &TransportError{Err: err, Retryable: true}, cause: err}
	}
	ids := make([]string, len(b.events))
	size := 0
	for i, e := range b.events {
		var m struct {
			MessageID string `json:"messageId"`
		}
		_ = json.Unmarshal(e.data, &m)
		ids[i] = m.MessageID
		size += len(e.data)
	}
	m.mu.Lock()
	m.attempts = append(m.attempts, ids)
	n := len(m.attempts) - 1
	m.mu.Unlock()
	r := m.judge(ids, n)
	r.sent, r.plainSize = size, size
	return r
}

func (m *memTransport) sent() [][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.attempts)
}

// noHTTP is an HTTP client's transport that fails the test if called.
func noHTTP(t *testing.T) http.RoundTripper {
	return roundTripFunc(func(*http.Request) (*http.Response, error) {
		t.Error("the HTTP client was called")
		return nil, errors.New("no HTTP here")
	})
}

// withTransport makes every consumer of the client use t.
func withTransport(t transport) Option {
	return optionFunc(func(s *settings) { s.newTransport = func() transport { return t } })
}

// The seam: a client delivers through an in-memory transport, and its
// callbacks and hook see what that transport answered. No request
// reaches the HTTP client (it fails the test if called).
func TestMemTransportDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := &memTransport{judge: func([]string, int) attemptResult { return attemptResult{outcome: outcomeDelivered, status: 200} }}
		cb := &callbacks{}
		var hooked []AttemptInfo
		c := newTestClient(t, noHTTP(t), cb, noAudit("no wire: the transport is in memory"), withTransport(mem), WithFlushAt(3),
			WithAttemptHook(func(a AttemptInfo) { hooked = append(hooked, a) }))
		for _, id := range []string{"a", "b", "c"} {
			mustTrack(t, c, id)
		}
		require.NoError(t, closeClient(t, c, time.Minute))
		assert.Equal(t, [][]string{{"a", "b", "c"}}, mem.sent())
		assert.Equal(t, []string{"a", "b", "c"}, cb.delivered())
		assert.Empty(t, cb.errors())
		require.Len(t, hooked, 1)
		assert.Equal(t, 3, hooked[0].Events)
		assert.Equal(t, 200, hooked[0].Status)
	})
}

// The engine acts on a transport's verdicts, whatever the transport: a
// poison verdict on a batch of several events isolates the event at
// fault (R66), a retry is retried with X-Retry-Count's count going up, and
// a verdict of failure fails the event alone with the transport's error.
// No HTTP client is called.
func TestMemTransportVerdicts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refusal := &HTTPError{StatusCode: 400, Kind: KindNonRetryable, Message: "bad event"}
		mem := &memTransport{judge: func(ids []string, n int) attemptResult {
			switch {
			case n == 0:
				return attemptResult{outcome: outcomeRetry, err: &TransportError{Err: errors.New("flaky"), Retryable: true}, cause: errors.New("flaky")}
			case slices.Contains(ids, "bad"):
				return attemptResult{outcome: outcomePoison, err: refusal}
			}
			return attemptResult{outcome: outcomeDelivered}
		}}
		cb := &callbacks{}
		c := newTestClient(t, noHTTP(t), cb, noAudit("no wire: the transport is in memory"), withTransport(mem), WithFlushAt(4))
		for _, id := range []string{"a", "bad", "c", "d"} {
			mustTrack(t, c, id)
		}
		require.NoError(t, closeClient(t, c, time.Hour))
		sent := mem.sent()
		require.GreaterOrEqual(t, len(sent), 3)
		assert.Equal(t, []string{"a", "bad", "c", "d"}, sent[0], "the first attempt")
		assert.Equal(t, []string{"a", "bad", "c", "d"}, sent[1], "its retry")
		assert.ElementsMatch(t, []string{"a", "c", "d"}, cb.delivered())
		errs := cb.errors()
		require.Len(t, errs, 1)
		require.Len(t, errs[0].msgs, 1)
		assert.Equal(t, "bad", errs[0].msgs[0].ID(), "the poison event fails alone")
		assert.ErrorIs(t, errs[0].err, refusal)
	})
}
