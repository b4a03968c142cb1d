package analytics

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// R51: every rejection reason reaches the aggregated warning, with a count
// per reason, even when no batch is ever sent and after Close; a caller
// who ignores the returned error still finds the loss in the logs.
func TestRejectionsReachTheLogs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		api := newFakeAPI(nil)
		c, err := New("wk", WithEndpoint("http://api.test"), WithHTTPClient(&http.Client{Transport: api}),
			WithLogger(zap.New(core)))
		require.NoError(t, err)
		auditLater(t, c, nil)
		rejected := func() []observer.LoggedEntry {
			return logs.FilterMessage("enqueue calls rejected; their events will not be sent").All()
		}
		_ = c.Track(Track{UserID: "u"})            // no Event: invalid
		_ = c.Track(Track{Event: "e"})             // no identity: invalid
		_ = c.Track(Track{UserID: "u", Event: "e", // too large
			Properties: Properties{"blob": strings.Repeat("x", MaxEventBytes)}})
		time.Sleep(2 * time.Second) // no batch was sent: the report comes on its own
		require.Len(t, rejected(), 1)
		got := rejected()[0]
		assert.Equal(t, zapcore.WarnLevel, got.Level)
		assert.Equal(t, map[string]any{"events": int64(3), "invalid": int64(2), "tooLarge": int64(1)}, got.ContextMap())

		_ = c.Track(Track{UserID: "u"}) // within the interval: reported later, with the next ones
		require.NoError(t, closeClient(t, c, time.Second))
		require.Len(t, rejected(), 2, "Close reports what is left")
		assert.Equal(t, map[string]any{"events": int64(1), "invalid": int64(1)}, rejected()[1].ContextMap())

		for range 3 {
			_ = c.Track(track("late")) // after Close
		}
		time.Sleep(dropReportInterval)
		require.Len(t, rejected(), 3)
		assert.Equal(t, map[string]any{"events": int64(3), "closed": int64(3)}, rejected()[2].ContextMap())
		time.Sleep(time.Minute)
		assert.Len(t, rejected(), 3, "one warning per batch of rejections")
		assert.Empty(t, api.requests())
	})
}
