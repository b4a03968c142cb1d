// Package guard contains panics of code the user supplied (an http.Client
// and its RoundTripper, response bodies, callbacks, hooks), so that none of
// it takes the process down. Both the engine and internal/httpbatch defer
// Contain around every call into such code.
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

// Contain ends a panic of the user code that the calling function ran
// (what names it, as logs and errors read it): the panic is logged once at
// ERROR with its value and stack, and, when err is not nil, *err becomes a
// *PanicError. It must be deferred directly (defer guard.Contain(…)), as
// recover requires. A nil log logs nothing.
func Contain(log *zap.Logger, what string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	// fmt contains a panic of the value's own String or Error method.
	value := fmt.Sprint(r)
	if log == nil {
		log = zap.NewNop()
	}
	log.Error(what+" panicked", zap.String("panic", value), zap.ByteString("stack", debug.Stack()))
	if err != nil {
		*err = &PanicError{What: what, Value: value}
	}
}
