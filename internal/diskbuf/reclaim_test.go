package diskbuf

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// ackRef names an appended event.
type ackRef struct {
	s   *Segment
	off uint32
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
