package diskbuf

import "os"

// fileActive writes each record with one write(2).
type fileActive struct{ f *os.File }

func openFileActive(path string) (*fileActive, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &fileActive{f}, nil
}

func (a *fileActive) write(_ int64, rec []byte) error {
	_, err := a.f.Write(rec)
	return err
}

func (a *fileActive) sync() error { return a.f.Sync() }

func (a *fileActive) seal(used int64) error {
	// A failed write may have left part of a record: cut it off.
	terr := a.f.Truncate(used)
	if err := a.f.Close(); err != nil {
		return err
	}
	return terr
}
