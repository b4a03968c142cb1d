package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relaykit/analytics-go/bench/sink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Events 0–9: what the SDK told the app (ledger) against what the sink
// recorded (seen, ms since the sink's start + 1) decides every count.
func TestAccountSplitsLostFromToldAndComputesTheBacklog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sinkStart := t0
	lg := &ledger{out: []uint8{
		evNone,       // 0: at the sink before the outage
		evNone,       // 1: never at the sink, nobody told: lost
		evRejected,   // 2: rejected
		evFailed,     // 3: failed, not at the sink
		evHandedBack, // 4: handed back, yet at the sink (lost ack)
		evAbandoned,  // 5: peers: abandoned at Close, not at the sink: lost
		evAbandoned,  // 6: abandoned but recorded before: not lost
		evDropped,    // 7: dropped, not at the sink: lost
		evNone,       // 8: enqueued during the outage, delivered 2.5 s after recovery
		// backlog: 1, 3, 5, 7 (never at the sink) and 8
		evNone, // 9: enqueued after recovery: not backlog
	}}
	ms := func(d time.Duration) uint32 { return uint32(d/time.Millisecond) + 1 }
	seen := []uint32{ms(100 * time.Millisecond), 0, 0, 0, ms(time.Second), 0, ms(200 * time.Millisecond), 0,
		ms(7500 * time.Millisecond), ms(6 * time.Second)}
	enq := []int32{50, 60, 70, 80, 90, 1500, 100, 2000, 3000, 5500} // ms since t0
	st := sink.Stats{
		OutageStartUnixNS: t0.Add(time.Second).UnixNano(),
		OutageEndUnixNS:   t0.Add(5 * time.Second).UnixNano(),
	}
	samples := []sampleT{
		{t: t0.Add(500 * time.Millisecond), heap: 900, pending: 90}, // before the outage: ignored
		{t: t0.Add(2 * time.Second), heap: 300, rss: 3000, pending: 30},
		{t: t0.Add(4 * time.Second), heap: 200, rss: 2000, pending: 40},
	}
	o := account(lg, seen, sinkStart, t0, enq, st, samples)
	want := Outcomes{AtSink: 5, Rejected: 1, Failed: 1, HandedBack: 1, Abandoned: 2, Dropped: 1, Lost: 3,
		ToldButAtSink: 1, OutageS: 4, Backlog: 5, BacklogDeliveredS: 2.5, BacklogUndelivered: 4,
		OutagePeakHeapB: 300, OutagePeakRSSB: 3000, OutagePeakPending: 40, OutagePeakPendingE: 40}
	if *o != want {
		t.Fatalf("account:\n got %+v\nwant %+v", *o, want)
	}
}
