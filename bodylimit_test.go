package analytics

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// small is a track event of about 150 bytes of JSON.
func small(id string) Track {
	return Track{MessageID: id, UserID: "u1", Event: "Tested", Properties: Properties{"p": strings.Repeat("x", 8)}}
}

// limitServer answers 413 to a body (as decoded) over its limit, which a
// test may lower mid-run, and 200 otherwise, each after 5 ms.
type limitServer struct {
	mu       sync.Mutex
	limit    int
	refused  int // requests answered 413
	accepted int // requests answered 200
	events   int // events accepted
}

func (s *limitServer) answer(_ int, r seen) reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(r.body) > s.limit {
		s.refused++
		return reply{status: 413, body: `{"message":"Request size exceeds max limit"}`, hold: 5 * time.Millisecond}
	}
	s.accepted++
	s.events += len(r.ids)
	return reply{status: 200, hold: 5 * time.Millisecond}
}

func (s *limitServer) counts() (refused, accepted, events int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused, s.accepted, s.events
}

func (s *limitServer) lower(limit int) {
	s.mu.Lock()
	s.limit = limit
	s.mu.Unlock()
}

// tell gives l the server's body limit, as a client configured with it
// would have it from the start: batches close within it and no ramp runs.
func tell(l *learnedLimits, limit int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maxBytes = min(l.maxBytes, limit-l.frame)
	l.acceptedSize.Store(int64(limit))
	l.acceptedBody.Store(int64(limit))
	l.applyLocked()
}

// tiny is the smallest track event: about 180 bytes of JSON as encoded,
// most of it the library's context and the timestamp.
func tiny(id string) Track { return Track{MessageID: id, UserID: "u", Event: "T"} }

// limitRun is what the server saw of a run against its body limit.
type limitRun struct {
	refused, accepted int           // requests answered 413, 2xx
	took              time.Duration // from the first Track to Close's return, in the bubble's time
}

// withRamp is an option for newTestClient: the client starts as New
// starts it, with R67's ramp. Without it, newTestClient gives New rampOff,
// for tests of other rules.
type withRamp struct{}

func (withRamp) apply(*settings) {}

// rampOff ends R67's ramp before the client starts: batches close at
// FlushAt and the byte budget from the first request. R69 holds as ever:
// a body larger than any accepted goes alone.
type rampOff struct{}

func (rampOff) apply(s *settings) { s.rampOff = true }

// sendAgainstLimit tracks n events made by ev into a client with the
// default consumers against a server whose body limit is limit, flushes
// and closes; a told client is given the limit before the first event, as
// a client configured with it would be. Every event must be delivered
// once.
func sendAgainstLimit(t *testing.T, limit, n int, ev func(string) Track, told bool) limitRun {
	t.Helper()
	srv := &limitServer{limit: limit}
	api := newFakeAPI(srv.answer)
	cb := &callbacks{}
	c := newTestClient(t, api, cb, withRamp{})
	defer stop(c)
	if told {
		tell(c.limits, limit)
	}
	// The bubble's clock starts at a round second and moves in round
	// steps, so its timestamps are short; a real clock's carry nine
	// fractional digits, as this one's do from here on.
	time.Sleep(time.Nanosecond)
	start := time.Now()
	for i := range n {
		require.NoError(t, c.Track(ev(fmt.Sprintf("e%05d", i))))
	}
	require.NoError(t, flush(t, c, time.Minute))
	require.NoError(t, closeClient(t, c, time.Second))
	took := time.Since(start)
	assert.Len(t, cb.delivered(), n, "delivered")
	assert.Empty(t, cb.errors())
	for id, k := range cb.dispositions() {
		require.Equal(t, 1, k, "outcomes of %s", id)
	}
	refused, accepted, _ := srv.counts()
	return limitRun{refused: refused, accepted: accepted, took: took}
}

