package diskbuf

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"
)

// mmapActive is a segment file preallocated to its full size (fallocate,
// so a full disk shows at creation, not as a fault on a later store) and
// mapped shared: an append is a copy into the page cache, which outlives
// the process. File systems without fallocate get the write(2) writer.
//
// Another process can shrink the file under the mapping (truncate(1), a
// log rotation gone wrong); a store past the new end then faults (SIGBUS).
// write turns that fault into an error (runtime/debug.SetPanicOnFault, on
// the calling goroutine for the copy only), so the process lives and the
// segment is given up (errDamaged).
type mmapActive struct {
	f    *os.File
	path string
	mem  []byte
	size int64
}

func openActive(path string, size int64, noMmap bool, header []byte) (active, error) {
	if noMmap {
		return openFileActive(path, header)
	}
	f, err := createSegment(path, header, func(f *os.File) error {
		for {
			err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
			if err != syscall.EINTR {
				if err != nil {
					return &os.PathError{Op: "fallocate", Path: path, Err: err}
				}
				return nil
			}
		}
	})
	if errors.Is(err, syscall.EOPNOTSUPP) {
		// No fallocate on this file system. A sparse mapping would turn a
		// full disk into SIGBUS on a later store, so write(2) instead.
		return openFileActive(path, header)
	}
	if err != nil {
		return nil, err
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	return &mmapActive{f: f, path: path, mem: mem, size: size}, nil
}

func (a *mmapActive) write(off int64, rec []byte) (err error) {
	// A fault in the copy (the file was shrunk by someone else) panics
	// instead of killing the process; the segment is given up.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			err = fmt.Errorf("%w: %s (a store into its mapping faulted)", errDamaged, a.path)
		}
	}()
	copy(a.mem[off+headerSize:], rec[headerSize:])
	copy(a.mem[off:off+headerSize], rec[:headerSize])
	return nil
}

// sync writes the dirty pages back: on Linux fsync covers a shared
// mapping's pages (they are the file's page cache).
func (a *mmapActive) sync() error { return a.f.Sync() }

func (a *mmapActive) preallocated() bool { return true }

// check reports errDamaged when the file is no longer its preallocated
// size: a store past its new end would fault, one before it in the last
// page would be lost.
func (a *mmapActive) check(int64) error {
	fi, err := a.f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < a.size {
		return fmt.Errorf("%w: %s is %d bytes, was %d", errDamaged, a.path, fi.Size(), a.size)
	}
	return checkName(a.path, fi)
}

func (a *mmapActive) seal(used int64) error {
	err := syscall.Munmap(a.mem)
	a.mem = nil
	if cerr := a.check(used); cerr != nil {
		// Shrunk by someone else: never grown back (that would turn what
		// was cut off into zeros that look like free space).
		a.f.Close()
		return cerr
	}
	if terr := a.f.Truncate(used); err == nil {
		err = terr
	}
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (a *mmapActive) abandon() {
	_ = syscall.Munmap(a.mem)
	a.f.Close()
}
