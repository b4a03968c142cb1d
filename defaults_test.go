package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wireEvents returns the events of every request as decoded JSON objects.
func wireEvents(t *testing.T, api *fakeAPI) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range api.requests() {
		batch, _ := r.decoded["batch"].([]any)
		for _, e := range batch {
			out = append(out, e.(map[string]any))
		}
	}
	return out
}

// Default context and properties reach the wire merged under the event's
// own keys; the options' maps are copied at New.
func TestDefaultContextAndPropertiesOnTheWire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		ctx := map[string]any{"app": map[string]any{"name": "shop", "version": "1.2"}, "ip": "10.0.0.1"}
		props := map[string]any{"env": "prod", "plan": "free"}
		c := newTestClient(t, api, nil, WithDefaultContext(ctx), WithDefaultProperties(props))
		ctx["ip"], props["env"] = "changed after New", "changed after New"

		require.NoError(t, c.Track(Track{MessageID: "t1", UserID: "u", Event: "E", Properties: Properties{"plan": "pro", "seats": 2}}))
		require.NoError(t, c.Track(Track{MessageID: "t2", UserID: "u", Event: "E", Context: ContextFields{"ip": nil, "app": map[string]any{"name": "own"}}}))
		require.NoError(t, c.Identify(Identify{MessageID: "i1", UserID: "u", Traits: Traits{"name": "Ada"}}))
		require.NoError(t, c.Alias(Alias{MessageID: "a1", UserID: "u", PreviousID: "p"}))
		require.NoError(t, closeClient(t, c, time.Second))

		ev := wireEvents(t, api)
		require.Len(t, ev, 4)
		library := map[string]any{"name": LibraryName, "version": Version}
		// The event's own "plan" wins; the default "env" is added.
		assert.Equal(t, map[string]any{"plan": "pro", "seats": float64(2), "env": "prod"}, ev[0]["properties"])
		assert.Equal(t, map[string]any{"app": map[string]any{"name": "shop", "version": "1.2"}, "ip": "10.0.0.1",
			"library": library}, ev[0]["context"])
		// Top-level merge: the event's "app" replaces the default one whole,
		// and its explicit nil "ip" wins too.
		assert.Equal(t, map[string]any{"app": map[string]any{"name": "own"}, "ip": nil, "library": library}, ev[1]["context"])
		assert.Equal(t, map[string]any{"env": "prod", "plan": "free"}, ev[1]["properties"], "properties from the defaults alone")
		// Traits are not properties; every event gets the context.
		assert.Equal(t, map[string]any{"name": "Ada"}, ev[2]["traits"])
		assert.Equal(t, "10.0.0.1", ev[2]["context"].(map[string]any)["ip"])
		assert.NotContains(t, ev[3], "properties")
		assert.Equal(t, "10.0.0.1", ev[3]["context"].(map[string]any)["ip"])
	})
}

// A "library" default replaces the client's stamp; an event's own wins
// over both.
func TestDefaultContextLibrary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		c := newTestClient(t, api, nil, WithDefaultContext(map[string]any{"library": "wrapper"}))
		require.NoError(t, c.Track(Track{UserID: "u", Event: "E"}))
		require.NoError(t, c.Track(Track{UserID: "u", Event: "E", Context: ContextFields{"library": "own"}}))
		require.NoError(t, closeClient(t, c, time.Second))
		ev := wireEvents(t, api)
		require.Len(t, ev, 2)
		assert.Equal(t, map[string]any{"library": "wrapper"}, ev[0]["context"])
		assert.Equal(t, map[string]any{"library": "own"}, ev[1]["context"])
	})
}

