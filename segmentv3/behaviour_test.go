package analytics_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	native "github.com/relaykit/analytics-go"
	analytics "github.com/relaykit/analytics-go/segmentv3"
)

func track(id string) analytics.Track {
	return analytics.Track{MessageId: id, UserId: "u", Event: "E", Properties: analytics.NewProperties().Set("id", id)}
}

// Enqueue waits while the queue is full, as v3's did, and returns once a
// consumer made room; nothing is dropped.
func TestEnqueueBlocksWhileQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{hold: make(chan struct{})}
		rec := &recorder{}
		client, err := analytics.NewWithConfig("key", analytics.Config{
			Transport: api, Callback: rec, BatchSize: 1,
			NativeOptions: []native.Option{native.WithQueueCapacity(1), native.WithConsumers(1)},
		})
		require.NoError(t, err)

		require.NoError(t, client.Enqueue(track("1"))) // taken by the consumer, whose request waits
		synctest.Wait()
		require.NoError(t, client.Enqueue(track("2"))) // fills the queue

		returned := make(chan error, 1)
		go func() { returned <- client.Enqueue(track("3")) }()
		synctest.Wait()
		select {
		case err := <-returned:
			t.Fatalf("Enqueue returned %v while the queue was full", err)
		default:
		}

		close(api.hold) // the API answers: room is made
		synctest.Wait()
		select {
		case err := <-returned:
			require.NoError(t, err)
		default:
			t.Fatal("Enqueue still blocked after the queue had room")
		}
		require.NoError(t, client.Close())
		assert.Len(t, api.events(), 3)
		successes, failures := rec.byID()
		assert.Equal(t, map[string]int{"1": 1, "2": 1, "3": 1}, successes)
		assert.Empty(t, failures)
	})
}

// An Enqueue waiting for room when Close begins returns ErrClosed, and its
// message is neither sent nor reported.
func TestEnqueueWaitingAtCloseReturnsErrClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{hold: make(chan struct{})}
		rec := &recorder{}
		client, err := analytics.NewWithConfig("key", analytics.Config{
			Transport: api, Callback: rec, BatchSize: 1, CloseTimeout: time.Second,
			NativeOptions: []native.Option{native.WithQueueCapacity(1), native.WithConsumers(1)},
		})
		require.NoError(t, err)
		require.NoError(t, client.Enqueue(track("1")))
		synctest.Wait()
		require.NoError(t, client.Enqueue(track("2")))
		returned := make(chan error, 1)
		go func() { returned <- client.Enqueue(track("3")) }()
		synctest.Wait()

		closed := make(chan error, 1)
		go func() { closed <- client.Close() }()
		synctest.Wait()
		assert.ErrorIs(t, <-returned, analytics.ErrClosed)
		close(api.hold)
		require.NoError(t, <-closed)
		successes, failures := rec.byID()
		assert.Equal(t, map[string]int{"1": 1, "2": 1}, successes)
		assert.Empty(t, failures)
	})
}

// Each message gets its own Success or Failure call, with the message as
// enqueued plus Type, MessageId and Timestamp; a 400 is not retried.
func TestCallbackPerMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{status: func(n int) int {
			if n == 0 {
				return 200
			}
			return 400
		}}
		rec := &recorder{}
		client, err := analytics.NewWithConfig("key", analytics.Config{
			Transport: api, Callback: rec, BatchSize: 2,
			NativeOptions: []native.Option{native.WithConsumers(1)},
		})
		require.NoError(t, err)
		for _, id := range []string{"a", "b"} {
			require.NoError(t, client.Enqueue(track(id)))
		}
		synctest.Wait() // the first batch is answered before the second exists
		require.NoError(t, client.Enqueue(&analytics.Track{UserId: "u", Event: "E", MessageId: "c"}))
		require.NoError(t, client.Enqueue(analytics.Identify{UserId: "u"}))
		require.NoError(t, client.Close())

		assert.Equal(t, 4, api.requests(), "the 400 is not retried: the batch of two is halved and each event fails with its own 400 (R66)")
		calls := rec.all()
		require.Len(t, calls, 4)
		successes, failures := rec.byID()
		assert.Equal(t, map[string]int{"a": 1, "b": 1}, successes)
		assert.Len(t, failures, 2)
		assert.Equal(t, 1, failures["c"])
		for _, c := range calls {
			switch m := c.msg.(type) {
			case analytics.Track:
				assert.Equal(t, "track", m.Type)
				assert.False(t, m.Timestamp.IsZero())
				if m.MessageId != "c" {
					assert.Equal(t, m.MessageId, m.Properties["id"], "the callback gets the message enqueued")
				}
			case analytics.Identify:
				assert.Equal(t, "identify", m.Type)
				assert.NotEmpty(t, m.MessageId)
				var httpErr *native.HTTPError
				require.ErrorAs(t, c.err, &httpErr)
				assert.Equal(t, 400, httpErr.StatusCode)
			default:
				t.Fatalf("unexpected message %T", c.msg)
			}
		}
	})
}

