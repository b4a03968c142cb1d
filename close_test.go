package analytics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// R39: the usual SIGTERM pattern derives Close's context from the one that
// signalled shutdown, which is already done. Close still sends what is
// queued, once, and returns within 0.5 s.
func TestCloseWithDoneContextStillSends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(nil)
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(100), WithFlushInterval(time.Minute))
		for i := range 3 {
			mustTrack(t, c, fmt.Sprintf("e%d", i))
		}
		signalled, stop := context.WithCancel(context.Background())
		stop() // SIGTERM arrived
		ctx, cancel := context.WithTimeout(signalled, 10*time.Second)
		defer cancel()
		start := time.Now()
		err := c.Close(ctx)
		assert.LessOrEqual(t, time.Since(start), 500*time.Millisecond)
		require.NoError(t, err)
		reqs := api.requests()
		require.Len(t, reqs, 1)
		assert.Equal(t, []string{"e0", "e1", "e2"}, reqs[0].ids)
		assert.ElementsMatch(t, []string{"e0", "e1", "e2"}, cb.delivered())
	})
}

// R39: when the one short attempt cannot finish, the events are handed back
// within 0.5 s and the error says why and what to do.
func TestCloseWithDoneContextExplains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(sequence(reply{hold: time.Hour}))
		cb := &callbacks{}
		c := newTestClient(t, api, cb, WithFlushAt(2), WithHTTPTimeout(time.Hour))
		mustTrack(t, c, "m1")
		mustTrack(t, c, "m2")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		err := c.Close(ctx)
		assert.LessOrEqual(t, time.Since(start), 500*time.Millisecond)
		assert.ErrorIs(t, err, ErrShutdownInterrupted)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorContains(t, err, "2 event(s) handed back")
		assert.ErrorContains(t, err, "already done before Close started")
		assert.ErrorContains(t, err, "context.Background()")
		assert.Len(t, api.requests(), 1, "the queued batch got its one attempt")
		assert.Equal(t, 2, cb.failedWith(ErrShutdownInterrupted))
	})
}

// R39, durable mode: a Close with a done context keeps what it could not
// send on disk, and the next client sends it.
func TestCloseWithDoneContextKeepsOnDisk(t *testing.T) {
	dir := t.TempDir()
	c1 := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil, WithDiskBuffer(dir), WithFlushAt(2))
	mustTrack(t, c1, "d1")
	mustTrack(t, c1, "d2")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err := c1.Close(ctx)
	// Real time here (file I/O): the 0.5 s bound plus scheduling slack.
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.ErrorIs(t, err, ErrShutdownInterrupted)
	assert.ErrorContains(t, err, "2 event(s) handed back (kept in the disk buffer)")

	api := newFakeAPI(nil)
	c2 := newTestClient(t, api, nil, WithDiskBuffer(dir))
	require.NoError(t, closeClient(t, c2, 5*time.Second))
	if got := sentIDs(api); !slices.Equal(got, []string{"d1", "d2"}) {
		t.Fatalf("next client sent %v, want [d1 d2]", got)
	}
}

// R39: a Close whose context has no deadline is bounded by CloseTimeout, so
// Close(context.Background()) against a dead endpoint ends; a deadline of
// the caller's own, shorter or longer, rules alone.
func TestCloseTimeoutBoundsClose(t *testing.T) {
	cases := []struct {
		name    string
		opts    []Option
		ctx     time.Duration // 0: context.Background(); < 0: cancelled after -ctx, no deadline
		returns time.Duration // when Close is interrupted
	}{
		{"Background, default", nil, 0, DefaultCloseTimeout},
		{"Background, WithCloseTimeout(5s)", []Option{WithCloseTimeout(5 * time.Second)}, 0, 5 * time.Second},
		{"caller's deadline shorter", nil, 2 * time.Second, 2 * time.Second},
		{"caller's deadline longer", []Option{WithCloseTimeout(5 * time.Second)}, time.Minute, time.Minute},
		{"CloseTimeout 0: only the context", []Option{WithCloseTimeout(0)}, 45 * time.Second, 45 * time.Second},
		{"cancel-only context, cancelled first", nil, -3 * time.Second, 3 * time.Second},
		{"cancel-only context, never cancelled", []Option{WithCloseTimeout(5 * time.Second)}, -time.Hour, 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// A dead endpoint: every attempt times out, and backoff
				// would go on for minutes.
				api := newFakeAPI(sequence(reply{err: errors.New("connection refused")}))
				cb := &callbacks{}
				c := newTestClient(t, api, cb, append([]Option{WithFlushAt(1)}, tc.opts...)...)
				mustTrack(t, c, "m1")
				ctx := context.Background()
				var cancel context.CancelFunc
				switch {
				case tc.ctx > 0:
					ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				case tc.ctx < 0:
					ctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(-tc.ctx, cancel)
				}
				if cancel != nil {
					defer cancel()
				}
				start := time.Now()
				err := c.Close(ctx)
				within(t, "Close", time.Since(start), tc.returns, tc.returns+500*time.Millisecond)
				assert.ErrorIs(t, err, ErrShutdownInterrupted)
				assert.ErrorContains(t, err, "1 event(s) handed back")
				if tc.ctx == -3*time.Second {
					assert.ErrorIs(t, err, context.Canceled)
				} else {
					assert.ErrorIs(t, err, context.DeadlineExceeded)
				}
				if tc.ctx <= 0 && tc.returns != -tc.ctx {
					assert.ErrorContains(t, err, "CloseTimeout")
				} else {
					assert.NotContains(t, err.Error(), "CloseTimeout")
				}
				assert.Equal(t, 1, cb.failedWith(ErrShutdownInterrupted))
				n := len(api.requests())
				time.Sleep(time.Hour)
				assert.Len(t, api.requests(), n, "no request after Close")
			})
		})
	}
}

// WithCloseTimeout's range is checked by New.
func TestCloseTimeoutValidated(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, MaxCloseTimeout + 1} {
		_, err := New("wk", WithCloseTimeout(d))
		var ce *ConfigError
		if assert.ErrorAs(t, err, &ce, d) {
			assert.Equal(t, "CloseTimeout", ce.Field)
		}
	}
}

// A callback that does not return within Close's deadline and grace: Close
// returns, and its error names the callback and how many events it was
// still reporting (the handed-back count alone says 0 for them).
func TestCloseErrorNamesBlockedCallback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		want   string
	}{
		{"OnSuccess", 200, "OnSuccess did not return (2 event(s) still being reported)"},
		{"OnError", 400, "OnError did not return (1 event(s) still being reported)"}, // a 400 fails each event alone (R66)
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				entered, release := make(chan struct{}), make(chan struct{})
				block := func() { close(entered); <-release }
				api := newFakeAPI(func(int, seen) reply { return reply{status: tc.status} })
				c := newTestClient(t, api, nil, WithFlushAt(2), noAudit("the callback is still running at Close"),
					WithOnSuccess(func([]Message) { block() }), WithOnError(func(error, []Message) { block() }))
				mustTrack(t, c, "a")
				mustTrack(t, c, "b")
				<-entered
				err := closeClient(t, c, time.Second)
				close(release)
				if !errors.Is(err, ErrShutdownInterrupted) {
					t.Fatalf("Close: %v, want ErrShutdownInterrupted", err)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Close: %q, want it to say %q", err, tc.want)
				}
			})
		})
	}
}
