package analytics

import (
	"math/bits"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// What the logs say about a server that fails (docs/delivery.md R51): one
// warning when it starts failing, one aggregated warning at most every
// outageReportInterval while it goes on, and one information line when it
// answers again. The state lives in the waiting room beside the server's
// health (R60), under the same lock, and is judged from the same recent
// answers; the lines are written by the consumer that saw the answer,
// outside the lock.

// outageReportInterval is the least time between two warnings about a
// failing server.
const outageReportInterval = 30 * time.Second

// The server starts failing at a counted failure after which either at
// least outageMinFailures of the recent answers, and at least half of them,
// are counted failures, or the last outageStreak answers are counted
// failures and the first of them is outageStreakAge old (a client with
// few requests, whose window still holds the 2xx answers of before).
const (
	outageMinFailures = 3
	outageStreak      = 4
	outageStreakAge   = time.Second
)

// outage is the client's view of a failing server; guarded by the waiting
// room's mutex.
type outage struct {
	on          bool      // the server is failing
	announced   bool      // a warning said so (a run that starts within outageReportInterval of the last warning waits for the next one)
	since       time.Time // first counted failure of the run
	streakStart time.Time // first counted failure since the last 2xx
	lastLine    time.Time // last warning
	failures    int64     // counted failures since the run began
	unreported  int64     // counted failures since the last warning
	lastErr     error     // the last counted failure's error
	// changed is closed at the next counted failure or usable Retry-After:
	// Close, in durable mode, looks again whether the server answers.
	changed chan struct{}
}

// outageKind is what a line says.
type outageKind int

const (
	outageNone    outageKind = iota
	outageStarted            // WARN: the server started failing
	outageGoingOn            // WARN: it still fails
	outageEnded              // INFO: it answers again
)

// outageLine is one line about a failing server, its numbers taken under
// the waiting room's lock.
type outageLine struct {
	kind     outageKind
	err      error
	failures int64         // started: failures among the recent answers; going on: since the last line; ended: in the whole run
	recent   int           // started: the recent answers they are among
	lasted   time.Duration // since the run's first counted failure
}

// poke wakes whoever watches changed.
func (o *outage) poke() {
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
}

// failure records a counted failure with err at now, already noted in h,
// and says which line is due.
func (o *outage) failure(h *health, now time.Time, err error) outageLine {
	known := h.recent & uint16(1<<h.seen-1)
	streak := bits.TrailingZeros16(^known)
	if streak <= 1 || o.streakStart.IsZero() {
		o.streakStart = now
	}
	o.lastErr = err
	o.unreported++
	o.poke()
	if !o.on {
		failures := bits.OnesCount16(known)
		byShare := failures >= outageMinFailures && 2*failures >= h.seen
		byStreak := streak >= outageStreak && now.Sub(o.streakStart) >= outageStreakAge
		if !byShare && !byStreak {
			return outageLine{}
		}
		o.on, o.announced, o.since = true, false, o.streakStart
		o.failures, o.unreported = int64(failures), int64(failures)
		if !o.lastLine.IsZero() && now.Sub(o.lastLine) < outageReportInterval {
			return outageLine{} // announced by the next warning, when the interval has passed
		}
		o.announced, o.lastLine, o.unreported = true, now, 0
		return outageLine{kind: outageStarted, err: err, failures: int64(failures), recent: h.seen, lasted: now.Sub(o.since)}
	}
	o.failures++
	if now.Sub(o.lastLine) < outageReportInterval {
		return outageLine{}
	}
	line := outageLine{kind: outageGoingOn, err: err, failures: o.unreported, lasted: now.Sub(o.since)}
	if !o.announced {
		line.kind, o.announced = outageStarted, true
	}
	o.lastLine, o.unreported = now, 0
	return line
}

// success records a 2xx at now, already noted in h; retrying reports
// whether a batch still waits for a counted retry. The run ends when the
// recent answers show a healthy server (R63's measure: at least four,
// fewer than half of them failures), or when nothing failed is left to
// retry; its end is told only if its start was.
func (o *outage) success(h *health, now time.Time, retrying func() bool) outageLine {
	o.streakStart = time.Time{}
	if !o.on {
		return outageLine{}
	}
	known := h.recent & uint16(1<<h.seen-1)
	healthy := h.seen >= 4 && 2*bits.OnesCount16(known) < h.seen
	if !healthy && retrying() {
		return outageLine{}
	}
	o.on = false
	if !o.announced {
		return outageLine{}
	}
	line := outageLine{kind: outageEnded, err: o.lastErr, failures: o.failures, lasted: now.Sub(o.since)}
	o.failures, o.unreported, o.lastErr = 0, 0, nil
	return line
}

// outageLog writes the lines about a failing server, with what is held:
// events without an outcome, batches waiting in the room, events on disk
// only (durable mode), and when the next attempt is due.
type outageLog struct {
	log    *zap.Logger
	q      *queue
	room   *waitingRoom
	disk   *durable
	stats  *counters
	before atomic.Int64 // Stats.Delivered at the first warning of a run
}

func (o *outageLog) write(l outageLine) {
	if l.kind == outageNone || o == nil {
		return
	}
	now := time.Now()
	batches, _, next := o.room.backlog(now)
	fields := make([]zap.Field, 0, 8)
	if l.err != nil {
		fields = append(fields, zap.Error(l.err))
	}
	fields = append(fields, zap.Int("heldEvents", o.q.outstanding()), zap.Int("waitingBatches", batches))
	if o.disk != nil {
		fields = append(fields, zap.Int64("onDisk", o.disk.onDiskNow.Load()))
	}
	delivered := zap.Int64("deliveredEvents", o.stats.delivered.Load()-o.before.Load()) // since the first warning
	switch l.kind {
	case outageStarted:
		o.before.Store(o.stats.delivered.Load())
		fields = append(fields, zap.Int64("failedRequests", l.failures), zap.Int("ofRecent", l.recent),
			zap.Duration("nextAttemptIn", next))
		o.log.Warn("the server is failing: events are held and retried", fields...)
	case outageGoingOn:
		fields = append(fields, zap.Int64("failedRequests", l.failures), zap.Duration("failingFor", l.lasted),
			delivered, zap.Duration("nextAttemptIn", next))
		o.log.Warn("the server is still failing: events are held and retried", fields...)
	case outageEnded:
		fields = append(fields, zap.Int64("failedRequests", l.failures), zap.Duration("failedFor", l.lasted), delivered)
		o.log.Info("the server is answering again", fields...)
	}
}
