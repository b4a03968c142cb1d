package analytics

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"strings"
	"time"

	"github.com/relaykit/analytics-go/internal/shared"
)

// Seams for the segment v3 compatibility package (segmentv3). They are
// reached through internal/shared, so they are not part of this package's
// API; see shared.Compat for what each one does.

func init() {
	shared.CompatOption = func(c shared.Compat) any {
		return optionFunc(func(s *settings) {
			if len(c.BodyFields) > 0 && !validBodyFields(c.BodyFields) {
				s.errs = append(s.errs, invalid("BodyFields", len(c.BodyFields), "must be at most shared.MaxBodyFields bytes of JSON object members"))
			}
			s.compat = c
		})
	}
	shared.MaxBodyFields = maxBodyFields
	shared.CheckEndpoint = func(endpoint string) error {
		return checkEndpoint(strings.TrimSuffix(endpoint, "/"))
	}
}

// maxBodyFields is the most shared.Compat BodyFields may take of a batch:
// the rest still holds one event of MaxEventBytes.
const maxBodyFields = batchEventBytes - MaxEventBytes

// validBodyFields reports whether members are JSON object members that
// take none of the body's own keys, within maxBodyFields.
func validBodyFields(members []byte) bool {
	if len(members) > maxBodyFields {
		return false
	}
	obj := append(append([]byte{'{'}, members...), '}')
	var m map[string]json.RawMessage
	if bytes.HasPrefix(bytes.TrimSpace(members), []byte{','}) || json.Unmarshal(obj, &m) != nil {
		return false
	}
	_, batch := m["batch"]
	_, sentAt := m["sentAt"]
	_, key := m["writeKey"]
	return !batch && !sentAt && !key
}

// compatDelay is the counted-retry delay a shared.Compat RetryDelay sets,
// clamped to the engine's budget; ok is false without one.
func (p retryPolicy) compatDelay(k int) (d time.Duration, ok bool) {
	if p.retryDelay == nil {
		return 0, false
	}
	return min(max(p.retryDelay(k), 0), p.maxBackoffTotal), true
}

// stopped reports whether retries have ended: Close began on a client
// with shared.Compat FastClose.
func (p retryPolicy) stopped() bool {
	return p.stop != nil && p.stop.Load()
}

// endRetries ends retries when Close begins on a client with
// shared.Compat FastClose: consumers fail what would be retried. Close
// calls it before it closes the queue, so the open batch, which the queue
// then lets go at once, fails instead of waiting for a retry.
func (c *Client) endRetries() {
	if c.stopRetries != nil {
		c.stopRetries.Store(true)
	}
}

// fastClose goes on with a Close without retries (shared.Compat
// FastClose; endRetries came first): every batch waiting in the room is
// due now and the gate opens.
func (c *Client) fastClose() {
	if c.stopRetries != nil {
		c.room.dueNow(time.Now())
	}
}

// dueNow makes every waiting batch due at now and opens the gate, for a
// Close that waits for no retry; a batch that a consumer puts in the room
// later (its outcome was decided before Close began) is due at once too.
func (r *waitingRoom) dueNow(now time.Time) {
	r.mu.Lock()
	r.noWait = true
	r.deadline, r.start = time.Time{}, time.Time{}
	if r.answer != nil { // no episode, no probe (R64): nobody waits for one
		close(r.answer)
		r.answer = nil
	}
	for i := range r.waiting {
		if r.waiting[i].due.After(now) {
			r.waiting[i].due = now
		}
	}
	heap.Init(&r.waiting)
	r.mu.Unlock()
	signal(r.ready)
}
