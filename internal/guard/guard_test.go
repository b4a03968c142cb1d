package guard

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type badStringer struct{}

func (badStringer) String() string { panic("String panics too") }

func TestContain(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	run := func(v any) (err error) {
		defer Contain(zap.New(core), "the hook", &err)
		panic(v)
	}
	err := run("boom")
	var pe *PanicError
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, "the hook panicked: boom", err.Error())
	require.Equal(t, 1, logs.Len(), "logged once")
	entry := logs.All()[0]
	assert.Equal(t, "the hook panicked", entry.Message)
	assert.Equal(t, zap.ErrorLevel, entry.Level)
	assert.Contains(t, entry.ContextMap()["stack"], "guard.TestContain")

	// A value whose String panics, and no error to set, and no logger.
	func() {
		defer Contain(nil, "the callback", nil)
		panic(badStringer{})
	}()
	// No panic: nothing changes.
	err = func() (err error) {
		defer Contain(zap.New(core), "calm", &err)
		return nil
	}()
	assert.NoError(t, err)
	assert.Equal(t, 1, logs.Len())
}