// R67, R69: whatever the server's body limit, from a few events' size up
// to the default, a client with the default eight consumers is refused at
// most twice (three times below twice the ramp's first size's share, see
// searchRefusals) and sends at most 1.25 times (+ 2) the requests of a
// client told the limit before its first event. Events of two sizes, the
// smallest track event and a small one.
func TestBodyLimitOfAnySizeIsLearned(t *testing.T) {
	const n = 2000
	t.Logf("| event | limit | refusals | accepted requests | told requests | bound | time | told time |")
	for _, kind := range []struct {
		name string
		ev   func(string) Track
	}{{"tiny", tiny}, {"small", small}} {
		enc, err := encodeTrack(t, kind.ev("e00000"))
		require.NoError(t, err)
		for _, limit := range []int{1_000, 3_000, 6_000, 12_000, 40_000, 100_000, 500_000} {
			t.Run(fmt.Sprint(kind.name, limit), func(t *testing.T) {
				var told, learned limitRun
				synctest.Test(t, func(t *testing.T) {
					told = sendAgainstLimit(t, limit, n, kind.ev, true)
					require.Zero(t, told.refused, "a told client is never refused")
				})
				synctest.Test(t, func(t *testing.T) {
					learned = sendAgainstLimit(t, limit, n, kind.ev, false)
				})
				bound := int(math.Floor(1.25*float64(told.accepted))) + 2
				t.Logf("| %d B | %d | %d | %d | %d | %d | %v | %v |", len(enc), limit, learned.refused, learned.accepted, told.accepted, bound, learned.took, told.took)
				most := 2
				if limit < 3_000 {
					most = searchRefusals
				}
				assert.LessOrEqual(t, learned.refused, most, "requests answered 413")
				assert.LessOrEqual(t, learned.accepted, bound, "accepted requests, against %d told", told.accepted)
			})
		}
	}
}

// R67: a limit that goes down mid-run is learned again. The server takes
// 12 000-byte bodies, then, once it has accepted 1 000 events, only 3 000:
// the client is refused at most twice under the first limit and
// searchRefusals times under the second, every event is delivered once,
// and batches close within the new limit at the end.
func TestBodyLimitThatGoesDownIsLearnedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &limitServer{limit: 12_000}
		var before int // refusals under the first limit
		api := newFakeAPI(func(n int, r seen) reply {
			rep := srv.answer(n, r)
			if refused, _, events := srv.counts(); events >= 1000 && srv.limit == 12_000 {
				before = refused
				srv.lower(3_000)
			}
			return rep
		})
		cb := &callbacks{}
		c := newTestClient(t, api, cb, withRamp{})
		defer stop(c)
		for i := range 2000 {
			require.NoError(t, c.Track(small(fmt.Sprintf("e%05d", i))))
			if i%100 == 99 {
				time.Sleep(20 * time.Millisecond) // a steady producer: the limit goes down while events keep coming
			}
		}
		require.NoError(t, flush(t, c, time.Minute))
		refused, accepted, _ := srv.counts()
		t.Logf("refusals %d under 12 000 bytes, %d under 3 000; %d accepted requests; limit now %d", before, refused-before, accepted, c.Stats().BodyLimit)
		assert.LessOrEqual(t, before, 2, "refusals under the first limit")
		assert.LessOrEqual(t, refused-before, searchRefusals, "refusals once the limit went down")
		reqs := api.requests()
		last := reqs[len(reqs)-10:]
		for _, r := range last {
			assert.LessOrEqual(t, len(r.body), 3_000, "a body sent once the limit was learned again")
		}
		assert.Greater(t, float64(c.Stats().BodyLimit)*probeStep, 3_000.0, "batches close within probeStep of the new limit")
		for id, n := range cb.dispositions() {
			require.Equal(t, 1, n, id)
		}
		assert.Len(t, cb.delivered(), 2000)
		require.NoError(t, closeClient(t, c, time.Second))
	})
}

// R67, R69: a paced producer (a few events at a time, batches closed by
// FlushInterval, taken by several consumers side by side) against a
// 3 000-byte limit is refused at most twice: a body larger than any the
// server accepted goes alone however small it is, so no two are refused
// at once. Every event is delivered once; after the second refusal no
// body is over the limit.
func TestPacedProducerLearnsASmallLimit(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &limitServer{limit: 3_000}
				api := newFakeAPI(srv.answer)
				cb := &callbacks{}
				c := newTestClient(t, api, cb, WithFlushInterval(20*time.Millisecond), withRamp{})
				defer stop(c)
				rng := rand.New(rand.NewPCG(seed, 67))
				const n = 1500
				for i := 0; i < n; {
					for k := 1 + rng.IntN(8); k > 0 && i < n; k-- {
						require.NoError(t, c.Track(small(fmt.Sprintf("e%05d", i))))
						i++
					}
					time.Sleep(time.Duration(2+rng.IntN(10)) * time.Millisecond)
				}
				require.NoError(t, flush(t, c, time.Minute))
				refused, accepted, _ := srv.counts()
				t.Logf("seed %d: %d refusals, %d accepted requests, limit now %d", seed, refused, accepted, c.Stats().BodyLimit)
				assert.LessOrEqual(t, refused, 2, "requests answered 413")
				assert.Positive(t, c.Stats().BodyLimit, "a limit was learned")
				for id, k := range cb.dispositions() {
					require.Equal(t, 1, k, "outcomes of %s", id)
				}
				assert.Len(t, cb.delivered(), n)
				require.NoError(t, closeClient(t, c, time.Second))
			})
		})
	}
}
