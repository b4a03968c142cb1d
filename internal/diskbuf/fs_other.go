//go:build !unix

package diskbuf

import (
	"fmt"
	"os"
)

// openRegular opens path if it is a regular file.
func openRegular(path string, flag int) (*os.File, error) {
	if fi, err := os.Lstat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", path, errNotRegular)
	}
	return os.OpenFile(path, flag, 0)
}

// checkPrivate: file modes and owners are not checked on this platform
// (Windows uses access control lists).
func checkPrivate(string, os.FileInfo) error { return nil }