// Callbacks get the merged view: the maps as they were sent (without the
// client's library stamp, as always), copies that share nothing with the
// defaults' top level.
func TestCallbacksGetTheMergedDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithDefaultContext(map[string]any{"ip": "10.0.0.1"}),
			WithDefaultProperties(map[string]any{"env": "prod", "plan": "free"}))
		props := Properties{"plan": "pro"}
		require.NoError(t, c.Track(Track{MessageID: "t1", UserID: "u", Event: "E", Properties: props}))
		require.NoError(t, c.Page(Page{MessageID: "p1", UserID: "u"}))
		require.NoError(t, c.Identify(Identify{MessageID: "i1", UserID: "u"}))
		require.NoError(t, closeClient(t, c, time.Second))

		require.Len(t, cb.successes, 1)
		got := cb.successes[0]
		require.Len(t, got, 3)
		tr := got[0].(Track)
		assert.Equal(t, Properties{"plan": "pro", "env": "prod"}, tr.Properties)
		assert.Equal(t, ContextFields{"ip": "10.0.0.1"}, tr.Context)
		assert.Equal(t, Properties{"plan": "pro"}, props, "the caller's map is not changed")
		pg := got[1].(Page)
		assert.Equal(t, Properties{"env": "prod", "plan": "free"}, pg.Properties)
		if pg.Properties != nil {
			pg.Properties["env"] = "changed by a callback"
		}
		id := got[2].(Identify)
		assert.Nil(t, id.Traits)
		assert.Equal(t, ContextFields{"ip": "10.0.0.1"}, id.Context)
		// The defaults are not shared with callbacks: a later event still
		// gets the original values.
		assert.Equal(t, "prod", c.defaults.properties["env"])
	})
}

func TestDefaultsThatAreNotJSONFailNew(t *testing.T) {
	_, err := New("wk", WithDefaultContext(map[string]any{"f": func() {}}))
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "DefaultContext", ce.Field)
	_, err = New("wk", WithDefaultProperties(map[string]any{"c": make(chan int)}))
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "DefaultProperties", ce.Field)
	c, err := New("wk", WithDefaultContext(nil), WithDefaultProperties(map[string]any{}))
	require.NoError(t, err)
	auditLater(t, c, nil)
	assert.Nil(t, c.defaults, "empty defaults cost nothing")
	require.NoError(t, c.Close(context.Background()))
}

