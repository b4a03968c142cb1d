package diskbuf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func payload(i int) []byte { return []byte(fmt.Sprintf(`{"type":"track","messageId":"m%03d"}`, i)) }

// write appends n events to a fresh log in dir and closes it without
// acknowledging any.
func write(t *testing.T, dir string, n int, opts Options) {
	t.Helper()
	l, rec, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 0 {
		t.Fatalf("fresh dir replayed %d", len(rec))
	}
	for i := 0; i < n; i++ {
		if _, _, err := l.Append(payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func reopen(t *testing.T, dir string) ([]string, Stats) {
	t.Helper()
	return reopenWith(t, dir, Options{})
}

// reopenWith opens dir with opts and returns the events replayed, in order,
// and what Open skipped; the log is closed again.
func reopenWith(t *testing.T, dir string, opts Options) ([]string, Stats) {
	t.Helper()
	l, rec, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var got []string
	for _, r := range rec {
		got = append(got, string(r.Data))
	}
	return got, l.Stats()
}

func want(from, to int) []string {
	var w []string
	for i := from; i < to; i++ {
		w = append(w, string(payload(i)))
	}
	return w
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	slices.Sort(m)
	return m
}

func TestReplayInOrder(t *testing.T) { forModes(t, testReplayInOrder) }

func testReplayInOrder(t *testing.T, mode Options) {
	dir := t.TempDir()
	write(t, dir, 10, mode)
	got, st := reopen(t, dir)
	if !slices.Equal(got, want(0, 10)) || st != (Stats{}) {
		t.Fatalf("replayed %q stats %+v", got, st)
	}
	// not acknowledged, so a third open replays them again
	got, _ = reopen(t, dir)
	if len(got) != 10 {
		t.Fatalf("second reopen replayed %d", len(got))
	}
}

// TestTornLastRecord cuts the last segment at every byte offset of its last
// record: everything before it comes back, the torn one is counted.
func TestTornLastRecord(t *testing.T) { forModes(t, testTornLastRecord) }

func testTornLastRecord(t *testing.T, mode Options) {
	src := t.TempDir()
	write(t, src, 5, mode)
	segs := segFiles(t, src)
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	last := len(data) - (headerSize + 1 + len(payload(4)))
	for cut := last; cut < len(data); cut++ {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(segs[0])), data[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		got, st := reopen(t, dir)
		wantTorn := 1
		if cut == last {
			wantTorn = 0 // cut exactly between records: nothing torn
		}
		if !slices.Equal(got, want(0, 4)) || st.Torn != wantTorn || st.Corrupt != 0 {
			t.Fatalf("cut at %d: replayed %q, stats %+v", cut, got, st)
		}
	}
}

// TestCorruptMiddleRecord damages one record in the middle (its payload,
// its checksum, its length): it is skipped and counted, the rest comes back.
func TestCorruptMiddleRecord(t *testing.T) { forModes(t, testCorruptMiddleRecord) }

func testCorruptMiddleRecord(t *testing.T, mode Options) {
	src := t.TempDir()
	write(t, src, 10, mode)
	seg := segFiles(t, src)[0]
	data, _ := os.ReadFile(seg)
	recSize := headerSize + 1 + len(payload(0))
	r5 := fileHeaderSize + 5*recSize
	for _, at := range []struct {
		name string
		pos  int
		val  byte
	}{{"payload", r5 + headerSize + 5, 'X'}, {"checksum", r5 + 4, 0}, {"length", r5, 0xff}, {"length-zero", r5, 0}} {
		t.Run(at.name, func(t *testing.T) {
			dir := t.TempDir()
			bad := slices.Clone(data)
			bad[at.pos] ^= at.val | 1
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(seg)), bad, 0o600); err != nil {
				t.Fatal(err)
			}
			got, st := reopen(t, dir)
			if !slices.Equal(got, append(want(0, 5), want(6, 10)...)) || st.Corrupt != 1 || st.Torn != 0 {
				t.Fatalf("replayed %q, stats %+v", got, st)
			}
		})
	}
}

// TestGarbageSegment: a segment of random-looking bytes after a valid
// header yields nothing and no panic; without a header it is counted as a
// lost segment.
func TestGarbageSegment(t *testing.T) {
	junk := []byte(strings.Repeat("\xff\x00\x10\x00\x00\x00\x00\x00{garbage}", 500))
	for _, c := range []struct {
		name string
		data []byte
		want Stats
	}{{"header", append(fileHeader(segMagic, 1), junk...), Stats{Torn: 1}}, {"no-header", junk, Stats{Missing: 1}}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "00000000000000000001.seg"), c.data, 0o600); err != nil {
				t.Fatal(err)
			}
			got, st := reopen(t, dir)
			if len(got) != 0 || st != c.want {
				t.Fatalf("replayed %d, stats %+v, want %+v", len(got), st, c.want)
			}
		})
	}
}

func TestAckAndReclaim(t *testing.T) { forModes(t, testAckAndReclaim) }

func testAckAndReclaim(t *testing.T, mode Options) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{SegmentBytes: 200, NoMmap: mode.NoMmap})
	if err != nil {
		t.Fatal(err)
	}
	type ref struct {
		s   *Segment
		off uint32
	}
	var refs []ref
	for i := 0; i < 20; i++ {
		s, off, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref{s, off})
	}
	if n := len(segFiles(t, dir)); n < 4 {
		t.Fatalf("%d segments, want several", n)
	}
	// acknowledge all but #7 and #15, out of order
	var acks []ref
	for i := 19; i >= 0; i-- {
		if i != 7 && i != 15 {
			acks = append(acks, refs[i])
		}
	}
	if err := l.Ack(len(acks), func(i int) (*Segment, uint32) { return acks[i].s, acks[i].off }); err != nil {
		t.Fatal(err)
	}
	before := len(segFiles(t, dir))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := reopen(t, dir)
	if !slices.Equal(got, []string{string(payload(7)), string(payload(15))}) {
		t.Fatalf("replayed %q", got)
	}
	// acknowledge the last two: everything is reclaimed
	l, rec, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Ack(len(rec), func(i int) (*Segment, uint32) { return rec[i].Seg, rec[i].Off }); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if segs := segFiles(t, dir); len(segs) != 0 {
		t.Fatalf("after every ack: %d segments left (had %d)", len(segs), before)
	}
}

