package analytics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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

// misbehaving passes each request to next (which records it) and, for its
// first `times` round trips, answers with bad instead.
type misbehaving struct {
	next  http.RoundTripper
	times int
	bad   func(*http.Request) (*http.Response, error)
	n     atomic.Int32
}

func (m *misbehaving) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := m.next.RoundTrip(req)
	if int(m.n.Add(1)) > m.times {
		return resp, err
	}
	return m.bad(req)
}

type readPanics struct{ data string } // returns data, then panics

func (r *readPanics) Read(p []byte) (int, error) {
	if r.data != "" {
		n := copy(p, r.data)
		r.data = r.data[n:]
		return n, nil
	}
	panic("body read exploded")
}
func (*readPanics) Close() error { return nil }

type closePanics struct{ io.Reader }

func (closePanics) Close() error { panic("body close exploded") }

type readFails struct{}

func (readFails) Read([]byte) (int, error) { return 0, errors.New("read failed") }
func (readFails) Close() error             { return nil }

// respond answers with code and a body made by newBody (nil: a nil Body).
func respond(code int, newBody func() io.ReadCloser) func(*http.Request) (*http.Response, error) {
	return func(req *http.Request) (*http.Response, error) {
		var b io.ReadCloser
		if newBody != nil {
			b = newBody()
		}
		return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{}, Body: b, Request: req}, nil
	}
}

// A Transport that misbehaves never takes the process down, as with v3:
// a panic or a missing value is an error of the attempt, retried when no
// status was read and decided by the status otherwise, and each message
// gets exactly one Callback call.
func TestMisbehavingTransport(t *testing.T) {
	nilReader := func() io.ReadCloser { return io.NopCloser(nil) }
	readPanic := func() io.ReadCloser { return &readPanics{} }
	dataThenPanic := func() io.ReadCloser { return &readPanics{data: "partial"} }
	closePanic := func() io.ReadCloser { return closePanics{strings.NewReader("x")} }
	cases := []struct {
		name     string
		bad      func(*http.Request) (*http.Response, error)
		requests int    // the transport misbehaves twice, then answers 200
		failed   string // Failure's error text; "" when every message is delivered
		one      bool   // one message (a 400 of several is halved, R66)
		panics   int    // ERROR lines per misbehaving attempt
	}{
		{name: "200, Body io.NopCloser(nil)", bad: respond(200, nilReader), requests: 1, panics: 1},
		{name: "200, nil Body", bad: respond(200, nil), requests: 1},
		{name: "200, Read panics", bad: respond(200, readPanic), requests: 1, panics: 1},
		{name: "200, Read returns data then panics", bad: respond(200, dataThenPanic), requests: 1, panics: 1},
		{name: "200, Read fails", bad: respond(200, func() io.ReadCloser { return readFails{} }), requests: 1},
		{name: "200, Close panics", bad: respond(200, closePanic), requests: 1, panics: 1},
		{name: "500, Body io.NopCloser(nil)", bad: respond(500, nilReader), requests: 3, panics: 1},
		{name: "500, nil Body", bad: respond(500, nil), requests: 3},
		{name: "500, Read panics", bad: respond(500, readPanic), requests: 3, panics: 1},
		{name: "503, Read returns data then panics", bad: respond(503, dataThenPanic), requests: 3, panics: 1},
		{name: "500, Close panics", bad: respond(500, closePanic), requests: 3, panics: 1},
		{name: "400, Body io.NopCloser(nil)", bad: respond(400, nilReader), requests: 1, panics: 1, one: true,
			failed: "analytics: non-retryable response 400 Bad Request"},
		{name: "400, Read panics", bad: respond(400, readPanic), requests: 1, panics: 1, one: true,
			failed: "analytics: non-retryable response 400 Bad Request"},
		{name: "RoundTrip panics", bad: func(*http.Request) (*http.Response, error) { panic("round trip exploded") }, requests: 3, panics: 1},
		{name: "RoundTrip panics with nil", bad: func(*http.Request) (*http.Response, error) { panic(nil) }, requests: 3, panics: 1},
		{name: "nil response, nil error", bad: func(*http.Request) (*http.Response, error) { return nil, nil }, requests: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := &fakeAPI{}
				rec := &recorder{}
				logs := &logLines{}
				client, err := analytics.NewWithConfig("key", analytics.Config{
					Transport: &misbehaving{next: api, times: 2, bad: tc.bad}, Callback: rec, Logger: logs,
					NativeOptions: []native.Option{native.WithConsumers(1)},
				})
				require.NoError(t, err)
				ids := []string{"a", "b", "c"}
				if tc.one {
					ids = ids[:1]
				}
				for _, id := range ids {
					require.NoError(t, client.Enqueue(track(id)))
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				start := time.Now()
				require.NoError(t, client.(interface{ Flush(context.Context) error }).Flush(ctx))
				require.NoError(t, client.Close())
				took := time.Since(start)
				synctest.Wait()

				assert.Equal(t, tc.requests, api.requests(), "requests")
				successes, failures := rec.byID()
				for _, id := range ids {
					assert.Equal(t, 1, successes[id]+failures[id], "callback calls for %s", id)
				}
				outcome := fmt.Sprintf("delivered (%d messages)", len(successes))
				if tc.failed == "" {
					assert.Len(t, successes, len(ids))
				} else {
					calls := rec.all()
					require.Len(t, calls, len(ids))
					assert.Equal(t, tc.failed, calls[0].err.Error())
					outcome = "Failure: " + calls[0].err.Error()
				}
				_, errs := logs.lines()
				misbehaved := min(tc.requests, 2)
				panics := 0
				for _, l := range errs {
					if strings.Contains(l, "panicked") {
						panics++
						assert.Contains(t, l, "stack=goroutine", "the stack is logged")
					}
				}
				assert.Equal(t, misbehaved*tc.panics, panics, "panics logged")
				t.Logf("outcome | %s | %d request(s), %d retried | %s | %d panic(s) logged | Flush+Close %v",
					tc.name, api.requests(), api.requests()-1, outcome, panics, took)
			})
		})
	}
}

