package analytics

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestDurableCatchUp: a backlog left on disk is read back while new events
// arrive with memory full; every event reaches the server once, in
// acceptance order, and nothing is left on disk afterwards.
func TestDurableCatchUp(t *testing.T) {
	dir := t.TempDir()
	c1 := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil,
		WithDiskBuffer(dir, WithSegmentSize(64<<10)), WithQueueCapacity(100), WithFlushAt(50))
	var want []string
	for i := range 3000 {
		id := fmt.Sprintf("a%04d", i)
		mustTrack(t, c1, id)
		want = append(want, id)
	}
	err := closeClient(t, c1, 20*time.Millisecond)
	if !errors.Is(err, ErrShutdownInterrupted) || !strings.Contains(err.Error(), "never left it") {
		t.Fatalf("Close: %v", err)
	}
	if st := c1.Stats(); st.HandedBack != 3000 || st.OnDisk < 3000-100-50*DefaultConsumers || st.Spilled < st.OnDisk {
		t.Fatalf("after Close: %+v", st)
	}

	api := newFakeAPI(nil)
	c2 := newTestClient(t, api, nil, WithDiskBuffer(dir, WithSegmentSize(64<<10)), WithQueueCapacity(100), WithFlushAt(50), WithConsumers(1))
	for i := range 3000 {
		id := fmt.Sprintf("b%04d", i)
		mustTrack(t, c2, id)
		want = append(want, id)
	}
	if err := closeClient(t, c2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := sentIDs(api)
	if len(got) != len(want) {
		t.Fatalf("%d events sent, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("event %d sent is %s, want %s (FIFO)", i, got[i], want[i])
		}
	}
	if segs := segments(t, dir); len(segs) != 0 {
		t.Fatalf("%d segment(s) left", len(segs))
	}
}
