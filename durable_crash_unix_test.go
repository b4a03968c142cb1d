//go:build unix

package analytics

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The crash test runs this file's child in a process of its own, kills it
// with SIGKILL and checks that a new client on the same directory delivers
// every event whose enqueue call had returned nil.
const crashChildEnv = "ANALYTICS_CRASH_CHILD_DIR"

// The child's QueueCapacity and endpoint, when set (see TestDurableCrash).
const (
	crashChildCapEnv   = "ANALYTICS_CRASH_CHILD_CAPACITY"
	crashChildURLEnv   = "ANALYTICS_CRASH_CHILD_URL"
	crashChildCloseEnv = "ANALYTICS_CRASH_CHILD_CLOSE_AFTER" // stop tracking and Close after this long
)

// TestDurableCrashChild is the child: it tracks events as fast as it can
// into a durable client whose server is down, printing each messageId once
// its Track returned nil (one write per line, so a line on the pipe means
// the call had returned). It runs until it is killed.
func TestDurableCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestDurableCrash")
	}
	endpoint, capacity := "http://127.0.0.1:1", MaxQueueCapacity
	if u := os.Getenv(crashChildURLEnv); u != "" {
		endpoint = u // the reader catches up with a backlog while the server answers
	}
	if n, err := strconv.Atoi(os.Getenv(crashChildCapEnv)); err == nil {
		capacity = n // small: most events are on disk only when the kill comes
	}
	c, err := New("wk", WithEndpoint(endpoint), WithDiskBuffer(dir),
		WithQueueCapacity(capacity), WithMaxRetries(1000))
	if err != nil {
		fmt.Println("NEW", err)
		os.Exit(3)
	}
	pid := "p" + strconv.Itoa(os.Getpid()) // two children on one directory: ids of their own
	var stop atomic.Bool
	if d, err := time.ParseDuration(os.Getenv(crashChildCloseEnv)); err == nil {
		time.AfterFunc(d, func() { stop.Store(true) })
	}
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 64)
			for i := 0; !stop.Load(); i++ {
				id := pid + "g" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				if c.Track(Track{MessageID: id, UserID: "u1", Event: "Crash Tested", Properties: Properties{"i": i}}) == nil {
					buf = append(append(buf[:0], id...), '\n')
					if _, err := os.Stdout.Write(buf); err != nil {
						os.Exit(4)
					}
				}
			}
		}()
	}
	wg.Wait()
	// Close (the kill comes during it, or after it returned)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.Close(ctx)
	time.Sleep(time.Hour) // until the kill
}

// TestDurableCrash kills the child at seeded random moments (20 by default,
// ANALYTICS_CRASH_MOMENTS to change, ANALYTICS_CRASH_SEED to repeat a run).
// The moments take turns among four kinds: a child with room in memory
// for every event (the server is down); a child with QueueCapacity 1 000,
// so most events are on disk only when it dies; a second child that
// opens such a child's directory with the server up (answering slowly) and
// tracks more while its reader catches up with the backlog, killed too;
// and a child that tracks for 100 ms with QueueCapacity 1 000 against the
// slow server, then calls Close, killed during Close (or after it).
func TestDurableCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	moments, seed := 20, uint64(time.Now().UnixNano())
	if v, err := strconv.Atoi(os.Getenv("ANALYTICS_CRASH_MOMENTS")); err == nil {
		moments = v
	}
	if v, err := strconv.ParseUint(os.Getenv("ANALYTICS_CRASH_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (ANALYTICS_CRASH_SEED=%d repeats this run), %d moments", seed, seed, moments)
	rng := rand.New(rand.NewPCG(seed, 0))

	var mu sync.Mutex
	var slow atomic.Bool
	received := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Batch []struct {
				MessageID string `json:"messageId"`
			} `json:"batch"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			w.WriteHeader(400)
			return
		}
		if slow.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		mu.Lock()
		for _, e := range body.Batch {
			received[e.MessageID]++
		}
		mu.Unlock()
		w.WriteHeader(200)
	}))
	defer srv.Close()

	totalAcked, totalDup := 0, 0
	for m := 0; m < moments; m++ {
		dir := t.TempDir()
		delay := time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
		kind := [...]string{"memory", "spilled", "catching up", "closing"}[m%4]
		mu.Lock()
		clear(received)
		mu.Unlock()
		var acked []string
		switch kind {
		case "memory":
			acked = runCrashChild(t, dir, delay)
		case "spilled":
			acked = runCrashChild(t, dir, delay, crashChildCapEnv+"=1000")
		case "closing":
			// Close catching up with a backlog on disk only, the server up
			// (answering slowly); the kill lands during Close or after it.
			slow.Store(true)
			acked = runCrashChild(t, dir, 100*time.Millisecond+delay, crashChildCapEnv+"=1000",
				crashChildURLEnv+"="+srv.URL, crashChildCloseEnv+"=100ms")
			slow.Store(false)
		default:
			acked = runCrashChild(t, dir, delay+100*time.Millisecond, crashChildCapEnv+"=1000")
			slow.Store(true)
			more := runCrashChild(t, dir, time.Duration(rng.Int64N(int64(300*time.Millisecond))),
				crashChildCapEnv+"=1000", crashChildURLEnv+"="+srv.URL)
			slow.Store(false)
			acked = append(acked, more...)
		}
		c, err := New("wk", WithEndpoint(srv.URL), WithDiskBuffer(dir), WithQueueCapacity(MaxQueueCapacity))
		if err != nil {
			t.Fatalf("moment %d: New after the kill: %v", m, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = c.Close(ctx)
		cancel()
		if err != nil {
			t.Fatalf("moment %d: Close: %v", m, err)
		}
		st := c.Stats()
		mu.Lock()
		missing := 0
		for _, id := range acked {
			if received[id] == 0 {
				missing++
				if missing <= 5 {
					t.Errorf("moment %d (%s, kill after %v): %s was accepted before the kill but not delivered", m, kind, delay, id)
				}
			}
		}
		dup := 0
		for _, n := range received {
			dup += n - 1
		}
		mu.Unlock()
		if missing > 0 {
			t.Fatalf("moment %d: %d of %d accepted events lost", m, missing, len(acked))
		}
		totalAcked += len(acked)
		totalDup += dup
		t.Logf("moment %d (%s): killed after %v, %d accepted, %d replayed, %d delivered twice, torn %d corrupt %d",
			m, kind, delay, len(acked), st.Replayed, dup, st.DiskTorn, st.DiskCorrupt)
	}
	t.Logf("%d moments: %d accepted events all delivered, %d duplicates", moments, totalAcked, totalDup)
}

// runCrashChild starts the child on dir, SIGKILLs it after delay, and
// returns the messageIds it reported as accepted (whole lines only); env
// is added to the child's environment.
func runCrashChild(t *testing.T, dir string, delay time.Duration, env ...string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableCrashChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), crashChildEnv+"="+dir), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	read := make(chan struct{})
	go func() {
		defer close(read)
		r := bufio.NewReaderSize(out, 1<<16)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if err != io.EOF && len(line) == 0 {
					t.Errorf("reading the child: %v", err)
				}
				return // a line without its newline: the kill cut it
			}
			line = strings.TrimSuffix(line, "\n")
			if strings.HasPrefix(line, "NEW ") {
				t.Errorf("child: %s", line)
				continue
			}
			ids = append(ids, line)
		}
	}()
	time.Sleep(delay) // the moment of the kill: real time by design
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-read
	_ = cmd.Wait()
	return ids
}
