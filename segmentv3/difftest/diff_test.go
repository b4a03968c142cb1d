package difftest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	native "github.com/relaykit/analytics-go"
	compatprog "github.com/relaykit/analytics-go/segmentv3/difftest/internal/compatprog"
	v3prog "github.com/relaykit/analytics-go/segmentv3/difftest/internal/v3prog"
)

// recorder is a loopback tracking API that answers 200 and keeps every
// request.
type recorder struct {
	mu     sync.Mutex
	bodies []map[string]interface{}
	heads  []http.Header
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	var body map[string]interface{}
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	if err != nil || r.Method != http.MethodPost || r.URL.Path != "/v1/batch" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	rec.mu.Lock()
	rec.bodies = append(rec.bodies, body)
	rec.heads = append(rec.heads, r.Header.Clone())
	rec.mu.Unlock()
	_, _ = w.Write([]byte(`{"success":true}`))
}

// record runs program against a fresh recorder.
func record[R any](t *testing.T, program func(string, http.RoundTripper) R) (*recorder, R) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	res := program(srv.URL, &http.Transport{})
	return rec, res
}

// ignored are the fields the comparison leaves out: generated or
// time-dependent values, and the library's own name.
var ignored = map[string]bool{"messageId": true, "timestamp": true, "sentAt": true}

// events returns every event received, normalised: the batch-level context
// (where v3 put DefaultContext) is applied under each event's own context,
// then the ignored fields and context.library are removed. The result is
// keyed by a label that identifies the event in the program.
func (rec *recorder) events(t *testing.T) map[string]map[string]interface{} {
	t.Helper()
	out := map[string]map[string]interface{}{}
	for _, body := range rec.bodies {
		batchCtx, _ := body["context"].(map[string]interface{})
		list, _ := body["batch"].([]interface{})
		for _, item := range list {
			e := item.(map[string]interface{})
			ctx := map[string]interface{}{}
			for k, v := range batchCtx {
				ctx[k] = v
			}
			if own, ok := e["context"].(map[string]interface{}); ok {
				for k, v := range own {
					ctx[k] = v
				}
			}
			delete(ctx, "library")
			e["context"] = ctx
			for k := range ignored {
				delete(e, k)
			}
			label := str(e["type"]) + "/" + str(e["event"]) + str(e["name"]) + str(e["groupId"]) + str(e["previousId"]) +
				"/" + str(e["userId"]) + str(e["anonymousId"])
			require.NotContains(t, out, label, "labels identify events")
			out[label] = e
		}
	}
	return out
}

// topLevelKeys returns the sorted keys of the batch objects received.
func topLevelKeys(bodies []map[string]interface{}) []string {
	seen := map[string]bool{}
	for _, b := range bodies {
		for k := range b {
			seen[k] = true
		}
	}
	var keys []string
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// str returns v as a string, "" when it is missing.
func str(v interface{}) string {
	s, _ := v.(string)
	return s
}

// diff lists the paths where a and b differ, as "path: v3=… compat=…".
func diff(path string, a, b interface{}) []string {
	am, aok := a.(map[string]interface{})
	bm, bok := b.(map[string]interface{})
	if aok && bok {
		var out []string
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for k := range keys {
			av, ain := am[k]
			bv, bin := bm[k]
			switch {
			case !ain:
				out = append(out, fmt.Sprintf("%s.%s: compat only", path, k))
			case !bin:
				out = append(out, fmt.Sprintf("%s.%s: v3 only", path, k))
			default:
				out = append(out, diff(path+"."+k, av, bv)...)
			}
		}
		return out
	}
	al, aok := a.([]interface{})
	bl, bok := b.([]interface{})
	if aok && bok && len(al) == len(bl) {
		var out []string
		for i := range al {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(a, b) {
		return []string{fmt.Sprintf("%s: v3=%v compat=%v", path, a, b)}
	}
	return nil
}

// documentedDifferences are the differences in what reaches the API that
// docs/migrating-from-segment-v3.md lists ("Wire differences"). The test
// fails on any other difference, and when one of these stops happening.
var documentedDifferences = []string{
	// Product.SKU is sent as "sku", the spec's name; v3's field tag said "sky".
	"track/Order Completed/user-1.properties.products[0].sku: compat only",
	"track/Order Completed/user-1.properties.products[0].sky: v3 only",
}

// TestSameEventsAsV3 runs the same program with v3 and with the
// compatibility package against loopback recorders, and compares the
// events field by field, the Enqueue errors and the callbacks.
func TestSameEventsAsV3(t *testing.T) {
	v3rec, v3res := record(t, v3prog.Run)
	compatRec, compatRes := record(t, compatprog.Run)
	// Before the events are normalised: the library is in the batch-level
	// context only, as in v3.
	for _, body := range compatRec.bodies {
		ctx := body["context"].(map[string]interface{})
		assert.Equal(t, map[string]interface{}{"name": "relaykit-analytics-go", "version": native.Version}, ctx["library"])
		for _, e := range body["batch"].([]interface{}) {
			own, _ := e.(map[string]interface{})["context"].(map[string]interface{})
			assert.NotContains(t, own, "library", "events carry no library of their own")
		}
	}

	v3events, compatEvents := v3rec.events(t), compatRec.events(t)
	require.Len(t, v3events, 10)
	labels := map[string]bool{}
	for l := range v3events {
		labels[l] = true
	}
	for l := range compatEvents {
		labels[l] = true
	}
	var got []string
	for l := range labels {
		got = append(got, diff(l, v3events[l], compatEvents[l])...)
	}
	sort.Strings(got)
	want := append([]string(nil), documentedDifferences...)
	sort.Strings(want)
	assert.Equal(t, want, got, "differences between v3 and the compatibility package")

	assert.Equal(t, v3res.EnqueueErrors, compatRes.EnqueueErrors, "Enqueue errors")
	assert.Len(t, v3res.EnqueueErrors, 9)
	assert.Equal(t, v3res.Successes, compatRes.Successes, "Callback.Success calls by type")
	assert.Equal(t, map[string]int{"track": 3, "identify": 2, "group": 1, "page": 2, "screen": 1, "alias": 1}, compatRes.Successes)
	assert.Empty(t, v3res.Failures)
	assert.Empty(t, compatRes.Failures)
	assert.NoError(t, v3res.CloseError)
	assert.NoError(t, compatRes.CloseError)

	// The batch object around the events: both send the batch-level context
	// (the library and DefaultContext) and sentAt; v3 added a batch
	// messageId, this client adds the write key (as the engine always does).
	assert.Equal(t, []string{"batch", "context", "messageId", "sentAt"}, topLevelKeys(v3rec.bodies))
	assert.Equal(t, []string{"batch", "context", "sentAt", "writeKey"}, topLevelKeys(compatRec.bodies))

	// Request headers: the same authentication and content type; the
	// User-Agent names the client that sent the request.
	for i, h := range compatRec.heads {
		assert.Equal(t, v3rec.heads[0].Get("Authorization"), h.Get("Authorization"), "request %d", i)
		assert.Equal(t, "application/json", h.Get("Content-Type"))
		assert.True(t, strings.HasPrefix(h.Get("User-Agent"), "relaykit-analytics-go"), h.Get("User-Agent"))
	}
	assert.Equal(t, "analytics-go (version: 3.0.0)", v3rec.heads[0].Get("User-Agent"))
}
