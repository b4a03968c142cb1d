package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/relaykit/analytics-go/internal/diskbuf"
)

// Durable mode (WithDiskBuffer) keeps every accepted event in an on-disk
// log until it has its outcome, so a process that dies — kill -9, panic,
// OOM kill — loses nothing it had accepted: the next client that opens the
// same directory sends those events first, with the same messageIds. The
// log lives in internal/diskbuf. This file holds the disk options and the
// errors of durable mode (WithDiskBuffer is with the client's options, in
// config.go), then the durable type, which joins the log to the pipeline:
// accept appends before the event is queued, the settler acknowledges every delivered or
// failed event (handed-back ones stay on disk), New replays, and Close
// closes. docs/durable.md describes the design.

// FsyncPolicy says when the disk buffer asks the operating system to put
// what was written on stable storage (fsync). Every accepted event is
// written to the operating system before its enqueue call returns, whatever
// the policy, so a process crash never loses it; the policy bounds what a
// power loss or kernel crash can lose.
type FsyncPolicy int

const (
	// FsyncInterval syncs once per interval (default 1 s, see
	// WithFsyncInterval) when something was written: a power loss loses at
	// most the events accepted in the last interval. This is the default.
	FsyncInterval FsyncPolicy = iota
	// FsyncEveryBatch syncs before a batch is taken for upload, so every
	// event sent has reached stable storage first; a power loss loses at
	// most the events of the batch still open. Costs one fsync per batch
	// on a consumer goroutine, never in an enqueue call.
	FsyncEveryBatch
	// FsyncNever leaves syncing to the operating system (and Close): a
	// power loss can lose whatever the OS had not written back yet,
	// typically up to 30 s of events on Linux.
	FsyncNever
)

// Defaults of the disk buffer.
const (
	// DefaultFsyncInterval is the sync period of FsyncInterval.
	DefaultFsyncInterval = time.Second
	// DefaultDiskLimit is the most bytes the segment files may take.
	DefaultDiskLimit = 512 << 20
	// DefaultSegmentSize is the size at which a segment file is sealed and
	// a new one started; space is reclaimed a whole segment at a time.
	DefaultSegmentSize = 4 << 20
)

// ErrDiskBufferLocked is returned by New when another client (in this or
// another process) has the disk buffer's directory open. Each directory
// serves one client at a time; the lock is released by Close, or by the
// operating system when the process dies.
var ErrDiskBufferLocked = errors.New("analytics: disk buffer directory is in use by another client")

// ErrDiskBufferGone is the cause (see DiskError) of every enqueue call's
// error once the disk buffer's directory was found removed or replaced
// while the client used it: checked when a segment fills and at every
// fsync (each interval with FsyncInterval, each batch with
// FsyncEveryBatch). Nothing is written to a directory that is gone; the
// client cannot use the disk buffer again, so such a client should be
// closed and a new one made.
var ErrDiskBufferGone = errors.New("analytics: disk buffer directory was removed or replaced while in use")

// DiskError is returned by an enqueue call whose event could not be
// written to the disk buffer (a read-only or full file system, an I/O
// error, the directory removed: ErrDiskBufferGone), and by New when the
// directory cannot be opened or is refused (not private to this user, a
// file of an unknown format version). The event of an
// enqueue call that returned it was not accepted. Errors from the file
// system are visible with errors.Is and errors.As (for example
// errors.Is(err, syscall.ENOSPC)).
type DiskError struct {
	Op  string // "open", "append"
	Dir string // the disk buffer directory
	Err error
}

// Error describes the operation, the directory and the cause.
func (e *DiskError) Error() string {
	return fmt.Sprintf("analytics: disk buffer %s in %s: %v", e.Op, e.Dir, e.Err)
}

// Unwrap returns the cause.
func (e *DiskError) Unwrap() error { return e.Err }

// DiskOption configures the disk buffer (see WithDiskBuffer).
type DiskOption interface {
	applyDisk(*diskSettings)
}

type diskOptionFunc func(*diskSettings)

func (f diskOptionFunc) applyDisk(d *diskSettings) { f(d) }

