package analytics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func segments(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// sentIDs are the messageIds that reached the fake API, in order.
func sentIDs(api *fakeAPI) []string {
	var ids []string
	for _, r := range api.requests() {
		ids = append(ids, r.ids...)
	}
	return ids
}

// TestDurableReplay: events handed back by Close stay on disk without a
// callback (the error says so) and the next client on the directory sends them first, with the
// same messageIds, to callbacks as typed messages; then the space is gone.
func TestDurableReplay(t *testing.T) {
	dir := t.TempDir()
	var cb1 callbacks
	c1 := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), &cb1, WithDiskBuffer(dir), WithFlushAt(2))
	ids := []string{"a1", "a2", "a3", "a4", "a5"}
	for _, id := range ids {
		mustTrack(t, c1, id)
	}
	if err := c1.Identify(Identify{MessageID: "a6", UserID: "u9", Traits: Traits{"plan": "pro"}}); err != nil {
		t.Fatal(err)
	}
	err := closeClient(t, c1, 50*time.Millisecond)
	if !errors.Is(err, ErrShutdownInterrupted) || !strings.Contains(err.Error(), "6 event(s) handed back (kept in the disk buffer)") {
		t.Fatalf("Close: %v", err)
	}
	// Kept on disk, they are not undelivered: no callback (the next client's
	// is theirs), counted in Stats.OnDisk and HandedBack.
	if errs := cb1.errors(); len(errs) != 0 {
		t.Fatalf("kept events reached OnError: %v", errs[0].err)
	}
	if st := c1.Stats(); st.OnDisk != 6 || st.HandedBack != 6 {
		t.Fatalf("stats after Close: OnDisk %d, HandedBack %d, want 6 and 6", st.OnDisk, st.HandedBack)
	}

	api := newFakeAPI(nil)
	var cb2 callbacks
	c2 := newTestClient(t, api, &cb2, WithDiskBuffer(dir), WithFlushAt(100))
	// Flush covers the replayed events
	if err := flush(t, c2, 5*time.Second); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got, want := sentIDs(api), append(ids, "a6"); !slices.Equal(got, want) || len(cb2.delivered()) != 6 {
		t.Fatalf("after Flush: sent %v, want %v; OnSuccess got %v", got, want, cb2.delivered())
	}
	mustTrack(t, c2, "b1")
	if err := closeClient(t, c2, 5*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got, want := sentIDs(api), append(append(ids, "a6"), "b1"); !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	if got := cb2.delivered(); len(got) != 7 {
		t.Fatalf("OnSuccess got %v", got)
	}
	cb2.mu.Lock()
	first, sixth := cb2.successes[0][0], cb2.successes[0][5]
	cb2.mu.Unlock()
	tr, ok := first.(Track)
	if !ok || tr.MessageID != "a1" || tr.UserID != "u1" || tr.Event != "Tested" || tr.Properties["n"] != 1 || tr.Timestamp.IsZero() {
		t.Fatalf("replayed message %#v", first)
	}
	if id, ok := sixth.(Identify); !ok || id.UserID != "u9" || id.Traits["plan"] != "pro" {
		t.Fatalf("replayed message %#v", sixth)
	}
	if st := c2.Stats(); st.Replayed != 6 || st.Delivered != 7 {
		t.Fatalf("stats %+v", st)
	}
	if segs := segments(t, dir); len(segs) != 0 {
		t.Fatalf("segments left after every event was delivered: %v", segs)
	}
}

