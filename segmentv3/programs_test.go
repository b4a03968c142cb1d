package analytics_test

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	native "github.com/relaykit/analytics-go"
	analytics "github.com/relaykit/analytics-go/segmentv3"
)

// The tests in this file have the shape of real v3 programs that were
// ported by changing their import line.

// v3Wait is v3's wait after its failed attempt k (from 0): backo's
// default, 100 ms × 2^k capped at 10 s, no jitter.
func v3Wait(k int) time.Duration {
	return min(100*time.Millisecond<<k, 10*time.Second)
}

// v3TimeToFailure is how long v3 took from a message's first attempt to
// its Failure against an API that never answers: it waited after each of
// its 10 attempts (42.7 s).
func v3TimeToFailure() time.Duration {
	var d time.Duration
	for k := range 10 {
		d += v3Wait(k)
	}
	return d
}

// A program's test builds its client with a made-up endpoint, as v3
// allowed: NewWithConfig returns a working client (nil error), one
// warning names the field, Enqueue and Close return nil, and the message
// fails at send time through Failure with the *url.Error v3 reported.
func TestProgramBadEndpointInTest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		logs := &logLines{}
		client, err := analytics.NewWithConfig("key", analytics.Config{Endpoint: "url", Callback: rec, Logger: logs})
		require.NoError(t, err)
		require.NotNil(t, client)
		require.NoError(t, client.Enqueue(analytics.Track{MessageId: "1", UserId: "u", Event: "Signed Up"}))
		require.NoError(t, client.Close())

		calls := rec.all()
		require.Len(t, calls, 1)
		assert.Equal(t, "1", messageID(calls[0].msg))
		var ue *url.Error
		require.ErrorAs(t, calls[0].err, &ue)
		assert.Equal(t, `Post "url/v1/batch": unsupported protocol scheme ""`, calls[0].err.Error(), "v3's error text")

		info, _ := logs.lines()
		t.Logf("logged: %q", info)
		warned := 0
		for _, l := range info {
			if strings.Contains(l, "Config.Endpoint") {
				warned++
			}
		}
		assert.Equal(t, 1, warned, "one warning names the field: %q", info)
	})
}

