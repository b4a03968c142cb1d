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

// createSegment makes the segment file path holding header, after running
// prepare (if not nil) on it. A name already taken fails with an error
// matching os.ErrExist.
func createSegment(path string, header []byte, prepare func(*os.File) error) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if prepare != nil {
		err = prepare(f)
	}
	if err == nil {
		_, err = f.WriteAt(header, 0)
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return f, nil
}

// checkName: a file open here cannot be removed or replaced (Windows).
func checkName(string, os.FileInfo) error { return nil }
