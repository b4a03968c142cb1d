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
	"syscall"
	"testing"
	"time"
)

// The crash test runs this file's child in a process of its own, kills it
// with SIGKILL and checks that a new client on the same directory delivers
// every event whose enqueue call had returned nil.
const crashChildEnv = "ANALYTICS_CRASH_CHILD_DIR"

// TestDurableCrashChild is the child: it tracks events as fast as it can
// into a durable client whose server is down, printing each messageId once
// its Track returned nil (one write per line, so a line on the pipe means
// the call had returned). It runs until it is killed.
func TestDurableCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestDurableCrash")
	}
	c, err := New("wk", WithEndpoint("http://127.0.0.1:1"), WithDiskBuffer(dir),
		WithQueueCapacity(MaxQueueCapacity), WithMaxRetries(1000))
	if err != nil {
		fmt.Println("NEW", err)
		os.Exit(3)
	}
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 64)
			for i := 0; ; i++ {
				id := "g" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
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
}

// TestDurableCrash kills the child at seeded random moments (20 by default,
// ANALYTICS_CRASH_MOMENTS to change, ANALYTICS_CRASH_SEED to repeat a run).
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
		acked := runCrashChild(t, dir, delay)

		mu.Lock()
		clear(received)
		mu.Unlock()
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
					t.Errorf("moment %d (kill after %v): %s was accepted before the kill but not delivered", m, delay, id)
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
		t.Logf("moment %d: killed after %v, %d accepted, %d replayed, %d delivered twice, torn %d corrupt %d",
			m, delay, len(acked), st.Replayed, dup, st.DiskTorn, st.DiskCorrupt)
	}
	t.Logf("%d moments: %d accepted events all delivered, %d duplicates", moments, totalAcked, totalDup)
}

// runCrashChild starts the child on dir, SIGKILLs it after delay, and
// returns the messageIds it reported as accepted (whole lines only).
func runCrashChild(t *testing.T, dir string, delay time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
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
