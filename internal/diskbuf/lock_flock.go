//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package diskbuf

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock(2) on the directory itself (not on a
// file in it): no file that a cleanup script could delete carries the lock,
// so it holds while the holder lives, and a directory removed and made
// again is another directory (the holder finds its own gone, ErrDirGone).
// The kernel drops the lock when the descriptor is closed or the process
// dies, so a crash never leaves it behind. Two Logs of one process on the
// same directory exclude each other too (a lock per open descriptor).
func lockDir(dir string) (io.Closer, os.FileInfo, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.IsDir() {
		err = &os.PathError{Op: "open", Path: dir, Err: syscall.ENOTDIR}
	}
	if err != nil {
		f.Close()
		return nil, nil, err
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
			return nil, nil, ErrLocked
		}
		return nil, nil, &os.PathError{Op: "flock", Path: dir, Err: err}
	}
	return f, fi, nil
}
