package analytics

import "io"

// SetStderr points the Verbose-without-Logger output at w until the
// returned function restores it. Not safe for parallel tests.
func SetStderr(w io.Writer) (restore func()) {
	saved := stderr
	stderr = w
	return func() { stderr = saved }
}
