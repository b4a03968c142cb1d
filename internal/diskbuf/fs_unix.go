//go:build unix

package diskbuf

import (
	"fmt"
	"os"
	"syscall"
)

// openRegular opens path without following a symbolic link and without
// blocking on a FIFO or device, and only if it is a regular file.
func openRegular(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if isSymlinkErr(err) {
			return nil, fmt.Errorf("%s: %w", path, errNotRegular)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s: %w", path, errNotRegular)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// isSymlinkErr reports the error of O_NOFOLLOW on a symbolic link.
func isSymlinkErr(err error) bool {
	pe, ok := err.(*os.PathError)
	return ok && pe.Err == syscall.ELOOP
}

// checkPrivate refuses a directory another user could write to: one
// writable by group or others, or owned by another user (the events in it
// would be sent with this process's write key).
func checkPrivate(dir string, fi os.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%w: %s has mode %04o, writable by group or others (chmod go-w, or use a directory only this user can write)", ErrUnsafeDir, dir, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s is owned by uid %d, not by this process's user (uid %d)", ErrUnsafeDir, dir, st.Uid, os.Geteuid())
	}
	return nil
}
