//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly || windows)

package diskbuf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lockFile creates path+".pid" exclusively and writes the process id into
// it. A file left by a process that died is taken over when that pid no
// longer runs (signal 0 fails); deleting the file clears a stale lock
// whose pid was reused.
func lockFile(path string) (io.Closer, error) {
	path += ".pid"
	for try := 0; try < 2; try++ {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err == nil {
			fmt.Fprintf(f, "%d\n", os.Getpid())
			return pidLock{f}, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		b, _ := os.ReadFile(path)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if p, err := os.FindProcess(pid); pid > 0 && err == nil && p.Signal(syscall.Signal(0)) == nil {
			return nil, ErrLocked
		}
		os.Remove(path)
	}
	return nil, ErrLocked
}

type pidLock struct{ f *os.File }

func (l pidLock) Close() error {
	name := l.f.Name()
	err := l.f.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	return err
}