type diskSettings struct {
	dir          string
	policy       FsyncPolicy
	interval     time.Duration
	limit        int64
	segment      int64
	errs         []error
	syncObserver func() // tests: called after each sync
	noMmap       bool   // tests: the portable writer on Linux too
}

// newDiskSettings are the settings of a disk buffer in dir: the defaults,
// then opts in order. It returns them with the errors of invalid options,
// in order, and of a DiskLimit below two segments.
func newDiskSettings(dir string, opts []DiskOption) (*diskSettings, []error) {
	d := &diskSettings{dir: dir, interval: DefaultFsyncInterval, limit: DefaultDiskLimit, segment: DefaultSegmentSize}
	var errs []error
	for _, o := range opts {
		if o == nil {
			errs = append(errs, invalid("DiskOption", nil, "must not be nil"))
			continue
		}
		o.applyDisk(d)
	}
	if d.limit < 2*d.segment {
		d.errs = append(d.errs, invalid("DiskBuffer.DiskLimit", d.limit, "must be at least twice the segment size"))
	}
	return d, append(errs, d.errs...)
}

// logOptions are the options of the disk log: its segment size and limit
// in bytes, and its warnings and errors logged to logger.
func (d *diskSettings) logOptions(logger *zap.Logger) diskbuf.Options {
	return diskbuf.Options{
		SegmentBytes: d.segment,
		MaxBytes:     d.limit,
		NoMmap:       d.noMmap,
		Logf:         func(format string, args ...any) { logger.Warn(fmt.Sprintf(format, args...)) },
		Errorf:       func(format string, args ...any) { logger.Error(fmt.Sprintf(format, args...)) },
	}
}

// WithFsync sets the fsync policy (default FsyncInterval). An unknown
// policy fails New.
func WithFsync(p FsyncPolicy) DiskOption {
	return diskOptionFunc(func(d *diskSettings) {
		if p < FsyncInterval || p > FsyncNever {
			d.errs = append(d.errs, invalid("DiskBuffer.Fsync", int(p), "unknown policy"))
		}
		d.policy = p
	})
}

// WithFsyncInterval selects FsyncInterval with period iv (default 1 s;
// must be positive).
func WithFsyncInterval(iv time.Duration) DiskOption {
	return diskOptionFunc(func(d *diskSettings) {
		if iv <= 0 {
			d.errs = append(d.errs, invalid("DiskBuffer.FsyncInterval", iv, "must be positive"))
		}
		d.policy, d.interval = FsyncInterval, iv
	})
}

// WithDiskLimit bounds the bytes the disk buffer's files may take
// (default 512 MiB, at least two segments): the segments, the active one
// counted at its full size, and the acknowledgement files. In durable mode
// it is what bounds the accepted events (QueueCapacity bounds only those
// in memory). It holds across restarts: New starts no segment past it.
// Past it, enqueue calls return an error matching ErrQueueFull until
// delivered events free whole segments (EnqueueContext waits for that).
func WithDiskLimit(bytes int64) DiskOption {
	return diskOptionFunc(func(d *diskSettings) { d.limit = bytes })
}

// WithSegmentSize sets the size of one segment file (default 4 MiB, at
// least 64 KiB). Smaller segments give space back sooner; larger ones mean
// fewer files.
func WithSegmentSize(bytes int64) DiskOption {
	return diskOptionFunc(func(d *diskSettings) {
		if bytes < 64<<10 {
			d.errs = append(d.errs, invalid("DiskBuffer.SegmentSize", bytes, "must be at least 64 KiB"))
		}
		d.segment = bytes
	})
}

// In durable mode the disk is the buffer (docs/durable.md, "Capacity";
// docs/delivery.md R70): QueueCapacity bounds the events held in memory,
// and the disk limit bounds what is accepted. An enqueue call appends the
// event to the log and queues it in memory if there is room; otherwise the
// event stays on disk only ("spilled") and the reader below loads it into
// the queue, oldest first, as batches leave. Replay at New is the same
// thing: the events an earlier client left are on disk only until read.
//
// Order: once an event is spilled, every later one is spilled too until
// the reader has caught up, so the queue receives the events in log
// order, which is acceptance order (replayed events first). The enqueue
// call holds durable.mu across its append and that decision; the reader
// takes durable.mu only to hand what it read to the queue, never across
// I/O.

