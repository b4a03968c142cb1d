// Package shared carries code of package analytics to package
// analyticstest without exporting it, so that the test fake runs the
// client's own validation, stamping and id code instead of a copy of it.
// Package analytics sets the variables in its init function; importing
// package analytics (as analyticstest does) guarantees they are set.
package shared

import "time"

// Prepare runs the client's enqueue preparation on m, which must be an
// analytics.Message (or nil): the same type switch (pointers become
// values; nil and unknown types are rejected), validation, stamping (an
// empty MessageID from newID, or the client's generator when newID is nil;
// a zero Timestamp from now, or time.Now, converted to UTC) and JSON
// encoding, including the size limit. It returns the copy of the message
// that the client's callbacks would get, or the error the client's enqueue
// call would return (ErrClosed and ErrQueueFull excepted: they depend on a
// client's state). Safe for concurrent use.
var Prepare func(m any, now func() time.Time, newID func() string) (any, error)

// Decode turns one event's JSON, as the client encodes it, back into the
// analytics.Message it was encoded from (numbers as float64, nested
// objects as map[string]any). Safe for concurrent use.
var Decode func(raw []byte) (any, error)
