package analytics

import (
	"fmt"
	"math"
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

// sendAgainstLimit tracks n small events into a client with the default
// consumers against a server whose body limit is limit, flushes and
// closes; a told client is given the limit before the first event, as a
// client configured with it would be. It returns what the server saw.
func sendAgainstLimit(t *testing.T, limit, n int, told bool) (refused, accepted int) {
	t.Helper()
	srv := &limitServer{limit: limit}
	api := newFakeAPI(srv.answer)
	cb := &callbacks{}
	c := newTestClient(t, api, cb)
	defer stop(c)
	if told {
		c.q.setBudget(min(c.q.maxBytes, limit-frameSize("wk", nil)), c.q.flushAt)
	}
	for i := range n {
		require.NoError(t, c.Track(small(fmt.Sprintf("e%05d", i))))
	}
	require.NoError(t, flush(t, c, time.Minute))
	require.NoError(t, closeClient(t, c, time.Second))
	assert.Len(t, cb.delivered(), n, "delivered")
	assert.Empty(t, cb.errors())
	refused, accepted, _ = srv.counts()
	return refused, accepted
}

// R67, R69: whatever the server's body limit, from a few events' size up
// to the default, a client with the default eight consumers is refused at
// most searchRefusals (3) times and sends at most 1.25 times (+ 2) the
// requests of a client told the limit before its first event.
func TestBodyLimitOfAnySizeIsLearned(t *testing.T) {
	const n = 2000
	ev, err := encodeTrack(t, small("e00000"))
	require.NoError(t, err)
	t.Logf("event %d bytes as encoded", len(ev))
	t.Logf("| limit | refusals | accepted requests | told requests | bound |")
	for _, limit := range []int{1_000, 3_000, 6_000, 12_000, 40_000, 100_000, 500_000} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			var toldAccepted, refused, accepted int
			synctest.Test(t, func(t *testing.T) {
				var toldRefused int
				toldRefused, toldAccepted = sendAgainstLimit(t, limit, n, true)
				require.Zero(t, toldRefused, "a told client is never refused")
			})
			synctest.Test(t, func(t *testing.T) {
				refused, accepted = sendAgainstLimit(t, limit, n, false)
			})
			bound := int(math.Floor(1.25*float64(toldAccepted))) + 2
			t.Logf("| %d | %d | %d | %d | %d |", limit, refused, accepted, toldAccepted, bound)
			assert.LessOrEqual(t, refused, searchRefusals, "requests answered 413")
			assert.LessOrEqual(t, accepted, bound, "accepted requests, against %d told", toldAccepted)
		})
	}
}

// R67: a limit that goes down mid-run is learned again. The server takes
// 12 000-byte bodies, then, once it has accepted 1 000 events, only 3 000:
// the client is refused at most searchRefusals times for each limit, every
// event is delivered once, and batches close within the new limit at the
// end.
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
		c := newTestClient(t, api, cb)
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
		assert.LessOrEqual(t, before, searchRefusals, "refusals under the first limit")
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
