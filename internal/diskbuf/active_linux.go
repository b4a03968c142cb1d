package diskbuf

import (
	"os"
	"syscall"
)

// mmapActive is a segment file preallocated to its full size (fallocate,
// so a full disk shows at creation, not as a fault on a later store) and
// mapped shared: an append is a copy into the page cache, which outlives
// the process. File systems without fallocate get the write(2) writer.
type mmapActive struct {
	f   *os.File
	mem []byte
}

func openActive(path string, size int64, noMmap bool) (active, error) {
	if noMmap {
		return openFileActive(path)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	fail := func(op string, err error) (active, error) {
		f.Close()
		os.Remove(path)
		return nil, &os.PathError{Op: op, Path: path, Err: err}
	}
	for {
		err = syscall.Fallocate(int(f.Fd()), 0, 0, size)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EOPNOTSUPP {
		// No fallocate on this file system. A sparse mapping would turn a
		// full disk into SIGBUS on a later store, so write(2) instead.
		f.Close()
		if err := os.Remove(path); err != nil {
			return nil, err
		}
		return openFileActive(path)
	}
	if err != nil {
		return fail("fallocate", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	return &mmapActive{f: f, mem: mem}, nil
}

func (a *mmapActive) write(off int64, rec []byte) error {
	copy(a.mem[off+headerSize:], rec[headerSize:])
	copy(a.mem[off:off+headerSize], rec[:headerSize])
	return nil
}

// sync writes the dirty pages back: on Linux fsync covers a shared
// mapping's pages (they are the file's page cache).
func (a *mmapActive) sync() error { return a.f.Sync() }

func (a *mmapActive) preallocated() bool { return true }

func (a *mmapActive) seal(used int64) error {
	err := syscall.Munmap(a.mem)
	a.mem = nil
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
