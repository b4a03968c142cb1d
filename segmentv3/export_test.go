package analytics

import (
	"io"
	"time"
)

// SetStderr points the Verbose-without-Logger output at w until the
// returned function restores it. Not safe for parallel tests.
func SetStderr(w io.Writer) (restore func()) {
	saved := stderr
	stderr = w
	return func() { stderr = saved }
}

// SetStamps sets the unexported Config fields v3's own tests set: the id
// generator and the clock that stamp messages.
func SetStamps(c *Config, uid func() string, now func() time.Time) {
	c.uid, c.now = uid, now
}
