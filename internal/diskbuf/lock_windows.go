//go:build windows

package diskbuf

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile opens path with no sharing: while the handle is open (until Close
// or the process dies) every other open fails with a sharing violation.
func lockFile(path string) (io.Closer, error) {
	p, err := syscall.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	h, err := syscall.CreateFile(p, syscall.GENERIC_READ|syscall.GENERIC_WRITE, 0, nil,
		syscall.OPEN_ALWAYS, syscall.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		if errors.Is(err, errSharingViolation) {
			return nil, ErrLocked
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(h), path), nil
}

// errSharingViolation is ERROR_SHARING_VIOLATION, which package syscall
// does not name.
const errSharingViolation = syscall.Errno(32)

// lockDir locks dir with the file LockName in it (this platform cannot
// lock a directory itself) and returns the directory's identity.
func lockDir(dir string) (io.Closer, os.FileInfo, error) {
	lock, err := lockFile(filepath.Join(dir, LockName))
	if err != nil {
		return nil, nil, err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	return lock, fi, nil
}
