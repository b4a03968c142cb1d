package analytics_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	analytics "github.com/relaykit/analytics-go/segmentv3"
)

// syncBuffer is a bytes.Buffer safe for the client's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Verbose without a Logger logs to standard error with v3's prefix; the
// write key and the payload never appear.
func TestVerboseWithoutLoggerWritesToStderr(t *testing.T) {
	out := &syncBuffer{}
	defer analytics.SetStderr(out)()
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{status: func(int) int { return 400 }}
		client, err := analytics.NewWithConfig("secret-key", analytics.Config{Transport: api, Verbose: true})
		require.NoError(t, err)
		require.NoError(t, client.Enqueue(analytics.Track{UserId: "u", Event: "payload-marker"}))
		require.NoError(t, client.Close())
	})
	text := out.String()
	assert.Contains(t, text, "segment ")
	assert.Contains(t, text, "INFO: analytics client started")
	assert.Contains(t, text, "ERROR: ")
	assert.NotContains(t, text, "secret-key")
	assert.NotContains(t, text, "payload-marker")

	out2 := &syncBuffer{}
	defer analytics.SetStderr(out2)()
	synctest.Test(t, func(t *testing.T) {
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: &fakeAPI{status: func(int) int { return 400 }}})
		require.NoError(t, err)
		require.NoError(t, client.Enqueue(analytics.Track{UserId: "u", Event: "e"}))
		require.NoError(t, client.Close())
	})
	assert.Empty(t, out2.String(), "silent without Verbose")
}

// RetryAfter drives the counted waits: the k-th retry waits RetryAfter(k-1).
func TestRetryAfterDrivesCountedRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var at []time.Time
		api := &fakeAPI{status: func(n int) int {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
			if n < 3 {
				return 500
			}
			return 200
		}}
		rec := &recorder{}
		var asked []int
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: api, Callback: rec, BatchSize: 1,
			RetryAfter: func(k int) time.Duration { asked = append(asked, k); return time.Duration(k+1) * time.Hour }})
		require.NoError(t, err)
		require.NoError(t, client.Enqueue(track("a")))
		time.Sleep(7 * time.Hour)
		synctest.Wait()
		require.NoError(t, client.Close())
		successes, _ := rec.byID()
		assert.Equal(t, map[string]int{"a": 1}, successes)
		assert.Equal(t, []int{0, 1, 2}, asked)
		require.Len(t, at, 4)
		for i, want := range []time.Duration{time.Hour, 2 * time.Hour, 3 * time.Hour} {
			assert.Equal(t, want, at[i+1].Sub(at[i]), "wait before retry %d", i+1)
		}
	})
}

// embedded is a custom message type made by embedding, as v3 programs do.
type embedded struct{ analytics.Track }

// invalidCustom is a custom type whose Validate fails.
type invalidCustom struct{}

var errCustom = errors.New("custom validation failed")

func (invalidCustom) Validate() error { return errCustom }

// Custom types get v3's error text, after their own Validate ran.
func TestCustomTypes(t *testing.T) {
	client, err := analytics.NewWithConfig("key", analytics.Config{Transport: &fakeAPI{}})
	require.NoError(t, err)
	defer client.Close()
	err = client.Enqueue(embedded{analytics.Track{UserId: "u", Event: "e"}})
	require.EqualError(t, err, "messages with custom types cannot be enqueued: analytics_test.embedded")
	err = client.Enqueue(&embedded{analytics.Track{UserId: "u", Event: "e"}})
	require.EqualError(t, err, "messages with custom types cannot be enqueued: *analytics_test.embedded")
	err = client.Enqueue(embedded{analytics.Track{UserId: "u"}})
	assert.Equal(t, analytics.FieldError{Type: "analytics.Track", Name: "Event", Value: ""}, err, "the promoted Validate runs first")
	assert.Same(t, errCustom, client.Enqueue(invalidCustom{}))
}

// A replaced http.DefaultTransport (httpmock.Activate does so) makes no
// panic and carries the requests.
func TestReplacedDefaultTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{}
		saved := http.DefaultTransport
		http.DefaultTransport = api
		defer func() { http.DefaultTransport = saved }()
		client := analytics.New("key")
		require.NoError(t, client.Enqueue(track("a")))
		require.NoError(t, client.Close())
		require.Len(t, api.events(), 1)
		assert.Equal(t, "a", api.events()[0]["messageId"])
		assert.True(t, strings.HasPrefix(api.reqs[0].url, analytics.DefaultEndpoint))
	})
}

// The uid and now seams of Config (set by v3's own tests) stamp the
// messages that have no MessageId or Timestamp.
func TestStampSeams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{}
		config := analytics.Config{Transport: api}
		mock := time.Date(2009, time.November, 10, 23, 0, 0, 0, time.FixedZone("X", 3600))
		analytics.SetStamps(&config, func() string { return "I'm unique" }, func() time.Time { return mock })
		client, err := analytics.NewWithConfig("key", config)
		require.NoError(t, err)
		require.NoError(t, client.Enqueue(analytics.Track{UserId: "u", Event: "e"}))
		require.NoError(t, client.Enqueue(analytics.Track{UserId: "u", Event: "e", MessageId: "own"}))
		require.NoError(t, client.Close())
		events := api.events()
		require.Len(t, events, 2)
		assert.Equal(t, "I'm unique", events[0]["messageId"])
		assert.Equal(t, "2009-11-10T22:00:00Z", events[0]["timestamp"], "the seam's clock, in UTC")
		assert.Equal(t, "own", events[1]["messageId"])
	})
}
