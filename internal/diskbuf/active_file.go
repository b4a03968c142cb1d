package diskbuf

import "os"

// fileActive writes each record with one write(2) at the end of the file.
type fileActive struct {
	f      *os.File
	failed bool // a write failed: part of a record may follow the last whole one
}

func openFileActive(path string) (*fileActive, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return &fileActive{f: f}, nil
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

func (a *fileActive) seal(used int64) error {
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