// Every other configuration v3's NewWithConfig accepted gives a client:
// values the engine cannot take are logged once (never with the write key)
// and either brought into its range (Interval, BatchSize) or reach the API
// as v3 sent them (Endpoint, write key, DefaultContext); what could not
// succeed with v3 either fails through Failure.
func TestProgramConfigurationsV3Accepted(t *testing.T) {
	big := &analytics.Context{Extra: map[string]interface{}{"blob": strings.Repeat("x", 40_000)}}
	huge := &analytics.Context{Extra: map[string]interface{}{"blob": strings.Repeat("x", 460_000)}}
	for _, tc := range []struct {
		name   string
		key    string
		config analytics.Config
		check  func(t *testing.T, api *fakeAPI, calls []outcome)
	}{
		{"endpoint with /v1/batch", "key", analytics.Config{Endpoint: "https://api.example.com/v1/batch"}, func(t *testing.T, api *fakeAPI, calls []outcome) {
			require.Equal(t, 1, api.requests())
			assert.Equal(t, "https://api.example.com/v1/batch/v1/batch", api.reqs[0].url, "where v3 posted")
		}},
		{"endpoint with a query", "key", analytics.Config{Endpoint: "https://api.example.com?region=eu"}, func(t *testing.T, api *fakeAPI, calls []outcome) {
			require.Equal(t, 1, api.requests())
			assert.Equal(t, "https://api.example.com?region=eu/v1/batch", api.reqs[0].url, "where v3 posted")
		}},
		{"endpoint that does not parse", "key", analytics.Config{Endpoint: "http://[::1"}, func(t *testing.T, api *fakeAPI, calls []outcome) {
			assert.Zero(t, api.requests())
			require.Len(t, calls, 1)
			var ue *url.Error
			require.ErrorAs(t, calls[0].err, &ue)
			assert.Equal(t, "parse", ue.Op, "v3's error: %v", calls[0].err)
		}},
		{"write key with a newline", "key\n", analytics.Config{}, func(t *testing.T, api *fakeAPI, calls []outcome) {
			require.Equal(t, 1, api.requests())
			assert.Equal(t, "Basic "+base64.StdEncoding.EncodeToString([]byte("key\n:")), api.reqs[0].header.Get("Authorization"), "the key as v3 sent it")
		}},
		{"interval over 24 h", "key", analytics.Config{Interval: 48 * time.Hour}, nil},
		{"batch size over 10 000", "key", analytics.Config{BatchSize: 20_000}, nil},
		{"DefaultContext over 32 KiB", "key", analytics.Config{DefaultContext: big}, func(t *testing.T, api *fakeAPI, calls []outcome) {
			require.Equal(t, 1, api.requests())
			ctx, _ := api.reqs[0].body["context"].(map[string]interface{})
			assert.Len(t, ctx["blob"], 40_000, "the body's context as v3 sent it")
			assert.NoError(t, calls[0].err)
		}},
		{"DefaultContext with no room for a message", "key", analytics.Config{DefaultContext: huge}, func(t *testing.T, api *fakeAPI, calls []outcome) {
			assert.Zero(t, api.requests())
			assert.ErrorContains(t, calls[0].err, "Config.DefaultContext encodes to")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := &fakeAPI{}
				rec := &recorder{}
				logs := &logLines{}
				cfg := tc.config
				cfg.Transport, cfg.Callback, cfg.Logger = api, rec, logs
				client, err := analytics.NewWithConfig(tc.key, cfg)
				require.NoError(t, err)
				require.NotNil(t, client)
				require.NoError(t, client.Enqueue(track("1")))
				require.NoError(t, client.Close())
				info, _ := logs.lines()
				warned := 0
				for _, l := range info {
					assert.NotContains(t, l, "key\n", "never the write key")
					if strings.Contains(l, "analytics: ") {
						warned++
					}
				}
				if tc.name == "DefaultContext over 32 KiB" {
					assert.Zero(t, warned, "nothing is wrong: %q", info)
				} else {
					assert.Equal(t, 1, warned, "one warning says what is wrong: %q", info)
				}
				calls := rec.all()
				require.Len(t, calls, 1)
				if tc.check != nil {
					tc.check(t, api, calls)
				} else {
					assert.NoError(t, calls[0].err)
				}
			})
		})
	}
}

// refusingAPI answers every request as a closed port does.
type refusingAPI struct {
	mu       sync.Mutex
	attempts []time.Time
}

func (r *refusingAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, time.Now())
	r.mu.Unlock()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
}

func (r *refusingAPI) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.attempts...)
}

// failureSignal is a Callback whose Failure each Track of the program
// waits on.
type failureSignal struct{ failed chan error }

func (f failureSignal) Success(analytics.Message)            { f.failed <- nil }
func (f failureSignal) Failure(_ analytics.Message, e error) { f.failed <- e }

// A program that waits for each message's callback, with BatchSize 1,
// against a closed port: with the defaults each message reaches Failure
// after v3's schedule (100 ms × 2^k capped at 10 s, 42.7 s in all), within
// ±20 %, and the waits between its attempts are v3's.
func TestProgramWaitsOnEachCallbackOffline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &refusingAPI{}
		cb := failureSignal{failed: make(chan error, 1)}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: api, Callback: cb, BatchSize: 1})
		require.NoError(t, err)
		want := v3TimeToFailure()
		for i := range 3 {
			start := time.Now()
			require.NoError(t, client.Enqueue(track(fmt.Sprint(i))))
			err := <-cb.failed
			took := time.Since(start)
			var ue *url.Error
			require.ErrorAs(t, err, &ue)
			assert.InDelta(t, want.Seconds(), took.Seconds(), 0.2*want.Seconds(),
				"message %d: time to Failure %v, v3's %v", i, took, want)
		}
		require.NoError(t, client.Close())

		times := api.times()
		require.Len(t, times, 3*11, "each message: a first attempt and 10 retries")
		for m := range 3 {
			for k := range 10 {
				gap := times[m*11+k+1].Sub(times[m*11+k])
				assert.InDelta(t, v3Wait(k).Seconds(), gap.Seconds(), 0.2*v3Wait(k).Seconds(),
					"message %d, wait %d: %v", m, k, gap)
			}
		}
	})
}

