package diskbuf

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// openWithin opens dir in a goroutine and fails the test if that takes
// longer than d (the goroutine is left behind then: a hang is the bug).
func openWithin(t *testing.T, dir string, opts Options, d time.Duration) (*Log, []Replayed, error) {
	t.Helper()
	type res struct {
		l   *Log
		rec []Replayed
		err error
	}
	ch := make(chan res, 1)
	start := time.Now()
	go func() {
		l, rec, err := Open(dir, opts)
		ch <- res{l, rec, err}
	}()
	select {
	case r := <-ch:
		t.Logf("Open took %v", time.Since(start))
		return r.l, r.rec, r.err
	case <-time.After(d):
		t.Fatalf("Open has not returned after %v", d)
		return nil, nil, nil
	}
}

// TestCraftedSegmentBounded: a 4 MiB segment whose every 12 bytes look
// like the header of a 1 MiB event record with a wrong checksum. Resync
// would checksum a megabyte at each of them; the scan's budget keeps Open
// under a second, and the region is counted once.
func TestCraftedSegmentBounded(t *testing.T) {
	dir := t.TempDir()
	data := fileHeader(segMagic, 1)
	unit := make([]byte, 12)
	binary.LittleEndian.PutUint32(unit, MaxRecord)
	binary.LittleEndian.PutUint32(unit[4:], 0xdeadbeef)
	unit[8] = kindEvent
	for len(data) < 4<<20 {
		data = append(data, unit...)
	}
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000001.seg"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, rec, err := openWithin(t, dir, Options{}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Open took %v", d)
	}
	if st := l.Stats(); len(rec) != 0 || st.Corrupt+st.Torn != 1 {
		t.Fatalf("replayed %d, stats %+v", len(rec), st)
	}
}

// TestFormatVersion: every file starts with the magic and the version; a
// segment of another version makes Open fail (not guess).
func TestFormatVersion(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, 2, Options{})
	seg := segFiles(t, dir)[0]
	data, _ := os.ReadFile(seg)
	if string(data[:4]) != segMagic || binary.LittleEndian.Uint32(data[4:]) != FormatVersion || binary.LittleEndian.Uint64(data[8:]) != 1 {
		t.Fatalf("header % x", data[:fileHeaderSize])
	}
	binary.LittleEndian.PutUint32(data[4:], FormatVersion+1)
	if err := os.WriteFile(seg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "format version 2") {
		t.Fatalf("Open: %v", err)
	}
}

// TestMissingSegmentCounted: a middle segment deleted, emptied or zeroed
// loses its events; Open counts it (Stats.Missing) and reports it with
// Errorf, once (the next Open does not count it again). Segments deleted
// by the log itself, in any order, are never counted.
func TestMissingSegmentCounted(t *testing.T) {
	for _, damage := range []string{"deleted", "emptied", "zeroed"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, 40, Options{SegmentBytes: 400})
			segs := segFiles(t, dir)
			if len(segs) < 4 {
				t.Fatalf("%d segments", len(segs))
			}
			mid := segs[1]
			data, _ := os.ReadFile(mid)
			lost := 0
			for i := 0; i < 40; i++ {
				if strings.Contains(string(data), string(payload(i))) {
					lost++
				}
			}
			switch damage {
			case "deleted":
				os.Remove(mid)
			case "emptied":
				os.WriteFile(mid, nil, 0o600)
			case "zeroed":
				os.WriteFile(mid, make([]byte, len(data)), 0o600)
			}
			var errs []string
			opts := Options{Errorf: func(f string, a ...any) { errs = append(errs, f) }}
			l, rec, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(rec) != 40-lost || l.Stats() != (Stats{Missing: 1}) || len(errs) != 1 {
				t.Fatalf("replayed %d (want %d), stats %+v, errors %q", len(rec), 40-lost, l.Stats(), errs)
			}
			l.Close()
			errs = nil
			l, _, err = Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			if l.Stats() != (Stats{}) || len(errs) != 0 {
				t.Fatalf("second open: stats %+v, errors %q", l.Stats(), errs)
			}
			l.Close()
		})
	}
	t.Run("reclaimed", func(t *testing.T) {
		dir := t.TempDir()
		l, _, err := Open(dir, Options{SegmentBytes: 400})
		if err != nil {
			t.Fatal(err)
		}
		refs := appendPayloads(t, l, 40)
		// the middle of the log, newest first: holes between kept segments
		var acks []ackRef
		for i := 30; i >= 8; i-- {
			acks = append(acks, refs[i])
		}
		ackAll(t, l, acks)
		l.Reclaim()
		kill(l)
		var errs []string
		l, rec, err := Open(dir, Options{Errorf: func(f string, a ...any) { errs = append(errs, f) }})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if len(rec) != 40-23 || l.Stats() != (Stats{}) || len(errs) != 0 {
			t.Fatalf("replayed %d, stats %+v, errors %q", len(rec), l.Stats(), errs)
		}
	})
}

