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

func TestCaught(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	run := func(v any) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = Caught(zap.New(core), "the hook", p)
			}
		}()
		panic(v)
	}
	err := run("boom")
	var pe *PanicError
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, &PanicError{What: "the hook", Value: "boom"}, pe)
	assert.Equal(t, "the hook panicked: boom", err.Error())
	require.Equal(t, 1, logs.Len(), "logged once")
	entry := logs.All()[0]
	assert.Equal(t, "the hook panicked", entry.Message)
	assert.Equal(t, zap.ErrorLevel, entry.Level)
	assert.Equal(t, "boom", entry.ContextMap()["panic"])
	// The stack is the panicking one: it still holds the panic and the
	// function that panicked.
	assert.Contains(t, entry.ContextMap()["stack"], "runtime/panic.go")
	assert.Contains(t, entry.ContextMap()["stack"], "guard.TestCaught.func1(")

	// A value whose String panics, and no logger.
	err = func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = Caught(nil, "the callback", p)
			}
		}()
		panic(badStringer{})
	}()
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "the callback", pe.What)
	assert.Contains(t, pe.Value, "String panics too")
	assert.Equal(t, 1, logs.Len())
}