// blockingCallback never returns from Success until released.
type blockingCallback struct {
	entered chan struct{}
	release chan struct{}
}

func (b blockingCallback) Success(analytics.Message) {
	close(b.entered)
	<-b.release
}

func (b blockingCallback) Failure(analytics.Message, error) {}

// A program whose Callback.Success never returns calls Close: Close
// returns within DefaultCloseTimeout plus 0.5 s (v3 hung forever), and its
// error names the blocked callback and how many messages it was still
// reporting.
func TestProgramCallbackBlocksAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cb := blockingCallback{entered: make(chan struct{}), release: make(chan struct{})}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: &fakeAPI{}, Callback: cb, BatchSize: 2})
		require.NoError(t, err)
		require.NoError(t, client.Enqueue(track("1")))
		require.NoError(t, client.Enqueue(track("2")))
		<-cb.entered

		start := time.Now()
		err = client.Close()
		took := time.Since(start)
		t.Logf("Close: %v", err)
		close(cb.release) // the callback's goroutine ends before the bubble does
		assert.LessOrEqual(t, took, analytics.DefaultCloseTimeout+500*time.Millisecond)
		require.ErrorIs(t, err, native.ErrShutdownInterrupted)
		assert.Contains(t, err.Error(), "Callback.Success did not return")
		assert.Contains(t, err.Error(), "2 event(s) still being reported")
		assert.Contains(t, err.Error(), "Config.CloseTimeout (10s)")
	})
}

// Verbose's first line states the bounds this client applies: Close's
// (DefaultCloseTimeout, not the engine's 30 s) and v3's retry schedule.
func TestVerboseStartLineStatesBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logLines{}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: &fakeAPI{}, Logger: logs, Verbose: true})
		require.NoError(t, err)
		require.NoError(t, client.Close())
		info, _ := logs.lines()
		var started string
		for _, l := range info {
			if strings.Contains(l, "analytics client started") {
				started = l
			}
		}
		require.NotEmpty(t, started, "%q", info)
		assert.Contains(t, started, "closeTimeout=10s")
		assert.NotContains(t, started, "closeTimeout=30s")
		assert.Contains(t, started, "maxRetries=10")
		assert.True(t, slices.ContainsFunc(info, func(l string) bool {
			return strings.Contains(l, "retry are v3's, 100ms doubling up to 10s; Close waits for no retry")
		}), "a line states the retry waits and Close's behaviour: %q", info)
	})
}

// A program that enqueues a burst of messages (BatchSize 1) while offline
// and then waits for every callback: each message reaches Failure after
// v3's 42.7 s, within ±20 %, as each of v3's batches retried on its own;
// the engine's retry allowance does not stretch the waits.
func TestProgramWaitsOnAllCallbacksOffline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &refusingAPI{}
		const n = 50
		cb := failureSignal{failed: make(chan error, n)}
		client, err := analytics.NewWithConfig("key", analytics.Config{Transport: api, Callback: cb, BatchSize: 1})
		require.NoError(t, err)
		start := time.Now()
		for i := range n {
			require.NoError(t, client.Enqueue(track(fmt.Sprint(i))))
		}
		want := v3TimeToFailure()
		for i := range n {
			require.Error(t, <-cb.failed)
			took := time.Since(start)
			assert.InDelta(t, want.Seconds(), took.Seconds(), 0.2*want.Seconds(), "Failure %d of %d after %v, v3's %v", i+1, n, took, want)
		}
		require.NoError(t, client.Close())
		assert.Len(t, api.times(), n*11)
	})
}
