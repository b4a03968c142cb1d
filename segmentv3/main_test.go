package analytics_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	analytics "github.com/relaykit/analytics-go/segmentv3"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// request is one POST as the fake API received it.
type request struct {
	url    string
	path   string
	header http.Header
	body   map[string]interface{}
	raw    []byte
	events []map[string]interface{}
}

// fakeAPI is an in-process tracking API (an http.RoundTripper), so the
// tests run in a synctest bubble with fake time and no sockets.
type fakeAPI struct {
	mu     sync.Mutex
	reqs   []request
	status func(n int) int // status of the n-th request (from 0); nil: 200
	hold   chan struct{}   // when set, each request waits for it (or its cancellation)
}

func (f *fakeAPI) RoundTrip(r *http.Request) (*http.Response, error) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	_ = r.Body.Close()
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	var body map[string]interface{}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, err
	}
	req := request{url: r.URL.String(), path: r.URL.Path, header: r.Header.Clone(), body: body, raw: raw}
	list, _ := body["batch"].([]interface{})
	for _, e := range list {
		req.events = append(req.events, e.(map[string]interface{}))
	}
	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	status := 200
	if f.status != nil {
		status = f.status(n)
	}
	return &http.Response{
		StatusCode: status,
		Status:     http.StatusText(status),
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(strings.NewReader(`{}`)),
		Request:    r,
	}, nil
}

func (f *fakeAPI) events() []map[string]interface{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []map[string]interface{}
	for _, r := range f.reqs {
		all = append(all, r.events...)
	}
	return all
}

func (f *fakeAPI) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// outcome is one Callback call.
type outcome struct {
	msg analytics.Message
	err error // nil for Success
}

// recorder is a Callback that records every call.
type recorder struct {
	mu    sync.Mutex
	calls []outcome
}

func (r *recorder) Success(m analytics.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, outcome{msg: m})
}

func (r *recorder) Failure(m analytics.Message, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, outcome{msg: m, err: err})
}

func (r *recorder) all() []outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outcome(nil), r.calls...)
}

// successes and failures count the calls by message id.
func (r *recorder) byID() (successes, failures map[string]int) {
	successes, failures = map[string]int{}, map[string]int{}
	for _, c := range r.all() {
		id := messageID(c.msg)
		if c.err == nil {
			successes[id]++
		} else {
			failures[id]++
		}
	}
	return successes, failures
}

func messageID(m analytics.Message) string {
	switch v := m.(type) {
	case analytics.Track:
		return v.MessageId
	case analytics.Identify:
		return v.MessageId
	case analytics.Group:
		return v.MessageId
	case analytics.Page:
		return v.MessageId
	case analytics.Screen:
		return v.MessageId
	case analytics.Alias:
		return v.MessageId
	}
	return ""
}

// logLines is a Logger that records its lines.
type logLines struct {
	mu    sync.Mutex
	info  []string
	error []string
}

func (l *logLines) Logf(format string, args ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.info = append(l.info, sprintf(format, args...))
}

func (l *logLines) Errorf(format string, args ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.error = append(l.error, sprintf(format, args...))
}

func (l *logLines) lines() (info, errs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.info...), append([]string(nil), l.error...)
}

func sprintf(format string, args ...interface{}) string {
	return fmt.Sprintf(format, args...)
}