// Close sends what is queued at once (without waiting for Interval), and
// returns nil once every message has its outcome.
func TestCloseDeliversAndReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{}
		rec := &recorder{}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: api, Callback: rec, Interval: time.Hour})
		require.NoError(t, err)
		for i := range 5 {
			require.NoError(t, client.Enqueue(track(fmt.Sprint(i))))
		}
		start := time.Now()
		require.NoError(t, client.Close())
		assert.Less(t, time.Since(start), time.Second)
		assert.Len(t, api.events(), 5)
		successes, failures := rec.byID()
		assert.Len(t, successes, 5)
		assert.Empty(t, failures)
	})
}

// With the API failing, Close behaves as v3's: each queued batch gets its
// attempt, nothing waits for a retry, and every message goes to Failure at
// once with the last error; Close returns nil. A batch that was waiting
// for its retry when Close began is tried once more, then fails too.
func TestCloseServerDownFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{status: func(int) int { return 503 }}
		rec := &recorder{}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: api, Callback: rec, BatchSize: 2})
		require.NoError(t, err)
		for i := range 2 {
			require.NoError(t, client.Enqueue(track(fmt.Sprint(i))))
		}
		synctest.Wait() // the first batch failed once and waits for its retry
		require.Equal(t, 1, api.requests())
		require.NoError(t, client.Enqueue(track("2")))
		start := time.Now()
		require.NoError(t, client.Close())
		assert.Zero(t, time.Since(start), "no wait, not even for a backoff")
		assert.Equal(t, 3, api.requests(), "the waiting batch once more, the queued one once")
		successes, failures := rec.byID()
		assert.Empty(t, successes)
		assert.Equal(t, map[string]int{"0": 1, "1": 1, "2": 1}, failures)
		for _, c := range rec.all() {
			var httpErr *native.HTTPError
			require.ErrorAs(t, c.err, &httpErr)
			assert.Equal(t, 503, httpErr.StatusCode)
			assert.NotErrorIs(t, c.err, native.ErrShutdownInterrupted)
		}
	})
}

// With DrainOnClose, Close retries with the engine's policy until
// DefaultCloseTimeout, returns within DefaultCloseTimeout + 0.5 s and
// reports every message to Failure as handed back.
func TestCloseDrainOnCloseRetriesUntilTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{status: func(int) int { return 503 }}
		rec := &recorder{}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: api, Callback: rec, DrainOnClose: true})
		require.NoError(t, err)
		for i := range 3 {
			require.NoError(t, client.Enqueue(track(fmt.Sprint(i))))
		}
		start := time.Now()
		err = client.Close()
		elapsed := time.Since(start)
		require.ErrorIs(t, err, native.ErrShutdownInterrupted)
		assert.GreaterOrEqual(t, elapsed, analytics.DefaultCloseTimeout)
		assert.LessOrEqual(t, elapsed, analytics.DefaultCloseTimeout+500*time.Millisecond)
		assert.Greater(t, api.requests(), 1, "retried until the deadline")
		successes, failures := rec.byID()
		assert.Empty(t, successes)
		assert.Equal(t, map[string]int{"0": 1, "1": 1, "2": 1}, failures)
		for _, c := range rec.all() {
			assert.ErrorIs(t, c.err, native.ErrShutdownInterrupted)
		}
	})
}

