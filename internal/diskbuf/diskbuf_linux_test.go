package diskbuf

import (
	"os"
	"slices"
	"testing"
)

// TestCrashLeavesPreallocatedSegment: a process that dies leaves its
// active segment at full size with a zero tail, maybe with the start of a
// record whose header was never stored. Open replays what is whole and
// counts the torn record once.
func TestCrashLeavesPreallocatedSegment(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	for i := 0; i < 3; i++ {
		s, _, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		end = s.size
	}
	// the body of a fourth record was copied, its header not yet
	rec := append([]byte{0, 0, 0, 0, 0, 0, 0, 0, kindEvent}, payload(3)...)
	copy(l.act.(*mmapActive).mem[end+headerSize:], rec[headerSize:])
	// die: the lock goes with the process; nothing is sealed or cut
	release := crash(l)
	segs := segFiles(t, dir)
	if fi, _ := os.Stat(segs[0]); fi.Size() != 64<<10 {
		t.Fatalf("active segment is %d bytes, want preallocated", fi.Size())
	}
	got, st := reopen(t, dir)
	if !slices.Equal(got, want(0, 3)) || st.Torn != 1 || st.Corrupt != 0 {
		t.Fatalf("replayed %q, stats %+v", got, st)
	}
	release()
}
