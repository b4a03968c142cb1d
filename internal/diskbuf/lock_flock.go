//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package diskbuf

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock(2) on path. The kernel drops it when the
// file is closed or the process dies, so a crash never leaves it behind.
func lockDir(path string) (io.Closer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	return f, nil
}