// durable is a client's disk buffer.
type durable struct {
	diskLog  *diskbuf.Log // the on-disk log of events (internal/diskbuf)
	dir      string
	policy   FsyncPolicy
	log      *zap.Logger   // the client's logger
	syncStop chan struct{} // closed by close: the FsyncInterval goroutine ends
	syncDone sync.WaitGroup
	observer func() // tests: called after each sync

	// The disk as the buffer (see the top of this file).
	q         *queue
	places    *capacity     // the queue's: what memory holds (R70)
	stats     *counters     // the client's: lost events count as failed, kept ones as handed back
	mu        sync.Mutex    // an enqueue call's append and its memory-or-disk decision; the reader's hand-over
	spilling  bool          // events go to disk only until the reader has caught up; guarded by mu
	onDisk    int64         // accepted events on disk only, not read back yet; guarded by mu
	runs      []epochRun    // their ledger epochs, oldest first; guarded by mu
	onDiskNow atomic.Int64  // onDisk, readable without mu (Stats.OnDisk)
	wake      chan struct{} // cap 1: events went to disk only, or places were freed
	readStop  chan struct{}
	readDone  chan struct{}
	// readerDone: Close took the events on disk only (guarded by mu);
	// readFailing: the last read failed (reader goroutine only).
	readerDone, readFailing bool
}

// addStats adds to st, the counters' snapshot, what the disk buffer tells:
// the events on disk only now, and what its files take and held that was
// torn, corrupt, missing or skipped; open is false after Close, when the
// files take nothing.
func (d *durable) addStats(st *Stats, open bool) {
	st.OnDisk = d.onDiskNow.Load()
	if open {
		st.DiskBytes = d.diskLog.Size()
	}
	ds := d.diskLog.Stats()
	st.DiskTorn, st.DiskMissing, st.DiskSkipped = int64(ds.Torn), int64(ds.Missing), int64(ds.Skipped)
	st.DiskCorrupt += int64(ds.Corrupt) // beside the replayed records that were not events
}

// openDurable opens d.dir and returns the buffer and the number of events
// an earlier client left there (read back later: see startReader).
func openDurable(d *diskSettings, logger *zap.Logger) (*durable, int, error) {
	dl, n, err := diskbuf.OpenLog(d.dir, d.logOptions(logger))
	if errors.Is(err, diskbuf.ErrLocked) {
		return nil, 0, fmt.Errorf("%w: %s", ErrDiskBufferLocked, d.dir)
	}
	if err != nil {
		return nil, 0, &DiskError{Op: "open", Dir: d.dir, Err: err}
	}
	dur := &durable{diskLog: dl, dir: d.dir, policy: d.policy, log: logger, syncStop: make(chan struct{}), observer: d.syncObserver,
		wake: make(chan struct{}, 1), readStop: make(chan struct{}), readDone: make(chan struct{})}
	st := dl.Stats() // logged at every start, so that durable mode shows in the logs
	logger.Info("disk buffer opened", zap.String("dir", d.dir), zap.Int("replayed", n),
		zap.Int64("bytes", dl.Size()), zap.Int64("limit", d.limit),
		zap.Int("torn", st.Torn), zap.Int("corrupt", st.Corrupt),
		zap.Int("missingSegments", st.Missing), zap.Int("skippedEntries", st.Skipped))
	if d.policy == FsyncInterval {
		dur.syncDone.Add(1)
		go dur.syncEvery(d.interval)
	}
	return dur, n, nil
}

func (d *durable) syncEvery(iv time.Duration) {
	defer d.syncDone.Done()
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-d.syncStop:
			return
		case <-t.C:
			d.sync()
		}
	}
}

func (d *durable) sync() {
	if err := d.diskLog.Sync(); err != nil {
		d.log.Error("disk buffer: fsync failed", zap.String("dir", d.dir), zap.Error(err))
	}
	if d.observer != nil {
		d.observer()
	}
}

// heldOnDisk is the number of accepted events on disk only now
// (Stats.OnDisk).
func (d *durable) heldOnDisk() int64 { return d.onDiskNow.Load() }

