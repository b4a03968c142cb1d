//go:build unix

package analytics

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// These tests have another process do to the disk buffer's directory what
// an operator's script or a second deploy might: cut, remove or replace a
// segment file, or open the directory with a second client. The child is
// this test binary run again (TestDurableTamperChild), as in the crash
// test.
const tamperEnv = "ANALYTICS_TAMPER" // op=path

// TestDurableTamperChild is the child: it does op to path and prints what
// happened.
func TestDurableTamperChild(t *testing.T) {
	op, path, ok := strings.Cut(os.Getenv(tamperEnv), "=")
	if !ok {
		t.Skip("run by the tamper tests")
	}
	var err error
	switch op {
	case "truncate":
		err = os.Truncate(path, 0)
	case "cut":
		var fi os.FileInfo
		if fi, err = os.Stat(path); err == nil {
			err = os.Truncate(path, fi.Size()/2+3)
		}
	case "remove":
		err = os.Remove(path)
	case "symlink", "fifo", "dir":
		if err = os.Remove(path); err == nil {
			switch op {
			case "symlink":
				err = os.Symlink("/dev/zero", path)
			case "fifo":
				err = syscall.Mkfifo(path, 0o600)
			default:
				err = os.Mkdir(path, 0o700)
			}
		}
	case "open":
		// A second deploy: the lock file (if any) deleted, then a client.
		os.Remove(filepath.Join(path, "lock"))
		c, err := New("wk", WithEndpoint("http://127.0.0.1:1"), WithDiskBuffer(path))
		if err != nil {
			fmt.Printf("REFUSED locked=%v: %v\n", errors.Is(err, ErrDiskBufferLocked), err)
			return
		}
		fmt.Println("OPENED")
		_ = c.Track(track("second"))
		_ = closeClient(t, c, 10*time.Millisecond)
		return
	default:
		err = fmt.Errorf("unknown op %q", op)
	}
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("DONE")
}

// tamper runs the child doing op to path and returns its output.
func tamper(t *testing.T, op, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableTamperChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), tamperEnv+"="+op+"="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %s %s: %v\n%s", op, path, err, out)
	}
	return string(out)
}

// gate holds every request until open is called (or the request's
// context ends), then lets it through to api.
type gate struct {
	api  *fakeAPI
	ch   chan struct{}
	once sync.Once
}

