package analytics

import (
	"math/bits"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The server's health as every consumer saw it (docs/delivery.md
// R60–R63): the recent answers, the count of 2xx answers that restarts a
// batch's failure streak, the retry allowance, and whether the server is
// failing as the logs tell it (R51). It is kept in the waiting room and
// guarded by its mutex (ratelimit.go); nothing here takes a lock but
// outageLog, at the end, which writes the lines outside it.

// The retry allowance (R63), a token bucket in the manner of gRPC's retry
// throttling and the AWS SDKs' retry quota: a consumer takes a token when
// it takes a due counted retry; tokens come back at allowanceRate per second and
// allowancePerSuccess for every 2xx, up to allowanceBurst. A counted retry
// that finds no token waits for one; first attempts and rate-limited
// retries never do. While at most three in four answers are counted
// failures, 2xx answers refill it faster than retries drain it, and it never
// binds; against a server that fails more, retries leave at the rate 2xx
// answers pay for, and during an outage at allowanceRate.
const (
	allowanceRate       = 5.0 // tokens per second without any 2xx
	allowancePerSuccess = 3.0
	allowanceBurst      = 20.0
)

// health is the server's health as every consumer saw it (R60): guarded by
// the waiting room's mutex.
type health struct {
	successes uint64    // 2xx answers so far: a batch's streak restarts when it moves (R61)
	tokens    float64   // retry allowance (R63)
	refilled  time.Time // when tokens were last brought up to date
	recent    uint16    // the last answers, newest in bit 0: 1 a counted failure, 0 a 2xx
	seen      int       // how many bits of recent hold an answer (at most recentAnswers)
}

// newHealth is the health of a server that has not answered yet: no
// answer seen, and the whole retry allowance (R63).
func newHealth() health { return health{tokens: allowanceBurst} }

// recentAnswers is how many of the latest answers decide whether the server
// is healthy (R63).
const recentAnswers = 16

// note records one answer: a counted failure or a 2xx.
func (h *health) note(failure bool) {
	h.recent <<= 1
	if failure {
		h.recent |= 1
	}
	h.seen = min(h.seen+1, recentAnswers)
}

// healthy reports whether the recent answers show a healthy server (R63)
// to a batch whose streak is streak: at least four of them, and fewer than
// half counted failures, once the batch's own failures since the last 2xx
// are left out (they are the newest answers, after the last 2xx, so at most
// the failures that follow it).
func (h *health) healthy(streak int) bool {
	known := h.recent & uint16(1<<h.seen-1)
	failures := bits.OnesCount16(known)
	own := min(streak, bits.TrailingZeros16(^known)) // the failures after the last 2xx, at most
	seen, failures := h.seen-own, failures-own
	return seen >= 4 && 2*failures < seen
}

// refill brings the allowance up to now.
func (h *health) refill(now time.Time) {
	if !h.refilled.IsZero() && now.After(h.refilled) {
		h.tokens = min(allowanceBurst, h.tokens+now.Sub(h.refilled).Seconds()*allowanceRate)
	}
	if now.After(h.refilled) {
		h.refilled = now
	}
}

// takeToken takes a token of the allowance for a counted retry at now and
// returns 0, or, when none is there, how long until one is (R63).
// A wait that rounds to nothing counts as a token that is there.
func (h *health) takeToken(now time.Time) time.Duration {
	h.refill(now)
	if h.tokens < 1 {
		if wait := time.Duration((1 - h.tokens) / allowanceRate * float64(time.Second)); wait > 0 {
			return wait
		}
	}
	h.tokens--
	return 0
}

// succeeded records a 2xx at now (R60): it restarts every batch's streak
// (R61) and pays allowancePerSuccess into the allowance (R63).
func (h *health) succeeded(now time.Time) {
	h.successes++
	h.note(false)
	h.refill(now)
	h.tokens = min(allowanceBurst, h.tokens+allowancePerSuccess)
}

// lastFailed reports whether the latest answer was a counted failure.
func (h *health) lastFailed() bool { return h.seen > 0 && h.recent&1 == 1 }

// What the logs say about a server that fails (R51): one
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

// failingNow reports whether the server is failing and the latest answer
// of all (h) was a counted failure, with that failure's error.
func (o *outage) failingNow(h *health) (bool, error) {
	if o.on && h.lastFailed() {
		return true, o.lastErr
	}
	return false, nil
}

// nextChange is a channel closed at the next counted failure or usable
// Retry-After (poke).
func (o *outage) nextChange() <-chan struct{} {
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	return o.changed
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

// The lines about a failing server (R51) are decided above, in the waiting
// room under its lock, and written here by the consumer that saw the
// answer, outside the lock.

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

func newOutageLog(log *zap.Logger, q *queue, room *waitingRoom, disk *durable, stats *counters) *outageLog {
	return &outageLog{log: log, q: q, room: room, disk: disk, stats: stats}
}

// write writes l, if it says anything; o may be nil (no lines).
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
		fields = append(fields, zap.Int64("onDisk", o.disk.heldOnDisk()))
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
