package analytics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/relaykit/analytics-go/internal/shared"
)

// A test that replaced http.DefaultTransport (httpmock.Activate does) must
// not make New panic, and the replacement carries the requests.
func TestReplacedDefaultTransportIsUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		saved := http.DefaultTransport
		http.DefaultTransport = api
		defer func() { http.DefaultTransport = saved }()
		c, err := New("wk", WithEndpoint("http://api.test"))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		mustTrack(t, c, "m1")
		if err := closeClient(t, c, 5*time.Second); err != nil {
			t.Fatalf("Close: %v", err)
		}
		reqs := api.requests()
		if len(reqs) != 1 || len(reqs[0].ids) != 1 || reqs[0].ids[0] != "m1" {
			t.Fatalf("the replaced DefaultTransport got %d requests (%v), want one with m1", len(reqs), reqs)
		}
	})
}

func compatOption(c shared.Compat) Option { return shared.CompatOption(c).(Option) }

// BodyFields are written at the top level of every body; NoLibrary leaves
// context.library and an empty context out of events.
func TestCompatBodyFieldsAndNoLibrary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		c := newTestClient(t, api, nil, compatOption(shared.Compat{
			BodyFields: []byte(`"context":{"library":{"name":"x","version":"1"}}`),
			NoLibrary:  true,
		}))
		mustTrack(t, c, "m1")
		if err := c.Track(Track{MessageID: "m2", UserID: "u", Event: "E", Context: ContextFields{"app": "a"}}); err != nil {
			t.Fatal(err)
		}
		if err := closeClient(t, c, 5*time.Second); err != nil {
			t.Fatalf("Close: %v", err)
		}
		reqs := api.requests()
		if len(reqs) != 1 {
			t.Fatalf("%d requests, want 1", len(reqs))
		}
		var body struct {
			Batch   []map[string]json.RawMessage `json:"batch"`
			Context json.RawMessage              `json:"context"`
			WK      string                       `json:"writeKey"`
			SentAt  string                       `json:"sentAt"`
		}
		if err := json.Unmarshal(reqs[0].body, &body); err != nil {
			t.Fatalf("body %s: %v", reqs[0].body, err)
		}
		if string(body.Context) != `{"library":{"name":"x","version":"1"}}` || body.WK != "wk" || body.SentAt == "" {
			t.Fatalf("top level of %s", reqs[0].body)
		}
		if _, ok := body.Batch[0]["context"]; ok {
			t.Fatalf("event without a context got one: %s", body.Batch[0]["context"])
		}
		if got := string(body.Batch[1]["context"]); got != `{"app":"a"}` {
			t.Fatalf("event context %s, want only its own", got)
		}
	})
}

func TestCompatBodyFieldsValidated(t *testing.T) {
	for _, f := range []string{`"batch":[]`, `"sentAt":1`, `{"a":1}`, `"a":`, `,"a":1`, `"a":"` + strings.Repeat("x", maxBodyFields) + `"`} {
		_, err := New("wk", compatOption(shared.Compat{BodyFields: []byte(f)}))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "BodyFields" {
			t.Errorf("BodyFields %.20q: err %v, want a ConfigError", f, err)
		}
	}
}

// The body fields count in the body budget: a batch closes earlier by
// their size, so no body exceeds MaxBatchBytes.
func TestCompatBodyFieldsCountInBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		extra := `"pad":"` + strings.Repeat("p", 30000) + `"`
		c := newTestClient(t, api, nil, WithFlushAt(1000), compatOption(shared.Compat{BodyFields: []byte(extra)}))
		big := strings.Repeat("b", 31000)
		for i := range 16 { // 16 × ~31 KB events: 496 KB of events
			if err := c.Track(Track{MessageID: string(rune('a' + i)), UserID: "u", Event: "E", Properties: Properties{"s": big}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := closeClient(t, c, 5*time.Second); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for i, r := range api.requests() {
			if len(r.body) > MaxBatchBytes {
				t.Errorf("request %d: %d bytes, over MaxBatchBytes", i, len(r.body))
			}
		}
	})
}

// RetryDelay replaces the backoff: the k-th counted retry waits
// RetryDelay(k-1), clamped to [0, MaxTotalBackoffDuration].
func TestCompatRetryDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{status: 500}, reply{status: 500}, reply{status: 500}, reply{status: 200}))
		delays := []time.Duration{3 * time.Second, -time.Second, 7 * time.Second}
		c := newTestClient(t, api, nil, compatOption(shared.Compat{RetryDelay: func(k int) time.Duration { return delays[k] }}))
		mustTrack(t, c, "m1")
		if err := flush(t, c, time.Minute); err != nil {
			t.Fatal(err)
		}
		reqs := api.requests()
		if len(reqs) != 4 {
			t.Fatalf("%d requests, want 4", len(reqs))
		}
		for i, want := range []time.Duration{3 * time.Second, 0, 7 * time.Second} {
			if g := gap(reqs, i); g != want {
				t.Errorf("wait before retry %d: %v, want %v", i+1, g, want)
			}
		}
		_ = closeClient(t, c, time.Second)
	})
}