// On real loopback sockets, with the default configuration (no
// CloseTimeout): against a closed port a v3 program's Close returns within
// 1 s and reports each message to Failure once, with the *url.Error; the
// same against a server that answers 500. A server that accepts and never
// answers is bounded by CloseTimeout.
func TestCloseServerDownLoopback(t *testing.T) {
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hanging.Close()
	defer close(release)
	var served atomic.Int32
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		served.Add(1)
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer failing.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())

	for _, tc := range []struct {
		name, endpoint string
		closeTimeout   time.Duration
		bound          time.Duration
		check          func(t *testing.T, err error)
	}{
		{"refused", refused, 0, time.Second, func(t *testing.T, err error) {
			_, ok := err.(*url.Error)
			assert.True(t, ok, "Failure gets the *url.Error itself: %T %v", err, err)
		}},
		{"500", failing.URL, 0, time.Second, func(t *testing.T, err error) {
			var httpErr *native.HTTPError
			require.ErrorAs(t, err, &httpErr)
			assert.Equal(t, 500, httpErr.StatusCode)
		}},
		{"hanging", hanging.URL, 300 * time.Millisecond, 300*time.Millisecond + 500*time.Millisecond + time.Second, func(t *testing.T, err error) {
			assert.ErrorIs(t, err, native.ErrShutdownInterrupted)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			client, err := analytics.NewWithConfig("key", analytics.Config{
				Endpoint: tc.endpoint, Callback: rec, CloseTimeout: tc.closeTimeout,
				Transport: &http.Transport{}, // closed with the test's idle connections
			})
			require.NoError(t, err)
			for i := range 3 {
				require.NoError(t, client.Enqueue(track(fmt.Sprint(i))))
			}
			start := time.Now()
			err = client.Close()
			elapsed := time.Since(start)
			assert.Less(t, elapsed, tc.bound)
			if tc.name == "hanging" {
				require.ErrorIs(t, err, native.ErrShutdownInterrupted)
			} else {
				require.NoError(t, err, "as v3's Close: the failures went to Failure")
			}
			successes, failures := rec.byID()
			assert.Empty(t, successes)
			assert.Equal(t, map[string]int{"0": 1, "1": 1, "2": 1}, failures)
			for _, c := range rec.all() {
				tc.check(t, c.err)
			}
			if tc.name == "500" {
				assert.Equal(t, int32(1), served.Load(), "the 500 batch was sent once, not retried")
			}
		})
	}
}

// Enqueue's errors: a FieldError for a missing field, an error for a nil
// message, ErrMessageTooBig (also reported to Failure) and ErrClosed.
func TestEnqueueErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{}
		rec := &recorder{}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: api, Callback: rec})
		require.NoError(t, err)

		err = client.Enqueue(analytics.Group{UserId: "u"})
		assert.Equal(t, analytics.FieldError{Type: "analytics.Group", Name: "GroupId", Value: ""}, err)
		assert.Error(t, client.Enqueue(nil))
		assert.Error(t, client.Enqueue((*analytics.Alias)(nil)))

		big := track("big")
		big.Properties["blob"] = strings.Repeat("x", 40_000)
		err = client.Enqueue(big)
		require.ErrorIs(t, err, analytics.ErrMessageTooBig)
		assert.ErrorIs(t, err, native.ErrEventTooLarge)

		odd := track("odd")
		odd.Properties["f"] = func() {}
		err = client.Enqueue(odd)
		assert.ErrorIs(t, err, native.ErrInvalidMessage, "not encodable as JSON")

		require.NoError(t, client.Close())
		assert.ErrorIs(t, client.Enqueue(track("late")), analytics.ErrClosed)
		assert.Empty(t, api.events())
		calls := rec.all()
		require.Len(t, calls, 2, "the too large and the unencodable message reach Failure, as in v3")
		assert.ErrorIs(t, calls[0].err, analytics.ErrMessageTooBig)
		assert.Equal(t, "big", messageID(calls[0].msg))
		_, isJSONErr := calls[1].err.(*json.UnsupportedTypeError)
		assert.True(t, isJSONErr, "Failure gets encoding/json's error, as in v3: %T", calls[1].err)
		assert.Equal(t, "odd", messageID(calls[1].msg))
	})
}

