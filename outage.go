package analytics

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The lines about a failing server (docs/delivery.md R51) are decided in
// the waiting room under its lock (outage, health.go) and written here, by
// the consumer that saw the answer, outside the lock.

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