// syncNow syncs the disk buffer (Close, before the hand-back).
func (d *durable) syncNow() error { return d.diskLog.Sync() }

// leftOnDisk records n, the events Close kept on disk for the next client
// (Stats.OnDisk after Close).
func (d *durable) leftOnDisk(n int64) { d.onDiskNow.Store(n) }

// beforeBatch runs when a consumer takes a batch (FsyncEveryBatch).
func (d *durable) beforeBatch() {
	if d.policy == FsyncEveryBatch {
		d.sync()
	}
}

// append writes ev's JSON and records its place in ev.
func (d *durable) append(ev *event, data []byte) error {
	seg, off, err := d.diskLog.Append(data)
	switch {
	case err == nil:
		ev.seg, ev.off = seg, off
		return nil
	case errors.Is(err, diskbuf.ErrFull):
		return fmt.Errorf("%w: the disk buffer reached its size limit", ErrQueueFull)
	case errors.Is(err, diskbuf.ErrClosed):
		return ErrClosed
	case errors.Is(err, diskbuf.ErrDirGone):
		return &DiskError{Op: "append", Dir: d.dir, Err: ErrDiskBufferGone}
	default:
		return &DiskError{Op: "append", Dir: d.dir, Err: err}
	}
}

// ack records the outcome of evs; their space is reclaimed with their
// segment.
func (d *durable) ack(evs []event) {
	onDisk := evs
	for i := range evs {
		if evs[i].seg == nil { // never written: ack the others from a copy, the caller's slice stays as it is
			onDisk = make([]event, 0, len(evs))
			for _, ev := range evs {
				if ev.seg != nil {
					onDisk = append(onDisk, ev)
				}
			}
			break
		}
	}
	if err := d.diskLog.Ack(len(onDisk), func(i int) (*diskbuf.Segment, uint32) { return onDisk[i].seg, onDisk[i].off }); err != nil {
		d.log.Error("disk buffer: acknowledgement not written; the events may be sent again by a later client",
			zap.String("dir", d.dir), zap.Error(err))
	}
}

// close stops the sync goroutine and closes the log (syncing it).
func (d *durable) close() {
	close(d.syncStop)
	d.syncDone.Wait()
	if err := d.diskLog.Close(); err != nil {
		d.log.Error("disk buffer: close failed", zap.String("dir", d.dir), zap.Error(err))
	}
}

// readBatch bounds the events the reader loads at once.
const readBatch = 2048

// readRetry is how long the reader waits after a read error.
const readRetry = 100 * time.Millisecond

// readerIdle is how long the reader waits with nothing to load before it
// drops its read buffer.
const readerIdle = 100 * time.Millisecond

// readerStopWait bounds how long Close waits for a read in progress.
const readerStopWait = 100 * time.Millisecond

// accept is Client.accept in durable mode: it appends the event's JSON to
// the log (written to the OS before the call returns), then queues it in
// memory, or leaves it on disk only when memory is full or events are
// already on disk only. With wait (EnqueueContext) it waits for disk space
// when the disk limit is reached; it never waits while the disk has room.
// closed is the client's: set, a waiting call returns ErrClosed.
func (d *durable) accept(ctx context.Context, wait bool, sc *scratch, withCopy Message, closed *atomic.Bool) error {
	for {
		var freed <-chan struct{}
		if wait {
			freed = d.diskLog.Freed() // before the append: a reclaim after it is not missed
		}
		err := d.acceptOnce(sc, withCopy)
		if !wait || !errors.Is(err, ErrQueueFull) {
			return err
		}
		select {
		case <-freed:
		case <-d.readStop: // Close
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", err, ctx.Err())
		}
		if closed.Load() {
			return ErrClosed
		}
	}
}

