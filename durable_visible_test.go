package analytics

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Durable mode shows in Config, in its String (the start-up log line) and,
// at every start, in one INFO line "disk buffer opened" with the counts,
// nothing replayed included; without it, Config says so and no such line
// is logged.
func TestDurableModeIsVisible(t *testing.T) {
	dir := t.TempDir()
	core, logs := observer.New(zapcore.DebugLevel)
	c := newTestClient(t, newFakeAPI(nil), nil, WithDiskBuffer(dir, WithDiskLimit(64<<20)), WithLogger(zap.New(core)))
	cfg := c.Config()
	assert.Equal(t, dir, cfg.DiskBuffer)
	assert.Equal(t, int64(64<<20), cfg.DiskLimit)
	assert.Contains(t, cfg.String(), `diskBuffer="`+dir+`" diskLimit=67108864`)

	opened := logs.FilterMessage("disk buffer opened").All()
	require.Len(t, opened, 1, "one line at start, with nothing to replay")
	assert.Equal(t, zapcore.InfoLevel, opened[0].Level)
	fields := opened[0].ContextMap()
	assert.Equal(t, dir, fields["dir"])
	assert.Equal(t, int64(0), fields["replayed"])
	assert.Equal(t, int64(64<<20), fields["limit"])
	assert.Positive(t, fields["bytes"], "the open segment's size")
	for _, k := range []string{"torn", "corrupt", "missingSegments", "skippedEntries"} {
		assert.Equal(t, int64(0), fields[k], k)
	}
	started := logs.FilterMessage("analytics client started").All()
	require.Len(t, started, 1)
	assert.Contains(t, started[0].ContextMap()["config"], `diskBuffer="`+dir+`"`)

	require.NoError(t, c.Track(Track{UserID: "u", Event: "e"}))
	require.NoError(t, closeClient(t, c, 5*time.Second))

	// Off: Config says so, and nothing about a disk buffer is logged.
	core, logs = observer.New(zapcore.DebugLevel)
	plain := newTestClient(t, newFakeAPI(nil), nil, WithLogger(zap.New(core)))
	assert.Empty(t, plain.Config().DiskBuffer)
	assert.Zero(t, plain.Config().DiskLimit)
	assert.True(t, strings.HasSuffix(plain.Config().String(), " diskBuffer=off"), plain.Config().String())
	assert.Zero(t, logs.FilterMessage("disk buffer opened").Len())
	require.NoError(t, closeClient(t, plain, 5*time.Second))
}