func newGate(t *testing.T, api *fakeAPI) *gate {
	g := &gate{api: api, ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case <-g.ch:
		return g.api.RoundTrip(req)
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

// trackAll tracks n events named prefix%04d and returns the ids accepted;
// an error must be a *DiskError.
func trackAll(t *testing.T, c *Client, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s%04d", prefix, i)
		err := c.Track(track(id))
		var de *DiskError
		switch {
		case err == nil:
			ids = append(ids, id)
		case !errors.As(err, &de):
			t.Fatalf("Track(%s): %v", id, err)
		}
	}
	return ids
}

// checkDelivered asserts that every id reached the API at most once, that
// nothing else did, and returns how many of ids did.
func checkDelivered(t *testing.T, api *fakeAPI, ids []string) (map[string]bool, int) {
	t.Helper()
	accepted := map[string]bool{}
	for _, id := range ids {
		accepted[id] = true
	}
	got := map[string]bool{}
	for _, id := range sentIDs(api) {
		if got[id] || !accepted[id] {
			t.Fatalf("%s delivered twice, or never accepted", id)
		}
		got[id] = true
	}
	return got, len(got)
}

// TestDurableActiveSegmentCutByAnotherProcess: another process truncates
// (or removes) the active segment while the client writes into it, events
// on disk only in it. The process lives (a store into the mapping past the
// cut would fault): one enqueue call gets a *DiskError, the next ones go
// to a new segment (a removed file is noticed by the reader or at the next
// fsync). Once the server answers, Flush completes; the events that were
// on disk only in the lost file are failed and counted (Stats.DiskLost,
// one error line naming their number), every other accepted event is
// delivered once, and the next client finds nothing to replay or report.
func TestDurableActiveSegmentCutByAnotherProcess(t *testing.T) {
	for _, how := range []string{"truncate", "remove"} {
		t.Run(how, func(t *testing.T) { testActiveSegmentCut(t, how) })
	}
}

func testActiveSegmentCut(t *testing.T, how string) {
	dir := t.TempDir()
	api := newFakeAPI(nil)
	g := newGate(t, api)
	core, logs := observer.New(zapcore.ErrorLevel)
	c := newTestClient(t, g, nil, WithDiskBuffer(dir), WithQueueCapacity(10), WithFlushAt(5), WithConsumers(1),
		WithLogger(zap.New(core)))
	ids := trackAll(t, c, "a", 300)
	segs := segments(t, dir)
	if out := tamper(t, how, segs[len(segs)-1]); !strings.Contains(out, "DONE") {
		t.Fatalf("child: %s", out)
	}
	after := trackAll(t, c, "b", 300)
	if len(after) < 299 {
		t.Fatalf("%d of 300 enqueue calls after the cut accepted", len(after))
	}
	ids = append(ids, after...)
	g.open()
	if err := flush(t, c, 10*time.Second); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	got, n := checkDelivered(t, api, ids)
	st := c.Stats()
	for _, id := range after {
		if how == "truncate" && !got[id] {
			// (an unlinked file takes appends until it is noticed)
			t.Fatalf("%s, accepted after the cut, was not delivered", id)
		}
	}
	// A removed file stays readable through the reader's open descriptor:
	// then nothing is lost.
	if (how == "truncate" && st.DiskLost == 0) || st.Failed != st.DiskLost || int64(n)+st.DiskLost != int64(len(ids)) {
		t.Fatalf("delivered %d of %d accepted; stats %+v", n, len(ids), st)
	}
	if k := logs.FilterMessageSnippet(fmt.Sprintf("%d event(s) in it lost", st.DiskLost)).Len(); st.DiskLost > 0 && k != 1 {
		t.Fatalf("%d error lines naming the %d lost events: %v", k, st.DiskLost, logs.All())
	}
	t.Logf("%d delivered, %d lost", n, st.DiskLost)
	if err := closeClient(t, c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	api2 := newFakeAPI(nil)
	c2 := newTestClient(t, api2, nil, WithDiskBuffer(dir))
	if err := closeClient(t, c2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := c2.Stats(); st.Replayed != 0 || st.DiskMissing != 0 || len(sentIDs(api2)) != 0 {
		t.Fatalf("next client: stats %+v, sent %d", st, len(sentIDs(api2)))
	}
}

// TestDurableSealedSegmentDamagedByAnotherProcess: a sealed segment
// holding events on disk only is cut in the middle of a record, removed,
// or replaced by a symbolic link, a FIFO or a directory, by another
// process. Once the server answers, Flush completes within its deadline
// (the reader neither spins nor stalls): the events gone are failed and
// counted once, with one error line naming their number, and every other
// accepted event is delivered once, the last one included.
func TestDurableSealedSegmentDamagedByAnotherProcess(t *testing.T) {
	for _, how := range []string{"cut", "remove", "symlink", "fifo", "dir"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			api := newFakeAPI(nil)
			g := newGate(t, api)
			core, logs := observer.New(zapcore.ErrorLevel)
			c := newTestClient(t, g, nil, WithDiskBuffer(dir, WithSegmentSize(64<<10)), WithQueueCapacity(10), WithFlushAt(5),
				WithConsumers(1), WithLogger(zap.New(core)))
			ids := trackAll(t, c, "m", 2000)
			segs := segments(t, dir)
			if len(segs) < 4 || len(ids) != 2000 {
				t.Fatalf("%d segments, %d accepted", len(segs), len(ids))
			}
			data, _ := os.ReadFile(segs[2])
			inIt := strings.Count(string(data), `"messageId"`)
			if out := tamper(t, how, segs[2]); !strings.Contains(out, "DONE") {
				t.Fatalf("child: %s", out)
			}
			g.open()
			start := time.Now()
			if err := flush(t, c, 10*time.Second); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			t.Logf("Flush took %v", time.Since(start))
			got, n := checkDelivered(t, api, ids)
			st := c.Stats()
			if !got[ids[len(ids)-1]] || st.DiskLost == 0 || st.DiskLost > int64(inIt) || (how != "cut" && st.DiskLost != int64(inIt)) ||
				st.Failed != st.DiskLost || int64(n)+st.DiskLost != 2000 {
				t.Fatalf("delivered %d (the last: %v), %d events in the segment; stats %+v", n, got[ids[len(ids)-1]], inIt, st)
			}
			if k := logs.FilterMessageSnippet(fmt.Sprintf("%d event(s) in it lost", st.DiskLost)).Len(); k != 1 || logs.Len() != 1 {
				t.Fatalf("%d error lines naming the %d lost events: %v", k, st.DiskLost, logs.All())
			}
		})
	}
}

// TestDurableCloseKeepsOnlyWhatIsOnDisk: a sealed segment holding events
// on disk only is removed by another process while the server is down;
// Close's deadline hands back the rest. Close counts as kept only the
// events still on disk; those in the removed segment are failed and
// counted (Stats.DiskLost) by this client, and the next client sends
// exactly the kept ones and reports no loss again.
func TestDurableCloseKeepsOnlyWhatIsOnDisk(t *testing.T) {
	dir := t.TempDir()
	g := newGate(t, newFakeAPI(nil))
	c := newTestClient(t, g, nil, WithDiskBuffer(dir, WithSegmentSize(64<<10)), WithQueueCapacity(10), WithFlushAt(5), WithConsumers(1))
	ids := trackAll(t, c, "m", 2000)
	segs := segments(t, dir)
	data, _ := os.ReadFile(segs[2])
	inIt := strings.Count(string(data), `"messageId"`)
	if out := tamper(t, "remove", segs[2]); !strings.Contains(out, "DONE") {
		t.Fatalf("child: %s", out)
	}
	err := closeClient(t, c, 50*time.Millisecond)
	kept := len(ids) - inIt
	if !errors.Is(err, ErrShutdownInterrupted) || !strings.Contains(err.Error(), fmt.Sprintf("%d event(s) handed back", kept)) {
		t.Fatalf("Close: %v; want %d kept", err, kept)
	}
	if st := c.Stats(); st.DiskLost != int64(inIt) || st.HandedBack != int64(kept) || st.Failed != int64(inIt) {
		t.Fatalf("stats %+v, %d events were in the removed segment", st, inIt)
	}
	api2 := newFakeAPI(nil)
	c2 := newTestClient(t, api2, nil, WithDiskBuffer(dir, WithSegmentSize(64<<10)))
	if err := closeClient(t, c2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, n := checkDelivered(t, api2, ids); n != kept || c2.Stats().DiskMissing != 0 {
		t.Fatalf("next client sent %d, want %d; stats %+v", n, kept, c2.Stats())
	}
}

// TestDurableSecondClientRefused: another process deletes the lock file
// (where there is one) and opens the directory with a client of its own:
// it is refused with ErrDiskBufferLocked and changes nothing in the
// directory; the first client goes on delivering every event.
func TestDurableSecondClientRefused(t *testing.T) {
	dir := t.TempDir()
	api := newFakeAPI(nil)
	g := newGate(t, api)
	c := newTestClient(t, g, nil, WithDiskBuffer(dir), WithQueueCapacity(10), WithFlushAt(5), WithConsumers(1))
	ids := trackAll(t, c, "a", 500)
	before := listing(t, dir)
	if out := tamper(t, "open", dir); !strings.Contains(out, "REFUSED locked=true") {
		t.Fatalf("second client: %s", out)
	}
	if after := listing(t, dir); after != before {
		t.Fatalf("the refused client changed the directory:\n%s\n%s", before, after)
	}
	ids = append(ids, trackAll(t, c, "b", 500)...)
	g.open()
	if err := closeClient(t, c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, n := checkDelivered(t, api, ids); n != 1000 || len(ids) != 1000 {
		t.Fatalf("delivered %d of %d accepted", n, len(ids))
	}
}

// listing names every entry of dir with its size and modification time.
func listing(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %v\n", e.Name(), fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}

// readOnly makes dir refuse the creation and deletion of files until the
// returned func runs: chmod for a user, the immutable attribute for root
// (which file modes do not stop). It skips the test when neither works.
func readOnly(t *testing.T, dir string) (restore func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		restore = func() { _ = os.Chmod(dir, 0o700) }
	} else {
		if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
			t.Skipf("cannot make the directory read-only as root (chattr +i): %v %s", err, out)
		}
		restore = func() { _ = exec.Command("chattr", "-i", dir).Run() }
	}
	t.Cleanup(restore)
	if f, err := os.Create(filepath.Join(dir, "probe")); err == nil {
		f.Close()
		os.Remove(filepath.Join(dir, "probe"))
		restore()
		t.Skip("the directory still takes new files")
	}
	return restore
}

// TestDurableReadOnlySpell: the directory is read-only for a while, during
// which delivered events' segments cannot be deleted. They stay in the
// client's bookkeeping (and their acknowledgements with them) and are
// deleted once the directory is writable again, so the next client sends
// nothing twice and reports nothing missing.
func TestDurableReadOnlySpell(t *testing.T) {
	dir := t.TempDir()
	api := newFakeAPI(nil)
	g := newGate(t, api)
	core, logs := observer.New(zapcore.ErrorLevel)
	c := newTestClient(t, g, nil, WithDiskBuffer(dir, WithSegmentSize(64<<10)), WithLogger(zap.New(core)))
	ids := trackAll(t, c, "m", 1000)
	if n := len(segments(t, dir)); n < 3 || len(ids) != 1000 {
		t.Fatalf("%d segments, %d accepted", n, len(ids))
	}
	restore := readOnly(t, dir)
	g.open()
	if err := flush(t, c, 10*time.Second); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	restore()
	if err := closeClient(t, c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, n := checkDelivered(t, api, ids); n != 1000 {
		t.Fatalf("delivered %d of 1000", n)
	}
	api2 := newFakeAPI(nil)
	c2 := newTestClient(t, api2, nil, WithDiskBuffer(dir, WithSegmentSize(64<<10)), WithLogger(zap.New(core)))
	if err := closeClient(t, c2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if sent := len(sentIDs(api2)); sent != 0 || c2.Stats().DiskMissing != 0 || logs.Len() != 0 {
		t.Fatalf("next client sent %d again; stats %+v; errors %v", sent, c2.Stats(), logs.All())
	}
}