// acceptOnce is one try of accept.
func (d *durable) acceptOnce(sc *scratch, withCopy Message) error {
	q := d.q
	data := sc.Enc.Bytes()
	var ev event
	d.mu.Lock()
	if err := d.append(&ev, data); err != nil {
		d.mu.Unlock()
		return err
	}
	if !d.spilling && !d.places.full() {
		ev.data, ev.slab = sc.CopyToSlab(data)
		ev.msg = withCopy
		err := q.push(ev)
		if err != ErrQueueFull {
			d.mu.Unlock()
			if err != nil {
				d.ack([]event{ev}) // not accepted: not replayed either
				releaseEvents([]event{ev})
			}
			return err
		}
		releaseEvents([]event{ev}) // on disk only: the copy is not needed
		ev.data, ev.msg = nil, nil
	}
	if !d.spilling {
		d.spilling = true
		d.diskLog.Reader().Seek(ev.seg, ev.off)
	}
	epoch, err := q.account(1)
	if err != nil {
		d.spilling = d.onDisk > 0
		d.mu.Unlock()
		d.ack([]event{ev})
		return err
	}
	d.addRunLocked(epoch, 1)
	d.mu.Unlock()
	d.stats.countSpilled()
	signal(d.wake)
	return nil
}

// addRunLocked counts n events on disk only, of ledger epoch; d.mu is held.
func (d *durable) addRunLocked(epoch uint64, n int64) {
	if k := len(d.runs); k > 0 && d.runs[k-1].epoch == epoch {
		d.runs[k-1].n += n
	} else {
		d.runs = append(d.runs, epochRun{epoch, n})
	}
	d.onDisk += n
	d.onDiskNow.Store(d.onDisk)
}

// takeRunsLocked removes the epochs of the n oldest events on disk only
// and calls f for each run of them (k events of epoch); d.mu is held.
func (d *durable) takeRunsLocked(n int64, f func(epoch uint64, k int64)) {
	for n > 0 && len(d.runs) > 0 {
		r := &d.runs[0]
		k := min(n, r.n)
		f(r.epoch, k)
		r.n -= k
		n -= k
		d.onDisk -= k
		if r.n == 0 {
			d.runs = d.runs[1:]
			if len(d.runs) == 0 {
				d.runs = nil // let the backing array go
			}
		}
	}
	d.onDiskNow.Store(d.onDisk)
	if d.onDisk == 0 {
		d.spilling = false // caught up: new events go to memory again
	}
}

// startReader starts the reader; the events replayed from disk (n) are
// accepted already and counted in the ledger now.
func (d *durable) startReader(q *queue, places *capacity, stats *counters, replay int) {
	d.q, d.places, d.stats = q, places, stats
	stats.countReplayed(int64(replay))
	if replay > 0 {
		epoch, _ := q.account(replay)
		d.mu.Lock()
		d.spilling = true
		d.addRunLocked(epoch, int64(replay))
		d.mu.Unlock()
		signal(d.wake)
	}
	places.onRelease(d.wake)
	if replay > 0 {
		// The first read's worth is loaded before New returns, so a small
		// backlog is in the queue ahead of the first new event and leaves
		// with it in one batch, as a short-lived program expects; the rest
		// follows as room frees.
		d.loadSome(q)
	}
	go d.readBack()
}

// readBack loads events on disk only into the queue as room frees, until
// stopReader. It runs on a goroutine of its own.
func (d *durable) readBack() {
	defer close(d.readDone)
	defer d.diskLog.Reader().Close()
	q := d.q
	idle := time.NewTimer(readerIdle)
	defer idle.Stop()
	for {
		select {
		case <-d.readStop:
			return
		case <-idle.C:
			d.diskLog.Reader().Idle() // waiting for a while: no buffer held
			continue
		case <-d.wake:
		}
		for d.loadSome(q) {
			select {
			case <-d.readStop:
				return
			default:
			}
		}
		idle.Reset(readerIdle)
	}
}

