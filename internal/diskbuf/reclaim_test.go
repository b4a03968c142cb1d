package diskbuf

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// ackRef names an appended event.
type ackRef struct {
	s   *Segment
	off uint32
}

// appendPayloads appends payload(0) … payload(n-1) to l and returns where
// each went, for ackAll.
func appendPayloads(t *testing.T, l *Log, n int) []ackRef {
	t.Helper()
	refs := make([]ackRef, 0, n)
	for i := range n {
		s, off, err := l.Append(payload(i))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ackRef{s, off})
	}
	return refs
}

func ackAll(t *testing.T, l *Log, refs []ackRef) {
	t.Helper()
	if err := l.Ack(len(refs), func(i int) (*Segment, uint32) { return refs[i].s, refs[i].off }); err != nil {
		t.Fatal(err)
	}
}

// TestReclaimTerminates drives the sequence that made reclaim spin: a
// backlog of many small segments (an outage), then acknowledgements in
// random order and batches, as consumers deliver it, with new events
// arriving meanwhile. Every Ack and Append must return promptly, and once
// everything is acknowledged the log must shrink to its active segment.
// It runs over segment sizes from 64 KiB to 4 MiB and backlogs up to 1 M
// events (fewer under the race detector, which slows every append).
func TestReclaimTerminates(t *testing.T) {
	cases := []struct {
		seg    int64
		events int
	}{{64 << 10, 100_000}, {64 << 10, 1_000_000}, {256 << 10, 300_000}, {1 << 20, 300_000}, {4 << 20, 1_000_000}}
	for _, c := range cases {
		if raceEnabled {
			c.events /= 10
		}
		t.Run(fmt.Sprintf("seg=%dKiB/events=%d", c.seg>>10, c.events), func(t *testing.T) {
			testReclaimTerminates(t, c.seg, c.events)
		})
	}
}

func testReclaimTerminates(t *testing.T, segBytes int64, n int) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{SegmentBytes: segBytes, MaxBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	p := []byte(`{"type":"track","messageId":"0123456789abcdef","event":"Outage"}`)
	refs := make([]ackRef, n)
	for i := range refs {
		s, off, err := l.Append(p)
		if err != nil {
			t.Fatal(err)
		}
		refs[i] = ackRef{s, off}
	}
	rng := rand.New(rand.NewPCG(uint64(segBytes), uint64(n)))
	rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
	done := make(chan struct{})
	var slowest time.Duration
	go func() {
		defer close(done)
		for from := 0; from < len(refs); from += 250 {
			// a new event between batches, acknowledged with the next one
			s, off, err := l.Append(p)
			if err != nil {
				t.Error(err)
				return
			}
			batch := append(refs[from:min(from+250, len(refs)):min(from+250, len(refs))], ackRef{s, off})
			start := time.Now()
			ackAll(t, l, batch)
			slowest = max(slowest, time.Since(start))
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		// l.Close would wait for the stuck Ack: left open
		t.Fatalf("acknowledging %d events in %d-byte segments has not finished after 20 s", n, segBytes)
	}
	t.Logf("slowest Ack %v", slowest)
	if slowest > time.Second {
		t.Errorf("slowest Ack took %v", slowest)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if segs := segFiles(t, dir); len(segs) != 0 {
		t.Fatalf("%d segments left after every event was acknowledged", len(segs))
	}
}

// TestCompaction: acknowledgements of many events outgrow the compaction
// threshold several times; the ack files are compacted in the background
// (few files, far fewer bytes than were written), and after a crash —
// with a compaction's temporary file left behind — a reopen replays
// exactly the events without an outcome.
func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{SegmentBytes: 64 << 10, MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60_000
	var kept []string
	var batch []ackRef
	for i := 0; i < n; i++ {
		p := payload(i)
		s, off, err := l.Append(p)
		if err != nil {
			t.Fatal(err)
		}
		if i%10_000 == 7 {
			kept = append(kept, string(p))
			continue
		}
		if batch = append(batch, ackRef{s, off}); len(batch) == 100 {
			ackAll(t, l, batch)
			batch = batch[:0]
		}
	}
	ackAll(t, l, batch)
	l.Reclaim()
	l.compactAt.Store(0) // compact now, whatever the ack files' growth
	l.Reclaim()
	acks, _ := filepath.Glob(filepath.Join(dir, "*"+ackSuffix))
	var ackBytes int64
	for _, p := range acks {
		fi, _ := os.Stat(p)
		ackBytes += fi.Size()
	}
	// what must stay: the acknowledgements of the segments still present
	// (at most 6 bytes each, one per event record)
	segs := len(segFiles(t, dir))
	need := int64(segs) * (64 << 10) / int64(headerSize+1+len(payload(0))) * 6
	if len(acks) != 2 || ackBytes > need+1024 || segs > len(kept)+1 {
		t.Fatalf("%d ack files, %d bytes (need at most %d), %d segments", len(acks), ackBytes, need, segs)
	}
	t.Logf("%d ack files, %d bytes; %d segments", len(acks), ackBytes, len(segFiles(t, dir)))
	kill(l)
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d%s%s", 1, ackSuffix, tmpSuffix)), []byte("half a compaction"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, st := reopen(t, dir)
	if !slices.Equal(got, kept) || st != (Stats{}) {
		t.Fatalf("replayed %d events (want %d), stats %+v", len(got), len(kept), st)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*"+tmpSuffix)); len(m) != 0 {
		t.Fatalf("left %v", m)
	}
}
