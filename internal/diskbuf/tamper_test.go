package diskbuf

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }

func itoa(n int) string { return strconv.Itoa(n) }

// TestNewestSegmentEmptiedIsMissing: a segment appears with its header in
// it, so an emptied newest segment is damage, not a crash cut short:
// counted missing, with an error.
func TestNewestSegmentEmptiedIsMissing(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, 40, Options{SegmentBytes: 400})
	segs := segFiles(t, dir)
	if err := os.Truncate(segs[len(segs)-1], 0); err != nil {
		t.Fatal(err)
	}
	var lines []string
	l, _, err := Open(dir, Options{Errorf: func(f string, a ...any) { lines = append(lines, f) }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Stats().Missing != 1 || len(lines) != 1 {
		t.Fatalf("stats %+v, errors %q", l.Stats(), lines)
	}
}

// TestFullDiskReclaimNotReportedLost: the deletion marker cannot be
// written (a full disk): the oldest segments with nothing live give their
// space back anyway, and after a crash the next Open reports no loss and
// replays nothing delivered.
func TestFullDiskReclaimNotReportedLost(t *testing.T) {
	// The acknowledgements wake the reclaimer, which may delete the
	// segments they empty before the ack file is made to refuse writes:
	// that run did not meet a full disk, and the scenario starts again in
	// a new directory. A reclaim that gives nothing back under a full disk
	// fails every attempt.
	const attempts = 10
	for attempt := 1; ; attempt++ {
		dir := t.TempDir()
		l, _, err := Open(dir, Options{SegmentBytes: 400})
		if err != nil {
			t.Fatal(err)
		}
		refs := appendPayloads(t, l, 40)
		ackAll(t, l, refs[:20]) // the oldest segments: nothing live
		// The ack file refuses every write from now on, as a full disk does.
		l.ackMu.Lock()
		ro, err := os.Open(l.ackF.Name())
		if err != nil {
			t.Fatal(err)
		}
		l.ackF.Close()
		l.ackF = ro
		l.ackMu.Unlock()
		before := l.Size()
		l.Reclaim()
		after := l.Size()
		kill(l)
		if after >= before {
			if attempt < attempts {
				continue // the reclaimer was first (see above)
			}
			t.Fatalf("no space given back in %d attempts: %d bytes, then %d", attempts, before, after)
		}
		var lines []string
		got, st := reopenWith(t, dir, Options{Errorf: func(f string, a ...any) { lines = append(lines, f) }})
		if st != (Stats{}) || len(lines) != 0 || strings.Join(got, "") != strings.Join(want(20, 40), "") {
			t.Fatalf("stats %+v, errors %q, replayed %d (want the 20 not acknowledged)", st, lines, len(got))
		}
		return
	}
}

// TestAckFilesDeleted: the ack files deleted by hand. Every event still in
// a segment is replayed (sent again: the API deduplicates by messageId);
// gaps left by segments deleted on purpose, whose markers went with the
// ack files, are not reported as lost.
func TestAckFilesDeleted(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{SegmentBytes: 400})
	if err != nil {
		t.Fatal(err)
	}
	refs := appendPayloads(t, l, 40)
	ackAll(t, l, refs[8:30]) // middle segments deleted with markers
	l.Reclaim()
	kill(l)
	acks, _ := filepath.Glob(filepath.Join(dir, "*"+ackSuffix))
	for _, a := range acks {
		os.Remove(a)
	}
	var lines []string
	l, rec, err := Open(dir, Options{Errorf: func(f string, a ...any) { lines = append(lines, f) }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Stats().Missing != 0 || len(lines) != 0 || len(rec) < 40-22 {
		t.Fatalf("stats %+v, errors %q, replayed %d", l.Stats(), lines, len(rec))
	}
}

// TestMissingSegmentReportsItsEvents: a sealed segment records how many
// events it took (in the ack file), so a segment deleted or emptied while
// no Log ran is reported with the number of its events that had no
// acknowledgement, once; the count survives compaction.
func TestMissingSegmentReportsItsEvents(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{SegmentBytes: 400})
	if err != nil {
		t.Fatal(err)
	}
	refs := appendPayloads(t, l, 40)
	ackAll(t, l, refs[8:9]) // one event of the second segment has its outcome
	l.compactAt.Store(0)    // the next pass compacts
	l.Reclaim()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segFiles(t, dir)
	second, _ := os.ReadFile(segs[1])
	last, _ := os.ReadFile(segs[len(segs)-1])
	inSecond, inLast := strings.Count(string(second), "messageId"), strings.Count(string(last), "messageId")
	os.Remove(segs[1])
	os.Truncate(segs[len(segs)-1], 0)
	var lines []string
	opts := Options{Errorf: func(f string, a ...any) { lines = append(lines, sprintf(f, a...)) }}
	l, rec, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if len(lines) != 2 || !strings.Contains(lines[0], sprintf(": %d event(s) without an outcome lost", inLast)) ||
		!strings.Contains(lines[1], sprintf(": %d event(s) without an outcome lost", inSecond-1)) || len(rec) != 40-inSecond-inLast {
		t.Fatalf("replayed %d; errors %q (want %d and %d events lost)", len(rec), lines, inLast, inSecond-1)
	}
	lines = nil
	l, _, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if len(lines) != 0 {
		t.Fatalf("reported again: %q", lines)
	}
}

// TestAckWriteRetried: acknowledgements that could not be written (the
// file system refused, for a while) are kept and written once it takes
// them again, so a later Open does not replay those events.
func TestAckWriteRetried(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{SegmentBytes: 400})
	if err != nil {
		t.Fatal(err)
	}
	refs := appendPayloads(t, l, 20)
	l.ackMu.Lock()
	rw := l.ackF
	ro, err := os.Open(rw.Name())
	if err != nil {
		t.Fatal(err)
	}
	l.ackF = ro // writes fail, as on a read-only file system
	l.ackMu.Unlock()
	if err := l.Ack(10, func(i int) (*Segment, uint32) { return refs[i].s, refs[i].off }); err == nil {
		t.Fatal("Ack into a read-only file did not fail")
	}
	l.ackMu.Lock()
	l.ackF = rw // writable again
	l.ackMu.Unlock()
	ro.Close()
	l.Reclaim()
	kill(l)
	got, st := reopen(t, dir)
	if strings.Join(got, "") != strings.Join(want(10, 20), "") || st != (Stats{}) {
		t.Fatalf("replayed %d events (want the 10 not acknowledged), stats %+v", len(got), st)
	}
}
