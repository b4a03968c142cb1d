package diskbuf

import (
	"fmt"
	"os"
)

// fileActive writes each record with one write(2) at the end of the file.
type fileActive struct {
	f      *os.File
	path   string
	failed bool // a write failed: part of a record may follow the last whole one
}

func openFileActive(path string, header []byte) (*fileActive, error) {
	f, err := createSegment(path, header, nil)
	if err != nil {
		return nil, err
	}
	return &fileActive{f: f, path: path}, nil
}

func (a *fileActive) write(off int64, rec []byte) error {
	_, err := a.f.WriteAt(rec, off)
	if err != nil {
		a.failed = true
	}
	return err
}

func (a *fileActive) sync() error { return a.f.Sync() }

func (a *fileActive) preallocated() bool { return false }

// check reports errDamaged when the file is shorter than the used bytes.
func (a *fileActive) check(used int64) error {
	fi, err := a.f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < used {
		return fmt.Errorf("%w: %s is %d bytes, %d were written", errDamaged, a.path, fi.Size(), used)
	}
	return checkName(a.path, fi)
}

func (a *fileActive) seal(used int64) error {
	if err := a.check(used); err != nil {
		a.f.Close()
		return err
	}
	var terr error
	if a.failed {
		terr = a.f.Truncate(used) // cut off the part of a record
	}
	if err := a.f.Close(); err != nil {
		return err
	}
	return terr
}

func (a *fileActive) abandon() { a.f.Close() }
