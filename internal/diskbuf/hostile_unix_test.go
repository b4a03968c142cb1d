//go:build unix

package diskbuf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fileUsage is what a file takes on disk: its allocated blocks, or its
// size where that is more.
func fileUsage(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return max(st.Blocks*512, fi.Size())
	}
	return fi.Size()
}

// TestNotRegularFilesSkipped: a FIFO, a symbolic link to /dev/zero and a
// directory, each named like a segment (the directory like the next one to
// be created): Open skips and counts them without hanging, and appends work.
func TestNotRegularFilesSkipped(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, 3, Options{})
	if err := syscall.Mkfifo(filepath.Join(dir, "00000000000000000002.seg"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "00000000000000000003.seg")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "00000000000000000004.seg"), 0o700); err != nil {
		t.Fatal(err)
	}
	l, rec, err := openWithin(t, dir, Options{}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 3 || l.Stats() != (Stats{Skipped: 3}) {
		t.Fatalf("replayed %d, stats %+v; want 3 and 3 skipped", len(rec), l.Stats())
	}
	if _, _, err := l.Append(payload(9)); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := reopen(t, dir)
	if !slices.Equal(got, append(want(0, 3), string(payload(9)))) {
		t.Fatalf("replayed %q", got)
	}
}

// TestUnsafeDirRefused: a directory that group or others can write to, or
// that another user owns, is refused with an error that says which.
func TestUnsafeDirRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(dir, Options{}); !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("mode 0777: %v", err)
	}
	if err := os.Chmod(dir, 0o720); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(dir, Options{}); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("mode 0720: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // readable by others is fine
		t.Fatal(err)
	}
	l, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("mode 0755: %v", err)
	}
	l.Close()
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot give the directory to another user")
	}
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(dir, Options{}); !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), "owned by uid 4242") {
		t.Fatalf("owned by another user: %v", err)
	}
}
