package analytics

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory (needs root,
// or CAP_SYS_ADMIN) and unmounts it at cleanup; it skips the test, saying
// why, when it cannot mount.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file in dir until the file system is full.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestDurableFullDisk: a backlog kept on a file system that is then filled
// to the last byte. New opens it anyway (no segment is preallocated when
// there is no room), enqueue calls return a *DiskError wrapping ENOSPC,
// and the backlog drains once the server answers: every kept event is
// delivered, and its segments are deleted. Once they are, appends work
// again.
func TestDurableFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, 2<<20)
	dir := filepath.Join(mnt, "buf")
	const kept = 2000
	c1 := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil,
		WithDiskBuffer(dir, WithSegmentSize(64<<10)), WithFlushAt(MaxFlushAt))
	for i := 0; i < kept; i++ {
		mustTrack(t, c1, fmt.Sprintf("k%05d", i))
	}
	if err := closeClient(t, c1, 20*time.Millisecond); !errors.Is(err, ErrShutdownInterrupted) {
		t.Fatalf("Close: %v", err)
	}
	fillDisk(t, mnt)

	api := newFakeAPI(nil)
	c2 := newTestClient(t, api, nil, WithDiskBuffer(dir, WithSegmentSize(64<<10))) // fails the test if New fails
	err := c2.Track(track("new1"))
	var de *DiskError
	if !errors.As(err, &de) || de.Op != "append" || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Track on a full disk: %v", err)
	}
	if err := flush(t, c2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := len(sentIDs(api)); got != kept {
		t.Fatalf("delivered %d of %d kept events", got, kept)
	}
	// the segments go once their events are acknowledged; then there is room
	deadline := time.Now().Add(5 * time.Second)
	for err = c2.Track(track("new2")); err != nil && time.Now().Before(deadline); err = c2.Track(track("new2")) {
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Track after the backlog drained: %v", err)
	}
	if err := closeClient(t, c2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := c2.Stats(); st.Replayed != kept || st.Delivered != kept+1 || st.RejectedDisk < 1 {
		t.Fatalf("stats %+v", st)
	}
	if segs := segments(t, dir); len(segs) != 0 {
		t.Fatalf("%d segments left", len(segs))
	}
}
