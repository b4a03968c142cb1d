//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package diskbuf

import (
	"io"
	"os"
	"path/filepath"
)

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
