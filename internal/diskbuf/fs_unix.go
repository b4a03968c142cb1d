//go:build unix

package diskbuf

import (
	"errors"
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

// isSymlinkErr reports the error of O_NOFOLLOW on a symbolic link, and
// those of opening a directory for writing or a FIFO without a reader.
func isSymlinkErr(err error) bool {
	pe, ok := err.(*os.PathError)
	return ok && (pe.Err == syscall.ELOOP || pe.Err == syscall.EISDIR || pe.Err == syscall.ENXIO)
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

// createSegment makes the segment file path holding header, and first
// runs prepare (preallocation) on it, under a temporary name: the file
// appears under its own name with its header already in it, so a later
// Open that finds a segment without a valid header knows it was damaged,
// not cut short by a crash. A name already taken fails with an error
// matching os.ErrExist; a temporary file left by a crash is deleted by
// the next Open.
func createSegment(path string, header []byte, prepare func(*os.File) error) (*os.File, error) {
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if prepare != nil {
		if err := prepare(f); err != nil {
			return fail(err)
		}
	}
	if _, err := f.WriteAt(header, 0); err != nil {
		return fail(err)
	}
	if err := os.Link(tmp, path); err != nil { // never replaces what has that name
		if errors.Is(err, os.ErrExist) {
			return fail(err)
		}
		// No hard links on this file system: a rename, which would
		// replace a file of that name, so the name is checked first (the
		// directory is private to this client).
		if _, lerr := os.Lstat(path); !errors.Is(lerr, os.ErrNotExist) {
			return fail(&os.PathError{Op: "create", Path: path, Err: os.ErrExist})
		}
		if err := os.Rename(tmp, path); err != nil {
			return fail(err)
		}
		return f, nil
	}
	_ = os.Remove(tmp)
	return f, nil
}

// checkName returns an error matching errDamaged when path no longer
// names the file of fi (it was removed or replaced).
func checkName(path string, fi os.FileInfo) error {
	nfi, err := os.Lstat(path)
	if err != nil || !os.SameFile(fi, nfi) {
		return fmt.Errorf("%w: %s was removed or replaced", errDamaged, path)
	}
	return nil
}