// With defaults and no callbacks the enqueue path still allocates nothing:
// the defaults are merged by the encoder, not into a new map.
func TestDefaultsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	c, err := New("wk", WithEndpoint("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: blockedTransport{}}),
		WithConsumers(1), WithQueueCapacity(5000),
		WithDefaultContext(map[string]any{"app": map[string]any{"name": "shop"}, "ip": "10.0.0.1"}),
		WithDefaultProperties(map[string]any{"env": "prod"}))
	require.NoError(t, err)
	// No accounting audit: discardQueued drops the queued events on purpose.
	allocs := testing.AllocsPerRun(1000, func() {
		_ = c.Track(Track{UserID: "u1", Event: "Played", Properties: Properties{"plan": "pro", "n": 7}})
		_ = c.Identify(Identify{UserID: "u1", Traits: Traits{"name": "Ada"}})
		c.q.discardQueued()
	})
	assert.Zero(t, allocs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_ = c.Close(ctx)
}

// The defaults are encoded once, at New, and spliced into each event: the
// result must be what a plain encoding/json merge gives (the event's own
// top-level keys win, whatever their value; nested maps are not merged; a
// "library" entry of either side replaces the client's), with no key
// twice. Many shapes: nil, empty and full maps on both sides, nested maps,
// clashes of every kind, all message types.
func TestDefaultsSplicedMatchPlainMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "app", "os", "library", "ip", "k\"q", "ü", ""}
	var value func(depth int) any
	value = func(depth int) any {
		switch rng.IntN(8) {
		case 0:
			return nil
		case 1:
			return rng.IntN(1000) - 500
		case 2:
			return float64(rng.IntN(1000)) / 8
		case 3:
			return "s" + strconv.Itoa(rng.IntN(10))
		case 4:
			return rng.IntN(2) == 0
		case 5:
			return []any{rng.IntN(3), "x", nil}
		default:
			if depth > 2 {
				return "leaf"
			}
			return randomMap(rng, keys, func() any { return value(depth + 1) })
		}
	}
	shape := func() map[string]any {
		switch rng.IntN(5) {
		case 0:
			return nil
		case 1:
			return map[string]any{}
		}
		return randomMap(rng, keys, func() any { return value(0) })
	}
	for round := 0; round < 300; round++ {
		defCtx, defProps := shape(), shape()
		c, err := New("wk", WithEndpoint("http://127.0.0.1:1"), WithDefaultContext(defCtx), WithDefaultProperties(defProps))
		require.NoError(t, err)
		d := c.defaults
		require.NoError(t, closeClient(t, c, time.Second))
		ownCtx, ownProps, integ := shape(), shape(), shape()
		msgs := []Message{
			Track{MessageID: "m", UserID: "u", Event: "E", Properties: ownProps, Context: ownCtx, Integrations: integ},
			Identify{MessageID: "m", UserID: "u", Traits: ownProps, Context: ownCtx},
			Group{MessageID: "m", UserID: "u", GroupID: "g", Traits: ownProps, Context: ownCtx},
			Page{MessageID: "m", UserID: "u", Properties: ownProps, Context: ownCtx, Integrations: integ},
			Screen{MessageID: "m", UserID: "u", Properties: ownProps, Context: ownCtx},
			Alias{MessageID: "m", UserID: "u", PreviousID: "p", Context: ownCtx, Integrations: integ},
		}
		for _, m := range msgs {
			sc := getScratch()
			sc.use(d, false)
			_, err := prepareMessage(sc, m, false)
			got := append([]byte(nil), sc.Enc.Bytes()...)
			putScratch(sc)
			require.NoError(t, err)
			require.NoError(t, noDuplicateKeys(got), "%s", got)

			// The reference: merge with maps, encode with encoding/json.
			want := map[string]any{}
			require.NoError(t, json.Unmarshal(got, &want))
			free := map[string]string{"track": "properties", "page": "properties", "screen": "properties",
				"identify": "traits", "group": "traits"}[m.Type()]
			ownFree := map[string]any(nil)
			switch v := m.(type) {
			case Track:
				ownFree = v.Properties
			case Identify:
				ownFree = v.Traits
			case Group:
				ownFree = v.Traits
			case Page:
				ownFree = v.Properties
			case Screen:
				ownFree = v.Properties
			}
			if free != "" {
				delete(want, free)
				var under map[string]any
				if free == "properties" {
					under = defProps
				}
				if merged := plainMerge(ownFree, under); merged != nil {
					want[free] = merged
				}
			}
			ctx := plainMerge(ownCtx, defCtx)
			if ctx == nil {
				ctx = map[string]any{}
			}
			if _, ok := ctx["library"]; !ok {
				ctx["library"] = map[string]any{"name": LibraryName, "version": Version}
			}
			want["context"] = ctx
			wantJSON, err := json.Marshal(want)
			require.NoError(t, err)
			var a, b any
			require.NoError(t, json.Unmarshal(got, &a))
			require.NoError(t, json.Unmarshal(wantJSON, &b))
			require.Equal(t, b, a, "round %d, %s: defaults %v / %v", round, m.Type(), defCtx, defProps)
		}
	}
}

func randomMap(rng *rand.Rand, keys []string, value func() any) map[string]any {
	m := map[string]any{}
	for i, n := 0, 1+rng.IntN(5); i < n; i++ {
		m[keys[rng.IntN(len(keys))]] = value()
	}
	return m
}

// plainMerge is the documented merge with plain maps: under's entries, then
// own's over them; nil when both are nil and under is empty.
func plainMerge(own, under map[string]any) map[string]any {
	if own == nil && len(under) == 0 {
		return nil
	}
	out := map[string]any{}
	for k, v := range under {
		out[k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}

// noDuplicateKeys reports a JSON object, at any depth, with a key twice.
func noDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				if seen[k.(string)] {
					return fmt.Errorf("key %q twice", k)
				}
				seen[k.(string)] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	return walk()
}
