//go:build !unix

package diskbuf

import (
	"errors"
	"io/fs"
	"os"
	"testing"
)

// dirUsage is what the files of dir take (their sizes).
func dirUsage(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // reclaimed or compacted away since ReadDir
		}
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}
