//go:build unix

package diskbuf

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// errs collects what Errorf reports.
type errs struct{ lines []string }

func (e *errs) opts(o Options) Options {
	o.Errorf = func(f string, a ...any) { e.lines = append(e.lines, sprintf(f, a...)) }
	return o
}

// TestActiveTruncatedNoFault: the active segment cut to nothing by someone
// else. The mapped writer's next store would fault (SIGBUS): the append
// returns an error instead, the process lives, and the next append goes
// to a new segment. The Reader, positioned before the cut, counts the
// events that were in it as lost (one Errorf naming the number) and reads
// the ones after it. (The write(2) writer never faults; the whole segment
// is lost and counted.)
func TestActiveTruncatedNoFault(t *testing.T) { forModes(t, testActiveTruncatedNoFault) }

func testActiveTruncatedNoFault(t *testing.T, mode Options) {
	dir := t.TempDir()
	var e errs
	l, _, err := Open(dir, e.opts(mode))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < 100; i++ {
		s, off, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			l.Reader().Seek(s, off)
		}
	}
	segs := segFiles(t, dir)
	if err := os.Truncate(segs[len(segs)-1], 0); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := 100; i < 200; i++ {
		if _, _, err := l.Append(payload(i)); err != nil {
			failed++
		}
	}
	if !mode.NoMmap && failed != 1 {
		t.Fatalf("%d appends failed after the cut, want 1 (the one whose store faulted)", failed)
	}
	recs, lost, err := l.Reader().Next(1000, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	var read []string
	for _, r := range recs {
		read = append(read, string(r.Data))
	}
	t.Logf("read %d, lost %d, failed %d; errors %q", len(read), lost, failed, e.lines)
	if len(read)+lost != 200-failed || lost < 100 {
		t.Fatalf("read %d + lost %d, want %d accepted, at least the 100 cut off", len(read), lost, 200-failed)
	}
	// The mapped writer's later appends go to a new segment and are read;
	// write(2) past the cut leaves a hole before them in the same file,
	// so they are counted lost with the rest of it (and never sent).
	if !mode.NoMmap && (len(read) == 0 || read[len(read)-1] != string(payload(199))) {
		t.Fatalf("the events appended after the cut were not read: %d read", len(read))
	}
	if n := countLines(e.lines, "lost"); n != 1 {
		t.Fatalf("%d error lines about lost events, want 1: %q", n, e.lines)
	}
}

func countLines(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// TestSealedSegmentDamagedSkipped: a sealed segment of this Log's own,
// with events not read back yet, cut in the middle of a record, removed,
// or replaced by a symbolic link, a FIFO or a directory: the Reader never
// spins or waits on it; it counts exactly the events that are gone as
// lost, once, and reads every event after them at once.
func TestSealedSegmentDamagedSkipped(t *testing.T) {
	for _, how := range []string{"cut", "removed", "symlink", "fifo", "dir"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			var e errs
			l, _, err := Open(dir, e.opts(Options{SegmentBytes: 4096}))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for i := 0; i < 400; i++ {
				s, off, err := l.Append(payload(i))
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					l.Reader().Seek(s, off)
				}
			}
			segs := segFiles(t, dir)
			victim := segs[1]
			data, _ := os.ReadFile(victim)
			inIt := strings.Count(string(data), "messageId")
			gone := inIt
			switch how {
			case "cut":
				cut := len(data)/2 + 3
				whole := 0 // records before the cut stay
				scanRecords(data[:cut], fileHeaderSize, segKinds, nil, func(int, byte, []byte) { whole++ })
				gone = inIt - whole
				err = os.Truncate(victim, int64(cut))
			case "removed":
				err = os.Remove(victim)
			case "symlink":
				os.Remove(victim)
				err = os.Symlink("/dev/zero", victim)
			case "fifo":
				os.Remove(victim)
				err = syscall.Mkfifo(victim, 0o600)
			case "dir":
				os.Remove(victim)
				err = os.Mkdir(victim, 0o700)
			}
			if err != nil {
				t.Fatal(err)
			}
			var read []string
			lost := 0
			for calls := 0; ; calls++ {
				recs, n, err := l.Reader().Next(50, 1<<30)
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				for _, r := range recs {
					read = append(read, string(r.Data))
				}
				lost += n
				if len(recs) == 0 && n == 0 {
					break
				}
				if calls > 100 {
					t.Fatal("the reader does not get past the damaged segment")
				}
			}
			if lost != gone || len(read) != 400-gone || read[len(read)-1] != string(payload(399)) {
				t.Fatalf("read %d, lost %d; want %d lost of %d in the segment, the rest read", len(read), lost, gone, inIt)
			}
			if n := countLines(e.lines, "lost"); n != 1 || !strings.Contains(e.lines[0], itoa(gone)+" event(s)") {
				t.Fatalf("errors %q", e.lines)
			}
			// The damaged segment leaves the log's list once its file is
			// gone; a replacement that is not a regular file is left alone.
			l.Reclaim()
			if fi, err := os.Lstat(victim); how != "removed" && how != "cut" && (err != nil || fi.Mode().IsRegular()) {
				t.Fatalf("the %s at the segment's name: %v, %v", how, fi, err)
			}
		})
	}
}

// TestOldSegmentCutShort: a segment an earlier Log left, cut short after
// Open listed its events: the events past the cut are lost, counted once
// (one Errorf for the whole segment, not one per event), and the next
// segment is read at once.
func TestOldSegmentCutShort(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, 400, Options{SegmentBytes: 4096})
	var e errs
	l, n, err := OpenLog(dir, e.opts(Options{SegmentBytes: 4096}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	victim := segFiles(t, dir)[1]
	data, _ := os.ReadFile(victim)
	if err := os.Truncate(victim, fileHeaderSize+40); err != nil {
		t.Fatal(err)
	}
	gone := strings.Count(string(data), "messageId")
	var read, lost int
	for calls := 0; read+lost < n; calls++ {
		recs, k, err := l.Reader().Next(50, 1<<30)
		if err != nil || calls > 100 {
			t.Fatalf("Next: %v after %d calls", err, calls)
		}
		read += len(recs)
		lost += k
	}
	if lost != gone || read != 400-gone || len(e.lines) != 1 {
		t.Fatalf("read %d, lost %d (want %d), errors %q", read, lost, gone, e.lines)
	}
}

// TestLockHoldsWithoutLockFile: the lock is the directory's own, so
// deleting every file in it does not let a second Log in, and the second
// Log touches nothing of the first's.
func TestLockHoldsWithoutLockFile(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, _, err := l.Append(payload(1)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, LockName))
	before := dirListing(t, dir)
	if _, _, err := Open(dir, Options{}); err != ErrLocked {
		t.Fatalf("second Open with the lock file deleted: %v, want ErrLocked", err)
	}
	if after := dirListing(t, dir); after != before {
		t.Fatalf("the refused Open changed the directory:\n%s\n%s", before, after)
	}
}

// dirListing names every entry of dir with its size.
func dirListing(t *testing.T, dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, _ := e.Info()
		b.WriteString(e.Name() + " " + itoa(int(fi.Size())) + "\n")
	}
	return b.String()
}