// loadSome loads one read's worth of events if memory has room for a
// useful amount; it reports whether to try again at once.
func (d *durable) loadSome(q *queue) bool {
	d.mu.Lock()
	n := d.onDisk
	d.mu.Unlock()
	free := d.places.free()
	if n == 0 || free <= 0 || free < min(n, d.places.batch()) {
		return false
	}
	recs, lost, err := d.diskLog.Reader().Next(int(min(free, n, readBatch)), 4<<20)
	if err != nil && !d.readFailing {
		// Logged once per run of failures (retried every readRetry).
		d.log.Error("disk buffer: reading events back failed", zap.String("dir", d.dir), zap.Error(err))
	}
	d.readFailing = err != nil
	evs := make([]event, 0, len(recs))
	var notEvents []event
	for _, r := range recs {
		ev := event{data: r.Data, seg: r.Seg, off: r.Off}
		if r.Old && !json.Valid(r.Data) {
			// A record with a valid checksum that is not an event: skipped,
			// counted and acknowledged, never sent.
			notEvents = append(notEvents, ev)
			continue
		}
		evs = append(evs, ev)
	}
	if len(notEvents) > 0 {
		d.stats.countNotEvents(int64(len(notEvents)))
		d.log.Warn("disk buffer: skipped records that are not events", zap.Int("records", len(notEvents)))
		d.ack(notEvents)
	}
	// The records come in log order, which is the order of the runs; the
	// events that are not queued (not events, lost) were counted in the
	// ledger too and are discharged. Which of them is where in the order
	// does not matter to the ledger, only the number per epoch.
	var gone []epochRun
	d.mu.Lock()
	if d.readerDone {
		// Close took what is on disk only as kept while this read ran
		// (a slow disk): what it read stays there, unacknowledged.
		d.mu.Unlock()
		return false
	}
	if lost > 0 {
		// Their records are gone (the reader logged how many): failed,
		// without a callback, as no message can be rebuilt from them.
		lost = int(min(int64(lost), d.onDisk-int64(len(recs))))
		d.stats.countLost(int64(lost))
	}
	i := int64(0)
	d.takeRunsLocked(int64(len(recs)+lost), func(epoch uint64, k int64) {
		for ; k > 0 && i < int64(len(evs)); k-- {
			evs[i].epoch = epoch
			i++
		}
		if k > 0 {
			gone = append(gone, epochRun{epoch, k})
		}
	})
	q.load(evs)
	stuck := len(recs) == 0 && lost == 0 && err == nil && d.onDisk > 0 && d.diskLog.Reader().AtEnd()
	if stuck {
		// The reader is at the end of the log, yet events are counted on
		// disk only: their records cannot be read (the file was changed by
		// someone else). They are failed, so that accounting ends.
		k := d.onDisk
		d.takeRunsLocked(k, func(epoch uint64, k int64) { gone = append(gone, epochRun{epoch, k}) })
		d.log.Error("disk buffer: events could not be read back from disk; they are lost", zap.Int64("events", k))
		d.stats.countLost(k)
	}
	d.mu.Unlock()
	q.dischargeRuns(gone)
	if err != nil && len(recs) == 0 && lost == 0 {
		select {
		case <-d.readStop:
		case <-time.After(readRetry):
		}
		return true
	}
	return len(recs)+lost > 0
}

// stopReader stops the reader and hands back what is still on disk only
// (Close): those events stay in the log for the next client, get no
// callback, and are counted as handed back (Stats.HandedBack, Close's
// error) and in Stats.OnDisk. It returns their number.
func (d *durable) stopReader() int64 {
	close(d.readStop)
	stopped := false
	select {
	case <-d.readDone:
		stopped = true
	case <-time.After(readerStopWait):
		// A read stalled by the file system: Close does not wait for it;
		// the reader hands nothing over once readerDone is set.
	}
	var gone []epochRun
	d.mu.Lock()
	if stopped && d.onDisk > 0 {
		// Only what is really on disk is kept: the events whose segment
		// file was removed, replaced or cut short meanwhile are lost.
		if lost := min(int64(d.diskLog.Reader().Unreadable()), d.onDisk); lost > 0 {
			d.takeRunsLocked(lost, func(epoch uint64, k int64) { gone = append(gone, epochRun{epoch, k}) })
			d.stats.countLost(lost)
		}
	}
	n, runs := d.onDisk, d.runs
	d.runs, d.onDisk, d.spilling, d.readerDone = nil, 0, false, true
	d.mu.Unlock()
	d.q.dischargeRuns(gone)
	d.onDiskNow.Store(n) // what Close left on disk
	if n > 0 {
		d.stats.countHandedBack(n) // Close logs one line for every hand-back
		d.q.dischargeRuns(runs)
	}
	return n
}
