package analytics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// topLevel returns the keys of a JSON object in order, duplicates kept,
// with their raw values (encoding/json's maps would hide a duplicate).
func topLevel(t *testing.T, obj []byte) (keys []string, vals []json.RawMessage) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(obj))
	tok, err := d.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	for d.More() {
		k, err := d.Token()
		require.NoError(t, err)
		var v json.RawMessage
		require.NoError(t, d.Decode(&v))
		keys = append(keys, k.(string))
		vals = append(vals, v)
	}
	return keys, vals
}

// eventSentAts returns, for each event of a body, its top-level sentAt
// values (none, one, or duplicates).
func eventSentAts(t *testing.T, body []byte) [][]string {
	t.Helper()
	require.True(t, json.Valid(body), "body is not valid JSON: %.200s", body)
	var env struct {
		Batch []json.RawMessage `json:"batch"`
	}
	require.NoError(t, json.Unmarshal(body, &env))
	out := make([][]string, len(env.Batch))
	for i, ev := range env.Batch {
		keys, vals := topLevel(t, ev)
		out[i] = []string{}
		for j, k := range keys {
			if k == "sentAt" {
				var s string
				require.NoError(t, json.Unmarshal(vals[j], &s))
				out[i] = append(out[i], s)
			}
		}
	}
	return out
}

// R4, R59: with the option every event carries exactly one sentAt, equal
// to the body's sentAt of that attempt, new on the retry; without it no
// event has one. The events are otherwise the bytes of the first attempt
// (R3). Plain and gzip bodies alike.
func TestEventSentAtPerAttempt(t *testing.T) {
	for _, gz := range []bool{false, true} {
		for _, on := range []bool{false, true} {
			t.Run(fmt.Sprintf("gzip=%t/eventSentAt=%t", gz, on), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					api := newFakeAPI(sequence(reply{status: 500}, reply{status: 200}))
					cb := &callbacks{}
					c := newTestClient(t, api, cb, WithFlushAt(3), WithGzip(gz), WithEventSentAt(on))
					assert.Equal(t, on, c.Config().EventSentAt)
					assert.Contains(t, c.Config().String(), fmt.Sprintf("eventSentAt=%t", on))
					time.Sleep(123456789 * time.Nanosecond) // a sentAt with a fraction
					for i := 0; i < 3; i++ {
						mustTrack(t, c, fmt.Sprintf("m%d", i))
					}
					require.NoError(t, flush(t, c, time.Minute))
					reqs := api.requests()
					require.Len(t, reqs, 2)
					assert.NotEqual(t, reqs[0].sentAt, reqs[1].sentAt, "sentAt is per attempt (R4)")
					var batches [2][]byte
					for i, r := range reqs {
						if gz {
							assert.Equal(t, "gzip", r.header.Get("Content-Encoding"))
							assert.NotEqual(t, r.raw, r.body, "the wire body is compressed")
						}
						at, err := time.Parse(time.RFC3339Nano, r.sentAt)
						require.NoError(t, err)
						assert.True(t, at.Equal(r.at), "sentAt %s is the attempt's instant %s", r.sentAt, r.at)
						for j, s := range eventSentAts(t, r.body) {
							if on {
								assert.Equal(t, []string{r.sentAt}, s, "attempt %d event %d", i+1, j)
							} else {
								assert.Empty(t, s, "attempt %d event %d", i+1, j)
							}
						}
						var env struct {
							Batch json.RawMessage `json:"batch"`
						}
						require.NoError(t, json.Unmarshal(r.body, &env))
						batches[i] = bytes.ReplaceAll(env.Batch, []byte(`,"sentAt":"`+r.sentAt+`"}`), []byte("}"))
					}
					assert.Equal(t, string(batches[0]), string(batches[1]), "the events are unchanged but for sentAt (R3)")
					assert.Equal(t, on, strings.Count(string(reqs[0].body), `"sentAt"`) == 4)
					assert.Len(t, cb.delivered(), 3)
					require.NoError(t, closeClient(t, c, time.Second))
				})
			})
		}
	}
}

// R59: the spliced sentAt is never a second top-level sentAt, whatever the
// type and whatever keys the caller's maps hold.
func TestEventSentAtNeverDuplicates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		c := newTestClient(t, api, nil, WithFlushAt(6), WithEventSentAt(true))
		m := map[string]any{"sentAt": "caller", "nested": map[string]any{"sentAt": 1}}
		msgs := []Message{
			Track{UserID: "u", Event: "e", Properties: m, Context: m, Integrations: m},
			Identify{UserID: "u", Traits: m, Context: m, Integrations: m},
			Group{UserID: "u", GroupID: "g", Traits: m, Context: m, Integrations: m},
			Page{UserID: "u", Name: "sentAt", Properties: m, Context: m},
			Screen{AnonymousID: "a", Category: "sentAt", Properties: m},
			Alias{UserID: "u", PreviousID: "p", Context: m, Integrations: m},
		}
		for _, msg := range msgs {
			require.NoError(t, c.Enqueue(msg))
		}
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.Len(t, reqs, 1)
		sentAts := eventSentAts(t, reqs[0].body)
		require.Len(t, sentAts, 6)
		for i, s := range sentAts {
			assert.Equal(t, []string{reqs[0].sentAt}, s, "event %d (%s)", i, msgs[i].Type())
		}
		var env struct {
			Batch []map[string]any `json:"batch"`
		}
		require.NoError(t, json.Unmarshal(reqs[0].body, &env))
		assert.Equal(t, "caller", env.Batch[0]["properties"].(map[string]any)["sentAt"], "the caller's own key is kept where it was")
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R45, R59: the byte budget counts the spliced sentAt, so a body filled
// with many small events stays within MaxBatchBytes.
func TestEventSentAtWithinBatchLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(10_000), WithEventSentAt(true))
		time.Sleep(123456789 * time.Nanosecond) // a sentAt with a fraction
		const n = 6_000
		for i := 0; i < n; i++ {
			require.NoError(t, c.Track(Track{MessageID: fmt.Sprintf("m%05d", i), UserID: "u", Event: "e"}))
		}
		require.NoError(t, flush(t, c, time.Minute))
		reqs := api.requests()
		require.GreaterOrEqual(t, len(reqs), 2)
		largest := 0
		for _, r := range reqs {
			assert.LessOrEqual(t, len(r.body), MaxBatchBytes)
			largest = max(largest, len(r.body))
			for _, s := range eventSentAts(t, r.body) {
				assert.Equal(t, []string{r.sentAt}, s)
			}
		}
		// The first batch was closed by bytes, near the limit: the check
		// above would fail if the spliced bytes were not budgeted.
		assert.Greater(t, largest, batchEventBytes*9/10)
		assert.Len(t, cb.delivered(), n)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}