// TestDurableFailedNotReplayed: failed and delivered events are acknowledged;
// a later client sends nothing again.
func TestDurableFailedNotReplayed(t *testing.T) {
	dir := t.TempDir()
	api := newFakeAPI(func(n int, r seen) reply {
		if slices.Contains(r.ids, "bad") {
			return reply{status: 400}
		}
		return reply{status: 200}
	})
	c1 := newTestClient(t, api, nil, WithDiskBuffer(dir), WithFlushAt(1))
	mustTrack(t, c1, "good")
	mustTrack(t, c1, "bad")
	if err := closeClient(t, c1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := c1.Stats(); st.Delivered != 1 || st.Failed != 1 {
		t.Fatalf("stats %+v", st)
	}
	api2 := newFakeAPI(nil)
	c2 := newTestClient(t, api2, nil, WithDiskBuffer(dir))
	if err := closeClient(t, c2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if len(api2.requests()) != 0 || c2.Stats().Replayed != 0 {
		t.Fatalf("second client sent %v", sentIDs(api2))
	}
}

func TestDurableLock(t *testing.T) {
	dir := t.TempDir()
	c1 := newTestClient(t, newFakeAPI(nil), nil, WithDiskBuffer(dir))
	_, err := New("wk", WithEndpoint("http://api.test"), WithDiskBuffer(dir))
	if !errors.Is(err, ErrDiskBufferLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second New on the same dir: %v", err)
	}
	if err := closeClient(t, c1, time.Second); err != nil {
		t.Fatal(err)
	}
	c2 := newTestClient(t, newFakeAPI(nil), nil, WithDiskBuffer(dir))
	if err := closeClient(t, c2, time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestDurableSizeLimit: past the disk limit enqueue returns ErrQueueFull
// (counted as dropped); nothing that was accepted is lost.
func TestDurableSizeLimit(t *testing.T) {
	dir := t.TempDir()
	c := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil,
		WithDiskBuffer(dir, WithSegmentSize(64<<10), WithDiskLimit(128<<10)))
	accepted := 0
	var err error
	for accepted < 10_000 {
		if err = c.Track(track(fmt.Sprintf("m%05d", accepted))); err != nil {
			break
		}
		accepted++
	}
	if !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "disk buffer") {
		t.Fatalf("after %d events: %v", accepted, err)
	}
	var size int64
	for _, s := range segments(t, dir) {
		fi, _ := os.Stat(s)
		size += fi.Size()
	}
	if size > 128<<10 || accepted < 100 {
		t.Fatalf("%d events accepted, %d bytes on disk (limit %d)", accepted, size, 128<<10)
	}
	if c.Stats().RejectedQueueFull != 1 {
		t.Fatalf("dropped %d", c.Stats().RejectedQueueFull)
	}
	_ = closeClient(t, c, 20*time.Millisecond)
	api := newFakeAPI(nil)
	c2 := newTestClient(t, api, nil, WithDiskBuffer(dir))
	if err := closeClient(t, c2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := len(sentIDs(api)); got != accepted {
		t.Fatalf("replayed %d of %d accepted", got, accepted)
	}
}

// TestDurableTornAndCorrupt: a torn last record and a corrupt one in the
// middle are skipped and counted; everything else is delivered.
func TestDurableTornAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	c1 := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil, WithDiskBuffer(dir))
	for i := 0; i < 10; i++ {
		mustTrack(t, c1, fmt.Sprintf("m%d", i))
	}
	_ = closeClient(t, c1, 20*time.Millisecond)
	segs := segments(t, dir)
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	data, _ := os.ReadFile(segs[0])
	data = data[:len(data)-7] // the last record is cut short
	i := strings.Index(string(data), `"m4"`)
	data[i+1] = 'X' // m4's payload no longer matches its checksum
	if err := os.WriteFile(segs[0], data, 0o600); err != nil {
		t.Fatal(err)
	}
	api := newFakeAPI(nil)
	core, logs := observer.New(zapcore.WarnLevel)
	c2 := newTestClient(t, api, nil, WithDiskBuffer(dir), WithLogger(zap.New(core)))
	if err := closeClient(t, c2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got, want := sentIDs(api), []string{"m0", "m1", "m2", "m3", "m5", "m6", "m7", "m8"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	if st := c2.Stats(); st.DiskTorn != 1 || st.DiskCorrupt != 1 {
		t.Fatalf("stats %+v", st)
	}
	var torn, corrupt int
	for _, e := range logs.All() {
		torn += strings.Count(e.Message, "torn record")
		corrupt += strings.Count(e.Message, "corrupt bytes")
		if strings.Contains(e.Message, "Tested") || strings.Contains(e.Message, `"m`) {
			t.Errorf("a log line shows a payload: %q", e.Message)
		}
	}
	if torn != 1 || corrupt != 1 {
		t.Fatalf("log lines: %d torn, %d corrupt; want 1 each", torn, corrupt)
	}
}

// TestDurableDiskErrors: the directory cannot be used. Tests run as root
// here, so permissions cannot make a directory read-only; instead a regular
// file stands where the directory should be — at New, and, after New, in
// place of the directory when the log needs its next segment (found
// replaced: ErrDiskBufferGone).
func TestDurableDiskErrors(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New("wk", WithEndpoint("http://api.test"), WithDiskBuffer(file))
	var de *DiskError
	if !errors.As(err, &de) || de.Op != "open" || !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("New on a file: %v", err)
	}

	dir := filepath.Join(base, "buf")
	c := newTestClient(t, newFakeAPI(sequence(reply{hold: time.Hour})), nil,
		WithDiskBuffer(dir, WithSegmentSize(64<<10)))
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	start := time.Now()
	for ; accepted < 10_000; accepted++ {
		if err = c.Track(track(fmt.Sprintf("m%05d", accepted))); err != nil {
			break
		}
	}
	if !errors.As(err, &de) || de.Op != "append" || !errors.Is(err, ErrDiskBufferGone) || accepted < 100 {
		t.Fatalf("after %d events: %v", accepted, err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("enqueue calls took %v", time.Since(start))
	}
	if st := c.Stats(); st.RejectedDisk != 1 || st.Accepted != int64(accepted) {
		t.Fatalf("stats %+v, want 1 RejectedDisk and %d Accepted", st, accepted)
	}
	_ = closeClient(t, c, 20*time.Millisecond)
	// what was accepted is in the moved directory
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+".moved", dir); err != nil {
		t.Fatal(err)
	}
	api := newFakeAPI(nil)
	c2 := newTestClient(t, api, nil, WithDiskBuffer(dir))
	if err := closeClient(t, c2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := len(sentIDs(api)); got != accepted {
		t.Fatalf("replayed %d of %d accepted", got, accepted)
	}
}

func TestDurableOptions(t *testing.T) {
	for _, o := range []Option{
		WithDiskBuffer(""),
		WithDiskBuffer("x", WithFsync(FsyncPolicy(9))),
		WithDiskBuffer("x", WithFsyncInterval(0)),
		WithDiskBuffer("x", WithSegmentSize(10)),
		WithDiskBuffer("x", WithDiskLimit(1<<10)),
		WithDiskBuffer("x", nil),
	} {
		var ce *ConfigError
		if _, err := New("wk", o); !errors.As(err, &ce) {
			t.Errorf("New: %v, want a *ConfigError", err)
		}
	}
}

// TestDurableFsyncEveryBatch: with FsyncEveryBatch the log is synced
// before each batch is sent.
func TestDurableFsyncEveryBatch(t *testing.T) {
	dir := t.TempDir()
	var syncs, sentAtSync []int
	api := newFakeAPI(nil)
	s := WithDiskBuffer(dir, WithFsync(FsyncEveryBatch))
	hook := optionFunc(func(st *settings) {
		st.disk.syncObserver = func() { sentAtSync = append(sentAtSync, len(api.requests())); syncs = append(syncs, 1) }
	})
	c := newTestClient(t, api, nil, s, hook, WithFlushAt(2), WithConsumers(1))
	for i := 0; i < 6; i++ {
		mustTrack(t, c, fmt.Sprintf("m%d", i))
	}
	if err := closeClient(t, c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if len(api.requests()) != 3 || !slices.Equal(sentAtSync, []int{0, 1, 2}) {
		t.Fatalf("%d requests; requests sent at each sync: %v", len(api.requests()), sentAtSync)
	}
}

// gateTransport holds every request until release is closed, and reports
// each arrival on arrived.
type gateTransport struct {
	arrived chan struct{}
	release chan struct{}
}

func (g gateTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	g.arrived <- struct{}{}
	select {
	case <-g.release:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestDurableEnqueueContextWaits: in durable mode a full memory makes
// neither Track nor EnqueueContext fail or wait (the event goes to disk
// only); at the disk limit Track returns ErrQueueFull and EnqueueContext
// waits until delivered events free a segment.
func TestDurableEnqueueContextWaits(t *testing.T) {
	g := gateTransport{arrived: make(chan struct{}, 1000), release: make(chan struct{})}
	c := newTestClient(t, g, nil, WithDiskBuffer(t.TempDir(), WithSegmentSize(64<<10), WithDiskLimit(128<<10)),
		WithQueueCapacity(1), WithFlushAt(1), WithConsumers(1))
	mustTrack(t, c, "e1")
	<-g.arrived // e1 is in flight, held
	mustTrack(t, c, "e2")
	accepted := 2
	var err error
	for ; accepted < 10_000; accepted++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		err = c.EnqueueContext(ctx, track(fmt.Sprintf("m%05d", accepted))) // the disk has room: never waits
		cancel()
		if err != nil {
			break
		}
	}
	if !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "size limit") || accepted < 100 {
		t.Fatalf("after %d events: %v", accepted, err)
	}
	if err := c.Track(track("full")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Track at the disk limit: %v", err)
	}
	if b := c.Stats().DiskBytes; b <= 64<<10 || b > 128<<10 {
		t.Fatalf("Stats.DiskBytes %d at the limit of %d", b, 128<<10)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- c.EnqueueContext(ctx, track("last"))
	}()
	select {
	case err := <-done:
		t.Fatalf("EnqueueContext at the disk limit returned before any room was freed: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(g.release) // room comes only when segments are delivered
	if err := <-done; err != nil {
		t.Fatalf("EnqueueContext: %v", err)
	}
	if err := closeClient(t, c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Delivered != int64(accepted+1) || st.RejectedQueueFull != 2 || st.Spilled < int64(accepted-3) {
		t.Fatalf("accepted %d, stats %+v", accepted+1, st)
	}
}

// TestDurableFsyncInterval: the default policy syncs once per interval,
// on its own goroutine, and stops at Close (goleak checks the goroutine).
func TestDurableFsyncInterval(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		var syncs atomic.Int32
		hook := optionFunc(func(s *settings) { s.disk.syncObserver = func() { syncs.Add(1) } })
		c := newTestClient(t, newFakeAPI(nil), nil, WithDiskBuffer(dir, WithFsyncInterval(2*time.Second)), hook)
		mustTrack(t, c, "e1")
		time.Sleep(7 * time.Second)
		synctest.Wait()
		if n := syncs.Load(); n != 3 {
			t.Errorf("%d syncs in 7 s at 2 s intervals, want 3", n)
		}
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
