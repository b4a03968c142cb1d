package diskbuf

import (
	"slices"
	"testing"
)

// TestReaderFollowsAppends: after a backlog (read first, acknowledged ones
// skipped), Seek and Next return the events appended from a position, in
// order, across segment rotations and while appends go on; AtEnd says when
// the reader has caught up.
func TestReaderFollowsAppends(t *testing.T) { forModes(t, testReaderFollowsAppends) }

func testReaderFollowsAppends(t *testing.T, mode Options) {
	dir := t.TempDir()
	mode.SegmentBytes = 64 << 10
	l, _, err := Open(dir, mode)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3000; i++ { // about three segments
		s, off, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 { // odd ones acknowledged: not replayed
			_ = l.Ack(1, func(int) (*Segment, uint32) { return s, off })
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l, n, err := OpenLog(dir, mode)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if n != 1500 {
		t.Fatalf("OpenLog found %d events, want 1500", n)
	}
	r := l.Reader()
	defer r.Close()
	var got []string
	for len(got) < n {
		recs, lost, err := r.Next(7, 1<<20) // small reads: positions must carry over
		if err != nil || lost != 0 || len(recs) == 0 {
			t.Fatalf("after %d: %d records, lost %d, %v", len(got), len(recs), lost, err)
		}
		for _, rec := range recs {
			if !rec.Old {
				t.Fatalf("%s not marked as found by Open", rec.Data)
			}
			got = append(got, string(rec.Data))
		}
	}
	var evens []string
	for i := 0; i < 3000; i += 2 {
		evens = append(evens, string(payload(i)))
	}
	if !slices.Equal(got, evens) {
		t.Fatalf("replayed %d events, not the unacknowledged ones in order", len(got))
	}

	// New appends, read from the first of them on while more are written.
	got = got[:0]
	for i := 3000; i < 6000; i++ {
		s, off, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 3000 {
			r.Seek(s, off)
		}
		if i%500 == 0 {
			recs, _, err := r.Next(10_000, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs {
				got = append(got, string(rec.Data))
			}
			if !r.AtEnd() {
				t.Fatalf("at %d: not at the end after reading everything written", i)
			}
		}
	}
	if r.AtEnd() {
		t.Fatal("at the end with 499 events unread")
	}
	recs, _, err := r.Next(10_000, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		got = append(got, string(rec.Data))
	}
	if !slices.Equal(got, want(3000, 6000)) || !r.AtEnd() {
		t.Fatalf("read %d of 3000 appended events in order (at end %v)", len(got), r.AtEnd())
	}
}