func TestSizeLimit(t *testing.T) { forModes(t, testSizeLimit) }

func testSizeLimit(t *testing.T, mode Options) {
	dir := t.TempDir()
	// 3100: three segments and the ack file (its header and a count
	// record per sealed segment)
	l, _, err := Open(dir, Options{SegmentBytes: 1000, MaxBytes: 3100, NoMmap: mode.NoMmap})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	for ; n < 1000; n++ {
		if _, _, err = l.Append(payload(n)); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrFull) || l.Size() > 3100 || l.Size() < 3000-2*int64(headerSize+1+len(payload(0))) {
		t.Fatalf("after %d appends: err %v, size %d", n, err, l.Size())
	}
}

func TestLock(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	l.Close()
	l2, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	l2.Close()
}

// TestWriteErrorStartsNewSegment: a failed write (here: the segment's file
// descriptor closed under the log) is returned, and the next append goes
// to a new segment, so the failed record is never followed by a good one.
func TestWriteErrorStartsNewSegment(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{NoMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Append(payload(0)); err != nil {
		t.Fatal(err)
	}
	l.act.(*fileActive).f.Close()
	if _, _, err := l.Append(payload(1)); err == nil {
		t.Fatal("append on a closed file succeeded")
	}
	if _, _, err := l.Append(payload(2)); err != nil {
		t.Fatalf("append after a failure: %v", err)
	}
	l.Close()
	got, _ := reopen(t, dir)
	if !slices.Equal(got, []string{string(payload(0)), string(payload(2))}) {
		t.Fatalf("replayed %q", got)
	}
}

// forModes runs f with the platform's writer and with write(2).
func forModes(t *testing.T, f func(*testing.T, Options)) {
	t.Run("default", func(t *testing.T) { f(t, Options{}) })
	t.Run("write", func(t *testing.T) { f(t, Options{NoMmap: true}) })
}

// TestStuckEventKeepsOnlyItsSegment: one event of the first segment never
// gets its outcome while hundreds of others do, acknowledged in batches.
// The later segments are deleted anyway, and a reopen replays only the
// stuck event.
func TestStuckEventKeepsOnlyItsSegment(t *testing.T) { forModes(t, testStuckEventKeepsOnlyItsSegment) }

func testStuckEventKeepsOnlyItsSegment(t *testing.T, mode Options) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{SegmentBytes: 400, NoMmap: mode.NoMmap})
	if err != nil {
		t.Fatal(err)
	}
	type ref struct {
		s   *Segment
		off uint32
	}
	var batch []ref
	for i := 0; i < 300; i++ {
		s, off, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			continue // stuck: never acknowledged
		}
		if batch = append(batch, ref{s, off}); len(batch) == 10 || i == 299 {
			if err := l.Ack(len(batch), func(j int) (*Segment, uint32) { return batch[j].s, batch[j].off }); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	l.Reclaim()
	if n := len(segFiles(t, dir)); n > 2 {
		t.Fatalf("%d segment files for 1 unacknowledged event", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, st := reopen(t, dir)
	if !slices.Equal(got, want(0, 1)) || st != (Stats{}) {
		t.Fatalf("replayed %d events (want only the stuck one): %q", len(got), got[:min(len(got), 3)])
	}
}

// TestLargeAck: one Ack of more events than an ack record holds is split
// into several records, each smaller than a segment.
func TestLargeAck(t *testing.T) { forModes(t, testLargeAck) }

func testLargeAck(t *testing.T, mode Options) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{SegmentBytes: 64 << 10, NoMmap: mode.NoMmap})
	if err != nil {
		t.Fatal(err)
	}
	type ref struct {
		s   *Segment
		off uint32
	}
	var refs []ref
	for i := 0; i < 3*ackChunk; i++ {
		s, off, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref{s, off})
	}
	if err := l.Ack(len(refs)-1, func(j int) (*Segment, uint32) { return refs[j].s, refs[j].off }); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := reopen(t, dir)
	if !slices.Equal(got, want(3*ackChunk-1, 3*ackChunk)) {
		t.Fatalf("replayed %d events, want only the last", len(got))
	}
}

// crash leaves l as a killed process would: the reclaimer and the lock
// gone, nothing sealed, cut or deleted. The active segment stays mapped
// (or open) until the returned func runs (it seals it).
func crash(l *Log) (release func()) {
	close(l.quit)
	<-l.done
	l.ackMu.Lock()
	if l.ackF != nil {
		l.ackF.Close()
		l.ackF = nil
	}
	l.ackMu.Unlock()
	l.lock.Close()
	l.mu.Lock()
	a, end := l.act, int64(0)
	if a != nil {
		end = l.segs[len(l.segs)-1].size
	}
	l.act, l.closed = nil, true
	l.mu.Unlock()
	return func() {
		if a != nil {
			_ = a.seal(end)
		}
	}
}

// kill is crash with the active segment closed as it is at once.
func kill(l *Log) {
	l.mu.Lock()
	a := l.act
	l.mu.Unlock()
	crash(l)
	if a != nil {
		a.abandon()
	}
}
