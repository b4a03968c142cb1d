// Package guard reports panics of code the user supplied (an http.Client
// and its RoundTripper, response bodies, callbacks, hooks), so that none of
// it takes the process down. It is entered only when such code panicked:
// both the engine and internal/httpbatch recover in a function they defer
// around every call into that code, and hand what they recovered to
// Caught.
package guard

import (
	"fmt"
	"runtime/debug"

	"go.uber.org/zap"
)

// PanicError is the error a call ends with when the user code it ran
// panicked: what panicked, and the panic's value as text.
type PanicError struct {
	What  string
	Value string
}

func (e *PanicError) Error() string { return e.What + " panicked: " + e.Value }

// Caught reports p, the non-nil value recovered from a panic of the user
// code named what (as logs and errors read it): it logs it once at ERROR
// with its value and the stack, and returns it as a *PanicError, which a
// caller with an error to give sets it to. It is called from the deferred
// function that recovered p, while the panicking frames are still on the
// stack, as in
//
//	defer func() {
//		if p := recover(); p != nil {
//			err = guard.Caught(log, what, p)
//		}
//	}()
//
// (recover works only when called by the deferred function itself). A nil
// log logs nothing. Safe for concurrent use.
func Caught(log *zap.Logger, what string, p any) *PanicError {
	// fmt contains a panic of the value's own String or Error method.
	value := fmt.Sprint(p)
	if log == nil {
		log = zap.NewNop()
	}
	log.Error(what+" panicked", zap.String("panic", value), zap.ByteString("stack", debug.Stack()))
	return &PanicError{What: what, Value: value}
}
