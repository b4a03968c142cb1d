package analytics

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	if !errors.Is(err, ErrShutdownInterrupted) || !strings.Contains(err.Error(), "3000 event(s) handed back (kept in the disk buffer)") {
		t.Fatalf("Close: %v", err)
	}
	if st := c1.Stats(); st.HandedBack != 3000 || st.OnDisk != 3000 || st.Spilled < 3000-100-50*DefaultConsumers {
		t.Errorf("after Close: %+v", st)
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

// TestDurableReplayReadsBackAsRoomAllows: New on a backlog of 50 000
// events (with OnSuccess registered, so messages are needed) holds no more
// of them in memory than QueueCapacity and the batches in flight allow,
// and decodes none up front: the rest stays on disk (Stats.OnDisk) until
// room frees.
func TestDurableReplayReadsBackAsRoomAllows(t *testing.T) {
	const backlog, capacity = 50_000, 1000
	dir := t.TempDir()
	c1 := newTestClient(t, newFakeAPI(sequence(reply{status: 503})), nil,
		WithDiskBuffer(dir), WithQueueCapacity(capacity))
	for i := range backlog {
		mustTrack(t, c1, fmt.Sprintf("a%05d", i))
	}
	_ = closeClient(t, c1, 20*time.Millisecond)

	t0 := time.Now()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	api := newFakeAPI(sequence(reply{hold: time.Hour}))
	cb := &callbacks{}
	c2 := newTestClient(t, api, cb, append(cb.options(), WithDiskBuffer(dir), WithQueueCapacity(capacity))...)
	// Until the server has answered a body of a batch's size, one consumer
	// holds a batch and the others take none (R69): the server never
	// answers here.
	held := DefaultFlushAt
	for c2.Stats().OnDisk > int64(backlog-capacity-held) && time.Since(t0) < 5*time.Second {
		time.Sleep(time.Millisecond) // until the consumer holds a batch and memory is full
	}
	time.Sleep(50 * time.Millisecond) // a reader that loads past its room would do so now
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	st := c2.Stats()
	if want := int64(backlog - capacity - held); st.OnDisk != want || st.Replayed != backlog {
		t.Errorf("after New: %d of %d replayed events on disk only, want %d", st.OnDisk, st.Replayed, want)
	}
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if grew > 8<<20 {
		t.Errorf("the heap grew by %d MiB with %d events in memory", grew>>20, capacity+held)
	}
	t.Logf("heap +%d KiB, %d events on disk only", grew>>10, st.OnDisk)
	_ = closeClient(t, c2, 20*time.Millisecond)
}

// TestDurableCloseLeavesUnreadOnDisk: Close's deadline leaves every event
// without an outcome on disk for the next client, without a callback,
// whether it was in memory (queued, in flight) or on disk only; its error
// and Stats.OnDisk count them all. The audit checks the rest: every
// accepted event handed back once, and the directory holding exactly the
// handed-back events, none of them in a callback.
func TestDurableCloseLeavesUnreadOnDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cb := &callbacks{}
		c := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), cb,
			append(cb.options(), WithDiskBuffer(t.TempDir()), WithQueueCapacity(10), WithFlushAt(5), WithConsumers(1))...)
		for i := range 100 {
			mustTrack(t, c, fmt.Sprintf("m%03d", i))
		}
		synctest.Wait() // one batch in flight, 10 in memory, the rest on disk only
		if st := c.Stats(); st.OnDisk != 85 {
			t.Fatalf("%d events on disk only before Close, want 85", st.OnDisk)
		}
		err := closeClient(t, c, 10*time.Millisecond)
		if !errors.Is(err, ErrShutdownInterrupted) || !strings.Contains(err.Error(), "100 event(s) handed back (kept in the disk buffer)") {
			t.Fatalf("Close: %v", err)
		}
		if errs := cb.errors(); len(errs) != 0 || c.Stats().OnDisk != 100 {
			t.Fatalf("%d hand-back callbacks, want none; %d left on disk, want 100", len(errs), c.Stats().OnDisk)
		}
	})
}

// TestDurableOverwrittenWhileReadingBack: a segment of this client's own
// overwritten on disk while its events wait there (another process wrote
// into the directory) never hangs Flush: the reader skips the rest of the
// segment, and the events it can no longer account for are failed
// (Stats.Failed, an error log line), so every accepted event still has one
// outcome.
func TestDurableOverwrittenWhileReadingBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		api := newFakeAPI(sequence(reply{hold: time.Second, status: 200}, reply{status: 200}))
		c := newTestClient(t, api, nil, WithDiskBuffer(dir), WithQueueCapacity(10), WithFlushAt(5), WithConsumers(1),
			noAudit("the test overwrites a segment: the directory keeps records no outcome accounts for"))
		for i := range 100 {
			mustTrack(t, c, fmt.Sprintf("m%03d", i))
		}
		synctest.Wait()
		segs := segments(t, dir)
		f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 64), 6000); err != nil { // past the events in memory
			t.Fatal(err)
		}
		f.Close()
		if err := flush(t, c, time.Minute); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		st := c.Stats()
		if st.Delivered+st.Failed != 100 || st.Failed == 0 || st.OnDisk != 0 || st.Pending != 0 {
			t.Fatalf("stats %+v", st)
		}
		t.Logf("delivered %d, failed %d", st.Delivered, st.Failed)
		_ = closeClient(t, c, time.Second)
	})
}

// TestDurableDefaultCapacity: with WithDiskBuffer and no WithQueueCapacity,
// memory holds DefaultDurableQueueCapacity events (the disk holds the
// rest, R70), where memory mode holds DefaultQueueCapacity; an explicit
// capacity is kept, before or after WithDiskBuffer. Against a server that
// never answers, with one consumer holding its batch in flight, exactly
// the events past the memory bound go to disk only.
func TestDurableDefaultCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(dir string) []Option
		want int
	}{
		{"default", func(dir string) []Option { return []Option{WithDiskBuffer(dir)} }, DefaultDurableQueueCapacity},
		{"explicit-after", func(dir string) []Option { return []Option{WithDiskBuffer(dir), WithQueueCapacity(12_000)} }, 12_000},
		{"explicit-before", func(dir string) []Option { return []Option{WithQueueCapacity(12_000), WithDiskBuffer(dir)} }, 12_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := append(tc.opts(t.TempDir()), WithConsumers(1), WithFlushAt(100))
				c := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil, opts...)
				require.Equal(t, tc.want, c.Config().QueueCapacity)
				const n = 20_000
				for i := range n {
					mustTrack(t, c, fmt.Sprintf("m%05d", i))
				}
				synctest.Wait() // one batch of 100 in flight, memory full, the rest on disk only
				s := c.Stats()
				assert.Zero(t, s.RejectedQueueFull)
				assert.EqualValues(t, n-100-tc.want, s.OnDisk, "events on disk only")
				_ = closeClient(t, c, 10*time.Millisecond)
			})
		})
	}
	c, err := New("wk", WithEndpoint("http://127.0.0.1:1"))
	require.NoError(t, err)
	auditLater(t, c, nil)
	assert.Equal(t, DefaultQueueCapacity, c.Config().QueueCapacity, "memory mode")
	require.NoError(t, closeClient(t, c, time.Second))
}
