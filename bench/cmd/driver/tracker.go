package main

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// sdkAttempts is the fixed number of attempts segment v3.1.0 and posthog-go
// v1.5.2 make per batch (const attempts = 10 in their send).
const sdkAttempts = 10

// tracker wraps http.DefaultTransport for segment and posthog so the driver
// can tell when they are idle: no request in flight and no batch waiting for
// a retry. Both SDKs marshal a batch once and re-send the same bytes on
// every attempt, so the first bytes of the body identify a batch (segment's
// body starts with the batch messageId, posthog's contains the first
// event's nanosecond timestamp). The cost is one 256-byte read and one small
// map operation per request, i.e. per 250 events.
type tracker struct {
	inflight atomic.Int64
	mu       sync.Mutex
	failing  map[string]int // batch key → attempts made, while its last attempt failed
	attempts map[string]int
}

func newTracker() *tracker {
	return &tracker{failing: map[string]int{}, attempts: map[string]int{}}
}

// transport returns the RoundTripper to configure: the tracker, or the SDK's
// default (nil → http.DefaultTransport) when draining is off.
func (t *tracker) transport(on bool) http.RoundTripper {
	if !on {
		return nil
	}
	return t
}

func (t *tracker) RoundTrip(req *http.Request) (*http.Response, error) {
	key := batchKey(req)
	t.inflight.Add(1)
	resp, err := http.DefaultTransport.RoundTrip(req)
	ok := err == nil && resp.StatusCode < 300
	t.mu.Lock()
	t.attempts[key]++
	if ok || t.attempts[key] >= sdkAttempts { // delivered, or the SDK gives up
		delete(t.failing, key)
		delete(t.attempts, key)
	} else {
		t.failing[key] = t.attempts[key]
	}
	t.mu.Unlock()
	t.inflight.Add(-1) // after the map update: never idle with an unrecorded failure
	return resp, err
}

func (t *tracker) idle() bool {
	if t.inflight.Load() != 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.failing) == 0
}

func batchKey(req *http.Request) string {
	if req.GetBody == nil {
		return ""
	}
	rc, err := req.GetBody()
	if err != nil {
		return ""
	}
	defer rc.Close()
	var buf [256]byte
	n, _ := io.ReadFull(rc, buf[:])
	return string(buf[:n])
}