// An empty write key is accepted, as in v3, with one warning logged: the
// requests go out with it and the API's 401 reaches Failure. The fields
// v3 refused still fail NewWithConfig, and the error quotes their value
// once.
func TestEmptyWriteKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{status: func(int) int { return 401 }}
		rec := &recorder{}
		logs := &logLines{}
		client, err := analytics.NewWithConfig("", analytics.Config{Transport: api, Callback: rec, Logger: logs})
		require.NoError(t, err)
		require.NoError(t, client.Enqueue(track("x")))
		require.NoError(t, client.Close())
		require.Equal(t, 1, api.requests())
		assert.Equal(t, "Basic Og==", api.reqs[0].header.Get("Authorization"), `base64(":"): the empty key`)
		_, failures := rec.byID()
		assert.Equal(t, map[string]int{"x": 1}, failures)
		info, _ := logs.lines()
		warnings := 0
		for _, l := range info {
			if strings.Contains(l, "write key is empty") {
				warnings++
			}
		}
		assert.Equal(t, 1, warnings, "one warning: %q", info)
	})

	client := analytics.New("")
	require.NoError(t, client.Close())
	assert.ErrorIs(t, client.Close(), analytics.ErrClosed)

	var ce analytics.ConfigError
	_, err := analytics.NewWithConfig("key", analytics.Config{Interval: -time.Second})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Interval", ce.Field)
	assert.Equal(t, -time.Second, ce.Value)
	assert.Contains(t, err.Error(), `(analytics.Config.Interval: -1000000000)`)
	for _, bad := range []analytics.Config{{BatchSize: -1}, {CloseTimeout: -1}} {
		_, err = analytics.NewWithConfig("key", bad)
		assert.ErrorAs(t, err, &ce)
	}
}

// Logger gets the engine's errors through Errorf, Verbose adds debug lines;
// neither carries the write key or the payload.
func TestLoggerAndVerbose(t *testing.T) {
	for _, verbose := range []bool{false, true} {
		t.Run(fmt.Sprint("verbose=", verbose), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				logs := &logLines{}
				api := &fakeAPI{status: func(int) int { return 400 }}
				client, err := analytics.NewWithConfig("secret-key", analytics.Config{Transport: api, Logger: logs, Verbose: verbose})
				require.NoError(t, err)
				require.NoError(t, client.Enqueue(analytics.Track{UserId: "u", Event: "payload-marker"}))
				require.NoError(t, client.Close())
				info, errs := logs.lines()
				require.NotEmpty(t, errs, "the failed batch is logged as an error")
				assert.Contains(t, errs[0], "events not delivered")
				started := false
				for _, l := range append(info, errs...) {
					assert.NotContains(t, l, "secret-key")
					assert.NotContains(t, l, "payload-marker")
					started = started || strings.Contains(l, "analytics client started")
				}
				assert.Equal(t, verbose, started, "debug lines only with Verbose")
			})
		})
	}
}

// A panicking Callback is contained to its message: the others of the
// batch still get their call.
func TestCallbackPanicContained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		cb := panicky{calls: &calls}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: &fakeAPI{}, Callback: cb})
		require.NoError(t, err)
		for i := range 3 {
			require.NoError(t, client.Enqueue(track(fmt.Sprint(i))))
		}
		require.NoError(t, client.Close())
		assert.Equal(t, int32(3), calls.Load())
	})
}

type panicky struct{ calls *atomic.Int32 }

func (p panicky) Success(analytics.Message) {
	p.calls.Add(1)
	panic(errors.New("callback bug"))
}

func (p panicky) Failure(analytics.Message, error) {}

// BatchSize closes a batch at that many messages; Interval sends a smaller
// batch that long after its first message.
func TestBatchSizeAndInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: api, BatchSize: 3, Interval: 2 * time.Second})
		require.NoError(t, err)
		for i := range 4 {
			require.NoError(t, client.Enqueue(track(fmt.Sprint(i))))
		}
		synctest.Wait()
		assert.Equal(t, 1, api.requests(), "the full batch is sent at once")
		assert.Len(t, api.events(), 3)

		time.Sleep(1900 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 1, api.requests(), "the fourth message waits for Interval")
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 2, api.requests(), "and is sent once Interval has passed")
		require.NoError(t, client.Close())
		assert.Len(t, api.events(), 4)
	})
}
