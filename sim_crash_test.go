package analytics

// The crash world (durable mode): at a random instant of fake time the
// process dies. Inside a synctest bubble that instant is one where every
// goroutine of the scenario is blocked (synctest.Wait): the files of the
// disk buffer are copied then, as they are, into a directory of their
// own, which is what a kill -9 leaves behind (an enqueue call's write has
// reached the operating system when it returns; an acknowledgement is
// written right after its callback returns). The first client lives on
// and is checked as in any durable world; a new client then opens the
// copy against a server that answers 200 and must deliver every event
// whose enqueue call had returned nil before the crash, except those
// whose callback had returned (docs/durable.md). A crash therefore never
// lands inside a stretch of code that does not block: the kill -9 test
// (durable_crash_unix_test.go) covers those instants.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing/synctest"
	"time"
)

// simCrashState is what the crash left: the copy of the directory and,
// at that instant, the accepted events and those whose callback had
// returned (acknowledged on disk) or was still running.
type simCrashState struct {
	at           time.Time
	dir          string
	err          error // copying the directory failed
	accepted     map[string]bool
	returned     map[string]bool // a callback that reported it had returned
	simNextStart                 // the client on the copy
}

// simDrawCrash draws the crash of a durable world from a generator of its
// own, so that the rest of a seed's scenario stays what it was before
// crashes were drawn: in half of them, at an instant up to two seconds
// after Close is called (a crash during Close included).
func simDrawCrash(s *simScenario) {
	if !s.Durable {
		return
	}
	r := rand.New(rand.NewPCG(s.Seed, 0xc4a5))
	if r.Float64() < 0.5 {
		s.CrashAtMS = 1 + r.IntN(s.CloseAtMS+2000)
	}
}

// simStartCrash starts the crash of run at sc.CrashAtMS; wait returns
// once it has happened (or at once without one).
func simStartCrash(run *simRun, dir string) (wait func()) {
	sc := run.sc
	if !sc.Durable || sc.CrashAtMS <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(ms(sc.CrashAtMS))
		synctest.Wait() // every other goroutine is blocked: nothing is half-written
		cr := &simCrashState{at: time.Now(), accepted: map[string]bool{}, returned: map[string]bool{}}
		cr.dir = dir + "-crash"
		cr.err = os.CopyFS(cr.dir, os.DirFS(dir))
		run.mu.Lock()
		for _, e := range run.enq {
			if e.err == nil {
				cr.accepted[e.id] = true
			}
		}
		for _, o := range run.out {
			if !run.callSpans[o.callIdx-1][1].IsZero() {
				cr.returned[o.id] = true
			}
		}
		run.crash = cr
		run.mu.Unlock()
	}()
	return func() { <-done }
}

// simReopenCrashed is the start after the crash: a client on the copy,
// against a server that answers 200, closed once everything has an
// outcome.
func simReopenCrashed(run *simRun) {
	cr := run.crash
	if cr == nil {
		return
	}
	defer os.RemoveAll(cr.dir)
	if cr.err != nil {
		return
	}
	cr.simNextStart = simStartOn(run, cr.dir)
}

// simCheckCrash checks the durable promises across the crash
// (docs/durable.md): nothing accepted is lost, and an event goes out
// again, with a callback again, only if its callback had not returned
// when the process died (it may have been delivered, but its
// acknowledgement was not written).
func simCheckCrash(run *simRun) []simViolation {
	var vs []simViolation
	bad := func(rule, f string, a ...any) {
		if len(vs) < 10 {
			vs = append(vs, simViolation{rule, fmt.Sprintf(f, a...)})
		}
	}
	cr := run.crash
	if cr == nil {
		return nil
	}
	if cr.err != nil {
		bad("crash", "copying the directory at the crash: %v", cr.err)
		return vs
	}
	if cr.close != nil {
		bad("R70", "the client on the directory a crash left: %v", cr.close)
		return vs
	}
	sent := map[string]int{}
	for _, r := range cr.server.requests() {
		if r.status >= 200 && r.status <= 299 {
			for _, id := range r.ids {
				sent[id]++
			}
		}
	}
	got := map[string]int{}
	for _, o := range cr.out {
		got[o.id]++
		if o.err != nil {
			bad("R70", "%s: sent after the crash to a server that answers 200, it got %v", o.id, o.err)
		}
	}
	// Without OnSuccess a delivered event is acknowledged with no callback:
	// one the first server took before the crash may be sent again or not.
	before := map[string]bool{}
	for _, r := range run.server.requests() {
		if r.status >= 200 && r.status <= 299 && !r.done.After(cr.at) {
			for _, id := range r.ids {
				before[id] = true
			}
		}
	}
	// A callback that returned after Close had returned was not
	// acknowledged (the disk buffer was closed): the next start may send
	// it again and repeat the callback (docs/durable.md).
	late := map[string]bool{}
	if !run.close.done.IsZero() {
		for _, o := range run.out {
			if end := run.callSpans[o.callIdx-1][1]; end.After(run.close.done) {
				late[o.id] = true
			}
		}
	}
	want := 0
	for id := range cr.accepted {
		switch {
		case !run.sc.OnSuccess && before[id] && got[id] == 0 && sent[id] == 0:
		case cr.returned[id] && late[id] && got[id] == sent[id] && got[id] <= 1:
			want += got[id]
		case cr.returned[id]:
			if got[id] > 0 || sent[id] > 0 {
				bad("INV1", "%s: its callback had returned before the crash (%v), yet the next client sent it %d times and called back %d times",
					id, cr.at.Sub(run.start), sent[id], got[id])
			}
		case got[id] != 1 || sent[id] != 1:
			bad("R70", "%s was accepted before the crash (%v) without a callback that returned; the next client sent it %d times and called back %d times",
				id, cr.at.Sub(run.start), sent[id], got[id])
		default:
			want++
		}
	}
	for id := range got {
		if !cr.accepted[id] {
			bad("INV1", "the client after the crash reported %s, which was not accepted before it", id)
		}
	}
	if st := cr.stats; st.Replayed != int64(want) || st.Delivered != int64(want) || st.Pending != 0 || st.DiskTorn+st.DiskCorrupt+st.DiskMissing != 0 {
		bad("Stats", "the client after the crash: Replayed %d, Delivered %d, Pending %d (torn %d, corrupt %d, missing %d); %d to replay",
			st.Replayed, st.Delivered, st.Pending, st.DiskTorn, st.DiskCorrupt, st.DiskMissing, want)
	}
	return vs
}