// FastClose: Close makes waiting batches due at once, tries each once
// more, and fails what would be retried with its last error.
func TestCompatFastClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(func(int, seen) reply { return reply{status: 503} })
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(1), compatOption(shared.Compat{FastClose: true}))
		mustTrack(t, c, "waiting") // fails once, waits for its backoff
		for len(api.requests()) < 1 {
			time.Sleep(time.Millisecond)
		}
		synctest.Wait()
		mustTrack(t, c, "second")
		// Let a consumer take "second" before Close: otherwise whether it is
		// sent before Close or at Close (once either way) is a race, and so
		// is the request count.
		synctest.Wait()
		start := time.Now()
		if err := closeClient(t, c, 10*time.Second); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Close took %v of fake time, want no wait", d)
		}
		errs := cb.errors()
		if n := len(cb.dispositions()); n != 2 {
			t.Fatalf("%d events with an outcome, want 2 (%v)", n, errs)
		}
		for _, e := range errs {
			var he *HTTPError
			if !errors.As(e.err, &he) || he.StatusCode != 503 || errors.Is(e.err, ErrShutdownInterrupted) {
				t.Errorf("OnError %v: want the last *HTTPError 503", e.err)
			}
		}
		if n := len(api.requests()); n != 4 {
			t.Errorf("%d requests, want 4: each event once before Close and once at it", n)
		}
	})
}

// FastClose: a request in flight when Close begins whose answer is
// retryable fails at once, and so does one answered 429 with a
// Retry-After: Close does not wait for the backoff or the deadline.
func TestCompatFastCloseInFlight(t *testing.T) {
	for _, rep := range []reply{{status: 503, hold: time.Second}, {status: 429, header: map[string]string{"Retry-After": "120"}, hold: time.Second}} {
		synctest.Test(t, func(t *testing.T) {
			api := newFakeAPI(func(int, seen) reply { return rep })
			cb := &callbacks{}
			c := newTestClient(t, api, cb, WithFlushAt(1), compatOption(shared.Compat{FastClose: true}))
			mustTrack(t, c, "m1")
			time.Sleep(500 * time.Millisecond) // the request is in flight
			start := time.Now()
			if err := closeClient(t, c, 10*time.Second); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if d := time.Since(start); d != 500*time.Millisecond {
				t.Errorf("status %d: Close took %v, want the 0.5 s the answer took", rep.status, d)
			}
			errs := cb.errors()
			var he *HTTPError
			if len(errs) != 1 || !errors.As(errs[0].err, &he) || he.StatusCode != rep.status {
				t.Errorf("status %d: OnError calls %v, want one with the *HTTPError", rep.status, errs)
			}
			if n := len(api.requests()); n != 1 {
				t.Errorf("status %d: %d requests, want 1", rep.status, n)
			}
		})
	}
}

// AnyEndpoint and AnyWriteKey accept what segment v3 accepted: the request
// goes to Endpoint + "/v1/batch" as given, with the key as given; without
// them New refuses both.
func TestCompatAnyEndpointAndWriteKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []string
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			_, _ = io.Copy(io.Discard, r.Body)
			user, _, _ := r.BasicAuth()
			got = append(got, r.URL.String(), user)
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
		})
		opts := []Option{WithEndpoint("https://api.example.com/v1/batch"), WithHTTPClient(&http.Client{Transport: rt})}
		if _, err := New(" wk\n", opts...); err == nil {
			t.Fatal("New accepted the key and endpoint without AnyWriteKey and AnyEndpoint")
		}
		c, err := New(" wk\n", append(opts, compatOption(shared.Compat{AnyEndpoint: true, AnyWriteKey: true}))...)
		if err != nil {
			t.Fatal(err)
		}
		mustTrack(t, c, "m1")
		if err := closeClient(t, c, time.Second); err != nil {
			t.Fatal(err)
		}
		want := []string{"https://api.example.com/v1/batch/v1/batch", " wk\n"}
		if !slices.Equal(got, want) {
			t.Errorf("requests %q, want %q", got, want)
		}
		if shared.CheckEndpoint("https://api.example.com/v1/batch") == nil || shared.CheckEndpoint("https://api.example.com/") != nil {
			t.Error("CheckEndpoint does not apply WithEndpoint's checks")
		}
	})
}

// NoRetryAllowance: every counted retry goes when its RetryDelay is over,
// however many batches fail at once; without it the retry allowance paces
// them (R63).
func TestCompatNoRetryAllowance(t *testing.T) {
	for _, unpaced := range []bool{false, true} {
		t.Run(fmt.Sprint("NoRetryAllowance=", unpaced), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := newFakeAPI(func(int, seen) reply { return reply{status: 500} })
				c := newTestClient(t, api, nil, WithFlushAt(1), WithMaxRetries(1), compatOption(shared.Compat{
					RetryDelay: func(int) time.Duration { return time.Second }, NoRetryAllowance: unpaced,
				}))
				start := time.Now()
				for i := range 40 {
					mustTrack(t, c, fmt.Sprint(i))
				}
				if err := flush(t, c, time.Minute); err != nil {
					t.Fatal(err)
				}
				reqs := api.requests()
				if len(reqs) != 80 {
					t.Fatalf("%d requests, want 80", len(reqs))
				}
				last := reqs[len(reqs)-1].at.Sub(start)
				if unpaced && last != time.Second {
					t.Errorf("last retry after %v, want every retry after its 1 s", last)
				}
				if !unpaced && last < 4*time.Second { // 20 tokens, then 5 per second
					t.Errorf("last retry after %v, want the allowance to pace the 40 retries", last)
				}
			})
		})
	}
}
