package analytics

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// R51: a hand-back is not a delivery failure. It is logged at WARN, at INFO
// when the events are kept on disk for the next start; failures stay ERROR.
func TestHandBackLogLevels(t *testing.T) {
	level := func(logs *observer.ObservedLogs, msg string) []zapcore.Level {
		var ls []zapcore.Level
		for _, e := range logs.FilterMessage(msg).All() {
			ls = append(ls, e.Level)
		}
		return ls
	}
	t.Run("memory", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			api := newFakeAPI(func(n int, r seen) reply {
				if r.ids[0] == "bad" {
					return reply{status: 400}
				}
				return reply{hold: time.Hour}
			})
			c := newTestClient(t, api, nil, WithFlushAt(1), WithHTTPTimeout(time.Hour), WithLogger(zap.New(core)))
			mustTrack(t, c, "bad")
			mustTrack(t, c, "slow")
			synctest.Wait()
			assert.ErrorIs(t, closeClient(t, c, time.Second), ErrShutdownInterrupted)
			assert.Equal(t, []zapcore.Level{zapcore.WarnLevel}, level(logs, "events handed back at shutdown"))
			assert.Equal(t, []zapcore.Level{zapcore.ErrorLevel}, level(logs, "events not delivered"))
		})
	})
	t.Run("durable", func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		c := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil,
			WithDiskBuffer(t.TempDir()), WithFlushAt(1), WithLogger(zap.New(core)))
		mustTrack(t, c, "kept")
		assert.ErrorIs(t, closeClient(t, c, 50*time.Millisecond), ErrShutdownInterrupted)
		require.Equal(t, []zapcore.Level{zapcore.InfoLevel}, level(logs, "events handed back at shutdown"))
		assert.Equal(t, true, logs.FilterMessage("events handed back at shutdown").All()[0].ContextMap()["kept"])
	})
}