// A Callback, or a Logger, that panics does not stop delivery: the later
// messages still get their calls.
func TestPanickingUserCodeKeepsDelivering(t *testing.T) {
	cases := []struct {
		name     string
		first    int // the status of the first batch's first request
		failures map[string]int
		minCalls int32
		config   func(*atomic.Int32, *recorder) analytics.Config
	}{
		{"Callback panics", 500, map[string]int{}, 2, func(calls *atomic.Int32, rec *recorder) analytics.Config {
			return analytics.Config{Callback: &panicAfterRecord{rec: rec, calls: calls}}
		}},
		// The 400 is logged at ERROR on the consumer.
		{"Logger panics", 400, map[string]int{"first": 1}, 2, func(calls *atomic.Int32, rec *recorder) analytics.Config {
			return analytics.Config{Callback: rec, Logger: panicLogger{calls}, Verbose: true}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				rec := &recorder{}
				api := &fakeAPI{status: func(n int) int { return []int{tc.first, 200}[min(n, 1)] }}
				config := tc.config(&calls, rec)
				config.Transport, config.BatchSize = api, 1
				config.NativeOptions = []native.Option{native.WithConsumers(1)}
				client, err := analytics.NewWithConfig("key", config)
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				flush := client.(interface{ Flush(context.Context) error }).Flush
				require.NoError(t, client.Enqueue(track("first")))
				require.NoError(t, flush(ctx))
				require.NoError(t, client.Enqueue(track("second")))
				require.NoError(t, flush(ctx))
				require.NoError(t, client.Close())
				successes, failures := rec.byID()
				assert.Equal(t, 1, successes["second"], "the later message is delivered")
				assert.Equal(t, 2, len(successes)+len(failures), "one call each")
				assert.Equal(t, tc.failures, failures)
				assert.GreaterOrEqual(t, calls.Load(), tc.minCalls, "the user code ran")
				t.Logf("outcome | %s | delivered %d, failed %d, requests %d, user code ran %d time(s)",
					tc.name, len(successes), len(failures), api.requests(), calls.Load())
			})
		})
	}
}

// A Callback that panics, with a Logger that panics too while the panic
// is being logged, still leaves every other message of the batch its call.
func TestPanickingCallbackAndLoggerInOneBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		rec := &recorder{}
		api := &fakeAPI{}
		client, err := analytics.NewWithConfig("key", analytics.Config{
			Transport: api, BatchSize: 3, Callback: &panicAfterRecord{rec: rec, calls: &calls}, Logger: panicLogger{&calls},
		})
		require.NoError(t, err)
		for _, id := range []string{"a", "b", "c"} {
			require.NoError(t, client.Enqueue(track(id)))
		}
		require.NoError(t, client.Close())
		assert.Equal(t, 1, api.requests())
		successes, failures := rec.byID()
		assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, successes)
		assert.Empty(t, failures)
	})
}

// panicAfterRecord records each call, then panics.
type panicAfterRecord struct {
	rec   *recorder
	calls *atomic.Int32
}

func (p *panicAfterRecord) Success(m analytics.Message) {
	p.rec.Success(m)
	p.calls.Add(1)
	panic("callback exploded")
}

func (p *panicAfterRecord) Failure(m analytics.Message, err error) {
	p.rec.Failure(m, err)
	p.calls.Add(1)
	panic("callback exploded")
}

// panicLogger is a Logger that panics on every line.
type panicLogger struct{ calls *atomic.Int32 }

func (l panicLogger) Logf(string, ...interface{}) {
	l.calls.Add(1)
	panic("logger exploded")
}

func (l panicLogger) Errorf(string, ...interface{}) {
	l.calls.Add(1)
	panic("logger exploded")
}

// A RetryAfter that panics (it runs on the engine's consumers) is logged
// with its stack, and its retry waits v3's default backoff instead:
// 100 ms, then 200 ms.
func TestPanickingRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{status: func(n int) int { return []int{500, 500, 200}[min(n, 2)] }}
		rec := &recorder{}
		logs := &logLines{}
		client, err := analytics.NewWithConfig("key", analytics.Config{
			Transport: api, Callback: rec, Logger: logs,
			RetryAfter: func(int) time.Duration { panic("retry policy exploded") },
		})
		require.NoError(t, err)
		require.NoError(t, client.Enqueue(track("a")))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		require.NoError(t, client.(interface{ Flush(context.Context) error }).Flush(ctx))
		assert.Equal(t, 300*time.Millisecond, time.Since(start), "100 ms + 200 ms")
		require.NoError(t, client.Close())
		assert.Equal(t, 3, api.requests())
		successes, failures := rec.byID()
		assert.Equal(t, map[string]int{"a": 1}, successes)
		assert.Empty(t, failures)
		_, errs := logs.lines()
		panics := 0
		for _, l := range errs {
			if strings.Contains(l, "Config.RetryAfter panicked") {
				panics++
				assert.Contains(t, l, "panic=retry policy exploded")
				assert.Contains(t, l, "stack=goroutine")
			}
		}
		assert.Equal(t, 2, panics)
	})
}
