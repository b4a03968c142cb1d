//go:build unix

package analytics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestDurableUnsafeDir: New refuses a directory that others can write to
// with a *DiskError that says why, and writes nothing there.
func TestDurableUnsafeDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := New("wk", WithEndpoint("http://api.test"), WithDiskBuffer(dir))
	var de *DiskError
	if !errors.As(err, &de) || de.Op != "open" || !strings.Contains(err.Error(), "mode 0777, writable by group or others") {
		t.Fatalf("New: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("New wrote %d entries into the refused directory", len(entries))
	}
}

// TestDurableMissingSegment: a middle segment deleted by hand loses its
// events; the next client counts it in Stats.DiskMissing and logs one
// error line, and delivers the rest.
func TestDurableMissingSegment(t *testing.T) {
	dir := t.TempDir()
	c1 := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil, WithDiskBuffer(dir, WithSegmentSize(64<<10)))
	for i := 0; i < 1000; i++ {
		mustTrack(t, c1, fmt.Sprintf("m%04d", i))
	}
	_ = closeClient(t, c1, 20*time.Millisecond)
	segs := segments(t, dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	data, _ := os.ReadFile(segs[1])
	lost := strings.Count(string(data), `"messageId"`)
	if err := os.Remove(segs[1]); err != nil {
		t.Fatal(err)
	}
	api := newFakeAPI(nil)
	core, logs := observer.New(zapcore.ErrorLevel)
	c2 := newTestClient(t, api, nil, WithDiskBuffer(dir, WithSegmentSize(64<<10)), WithLogger(zap.New(core)))
	if err := closeClient(t, c2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := len(sentIDs(api)); got != 1000-lost || lost == 0 {
		t.Fatalf("sent %d, want %d", got, 1000-lost)
	}
	if st := c2.Stats(); st.DiskMissing != 1 || st.DiskTorn+st.DiskCorrupt+st.DiskSkipped != 0 {
		t.Fatalf("stats %+v", st)
	}
	if n := logs.FilterMessageSnippet("missing from the directory").Len(); n != 1 || logs.Len() != 1 {
		t.Fatalf("%d error lines, %d about the missing segment", logs.Len(), n)
	}
}

// TestDurableDirRemoved: the directory removed while the client runs is
// noticed at the next fsync tick; from then on enqueue calls return a
// *DiskError whose cause is ErrDiskBufferGone, logged once.
func TestDurableDirRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "buf")
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.ErrorLevel)
		c := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil, WithDiskBuffer(dir), WithLogger(zap.New(core)),
			noAudit("the directory is removed under the client: its kept event goes with it"))
		mustTrack(t, c, "e1")
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultFsyncInterval)
		synctest.Wait()
		err := c.Track(track("e2"))
		var de *DiskError
		if !errors.As(err, &de) || de.Op != "append" || !errors.Is(err, ErrDiskBufferGone) {
			t.Fatalf("Track after the directory was removed: %v", err)
		}
		if n := logs.FilterMessageSnippet("was removed or replaced").Len(); n != 1 {
			t.Errorf("%d log lines about the removed directory, want 1", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_ = c.Close(ctx)
		if st := c.Stats(); st.RejectedDisk != 1 || st.Accepted != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}