// TestLimitAcrossCrashes: ten runs that each append 5 events and die
// (leaving a preallocated segment), then a restart: the directory stays
// within MaxBytes, on disk, and every event is replayed. Then graceful
// restarts of a log at its limit do not take it past the limit either.
// dirUsage is what the files of dir take (fileUsage of each).
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
		n += fileUsage(fi)
	}
	return n
}

func TestLimitAcrossCrashes(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 64 << 10, MaxBytes: 256 << 10}
	for run := 0; run < 10; run++ {
		l, _, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		for i := 0; i < 5; i++ {
			if _, _, err := l.Append(payload(run*5 + i)); err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
		}
		kill(l)
		if u := dirUsage(t, dir); u > opts.MaxBytes {
			t.Fatalf("after crashed run %d the directory takes %d bytes, limit %d", run, u, opts.MaxBytes)
		}
	}
	l, rec, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if u, s := dirUsage(t, dir), l.Size(); len(rec) != 50 || u > opts.MaxBytes || s > opts.MaxBytes {
		t.Fatalf("restart: replayed %d, directory %d bytes, Size %d, limit %d", len(rec), u, s, opts.MaxBytes)
	}
	// fill to the limit, then restart six times
	for i := 0; ; i++ {
		if _, _, err := l.Append(payload(i)); errors.Is(err, ErrFull) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if i == 100_000 {
			t.Fatalf("%d appends within a %d-byte limit", i, opts.MaxBytes)
		}
	}
	l.Close()
	for run := 0; run < 6; run++ {
		l, _, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.Append(payload(0)); !errors.Is(err, ErrFull) {
			t.Fatalf("restart %d at the limit: append %v, want ErrFull", run, err)
		}
		s := l.Size()
		l.Close()
		// The directory is measured at rest: while the log is open, a
		// compaction may briefly hold its output beside its input.
		if u := dirUsage(t, dir); u > opts.MaxBytes || s > opts.MaxBytes {
			t.Fatalf("restart %d: directory %d bytes, Size %d, limit %d", run, u, s, opts.MaxBytes)
		}
	}
}

// TestDirRemoved: a directory removed while the log runs is noticed at the
// next Sync (or rotation); appends fail with ErrDirGone from then on.
func TestDirRemoved(t *testing.T) {
	for _, how := range []string{"sync", "rotation"} {
		t.Run(how, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "buf")
			l, _, err := Open(dir, Options{SegmentBytes: 400})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if _, _, err := l.Append(payload(0)); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if how == "sync" {
				if err := l.Sync(); !errors.Is(err, ErrDirGone) {
					t.Fatalf("Sync: %v", err)
				}
				if _, _, err := l.Append(payload(1)); !errors.Is(err, ErrDirGone) {
					t.Fatalf("append after Sync: %v", err)
				}
				return
			}
			var n int
			for n = 1; n < 100; n++ {
				if _, _, err = l.Append(payload(n)); err != nil {
					break
				}
			}
			t.Logf("append %d: %v", n, err)
			if !errors.Is(err, ErrDirGone) || n > 20 {
				t.Fatalf("append %d: %v", n, err)
			}
		})
	}
}
