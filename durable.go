package analytics

import (
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
// log lives in internal/diskbuf; this file joins it to the pipeline:
// accept appends before the event is queued, the settler acknowledges every
// delivered or failed event (handed-back ones stay on disk), New replays,
// and Close closes. docs/durable.md describes the design.

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

// WithDiskBuffer turns on durable mode: every accepted event's JSON is
// appended to a log in dir (created with mode 0700 if missing) and written
// to the operating system before the enqueue call returns, so it survives
// the process dying at any instant; the fsync policy (WithFsync) bounds
// what a power loss can lose. Delivered and failed events are
// acknowledged in the log (after their callback: a crash between the two
// repeats the callback at the next start, never loses it) and their space
// reclaimed a segment at a time; events without an outcome at Close stay
// on disk and get no callback then (see Client.Close). So a callback, in
// whichever client it runs, is each event's final outcome: an OnError
// that writes a dead-letter file sees each failed event once, and never
// an event that is only waiting on disk. New sends the events an earlier
// client left in dir before
// any new one, with the same messageIds; callbacks receive them as
// messages decoded from the stored JSON. One client at a time may use dir:
// New fails with ErrDiskBufferLocked otherwise. dir must be private to the
// process's user: New refuses (with a *DiskError saying why) a directory
// writable by group or others or owned by another user. New opens a
// directory on a full disk (enqueue calls then return a *DiskError until
// delivered events free space).
//
// The disk is the buffer: QueueCapacity bounds the events held in memory,
// and WithDiskLimit what is accepted. An event that finds memory full is
// kept on disk only (Stats.Spilled) and read back, oldest first, by a
// goroutine of the client's as batches leave; events are sent in the order
// they were accepted, replayed ones first; their callbacks get messages
// decoded from the stored JSON. New does not load the replayed events
// either: they are read back the same way. Flush and Close wait for
// events on disk only like any other, and Close keeps them there like
// the events in memory: Close's error says how many it kept, and they are
// counted in Stats.HandedBack and Stats.OnDisk.
//
// The directory must be left to the client: events whose records another
// process removes, cuts short or replaces before they are read back are
// failed without a callback and counted in Stats.DiskLost (one error log
// line names how many); docs/durable.md lists each such case.
//
// An enqueue call then costs one append to the log more; it returns an
// error matching ErrQueueFull past the disk limit (WithDiskLimit; the
// non-blocking calls at once, EnqueueContext once its context ends, as it
// waits for delivered events to free space) and a *DiskError when the
// write fails. Without this option nothing touches the disk. The files and
// the capacity model are described in docs/durable.md.
func WithDiskBuffer(dir string, opts ...DiskOption) Option {
	return optionFunc(func(s *settings) {
		d := &diskSettings{dir: dir, interval: DefaultFsyncInterval, limit: DefaultDiskLimit, segment: DefaultSegmentSize}
		if dir == "" {
			s.errs = append(s.errs, invalid("DiskBuffer", `""`, "directory must not be empty"))
		}
		for _, o := range opts {
			if o == nil {
				s.errs = append(s.errs, invalid("DiskOption", nil, "must not be nil"))
				continue
			}
			o.applyDisk(d)
		}
		if d.limit < 2*d.segment {
			d.errs = append(d.errs, invalid("DiskBuffer.DiskLimit", d.limit, "must be at least twice the segment size"))
		}
		s.errs = append(s.errs, d.errs...)
		s.disk = d
	})
}

// durable is a client's disk buffer.
type durable struct {
	log      *diskbuf.Log
	dir      string
	policy   FsyncPolicy
	zlog     *zap.Logger
	stop     chan struct{}
	stopped  sync.WaitGroup
	observer func()

	replayed atomic.Int64 // events an earlier client left, less those found not to be events
	skipped  atomic.Int64 // replayed records with a valid checksum but no JSON object
	lost     atomic.Int64 // events on disk only whose record was gone when read back (Stats.DiskLost)

	// The disk as the buffer (spill.go).
	q         *queue
	settle    *settler
	mu        sync.Mutex // an enqueue call's append and its memory-or-disk decision; the reader's hand-over
	spilling  bool       // events go to disk only until the reader has caught up; guarded by mu
	onDisk    int64      // accepted events on disk only, not read back yet; guarded by mu
	runs      []epochRun // their ledger epochs, oldest first; guarded by mu
	onDiskNow atomic.Int64
	spilled   atomic.Int64  // events accepted to disk only since New
	wake      chan struct{} // cap 1: events went to disk only, or places were freed
	readStop  chan struct{}
	readDone  chan struct{}
	// readerDone: Close took the events on disk only (guarded by mu);
	// readFailing: the last read failed (reader goroutine only).
	readerDone, readFailing bool
}

// openDurable opens d.dir and returns the buffer and the number of events
// an earlier client left there (read back later: see startReader).
func openDurable(d *diskSettings, zlog *zap.Logger) (*durable, int, error) {
	log, n, err := diskbuf.OpenLog(d.dir, diskbuf.Options{
		SegmentBytes: d.segment,
		MaxBytes:     d.limit,
		NoMmap:       d.noMmap,
		Logf:         func(format string, args ...any) { zlog.Warn(fmt.Sprintf(format, args...)) },
		Errorf:       func(format string, args ...any) { zlog.Error(fmt.Sprintf(format, args...)) },
	})
	if errors.Is(err, diskbuf.ErrLocked) {
		return nil, 0, fmt.Errorf("%w: %s", ErrDiskBufferLocked, d.dir)
	}
	if err != nil {
		return nil, 0, &DiskError{Op: "open", Dir: d.dir, Err: err}
	}
	dur := &durable{log: log, dir: d.dir, policy: d.policy, zlog: zlog, stop: make(chan struct{}), observer: d.syncObserver,
		wake: make(chan struct{}, 1), readStop: make(chan struct{}), readDone: make(chan struct{})}
	dur.replayed.Store(int64(n))
	st := log.Stats() // logged at every start, so that durable mode shows in the logs
	zlog.Info("disk buffer opened", zap.String("dir", d.dir), zap.Int("replayed", n),
		zap.Int64("bytes", log.Size()), zap.Int64("limit", d.limit),
		zap.Int("torn", st.Torn), zap.Int("corrupt", st.Corrupt),
		zap.Int("missingSegments", st.Missing), zap.Int("skippedEntries", st.Skipped))
	if d.policy == FsyncInterval {
		dur.stopped.Add(1)
		go dur.syncEvery(d.interval)
	}
	return dur, n, nil
}

func (d *durable) syncEvery(iv time.Duration) {
	defer d.stopped.Done()
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			d.sync()
		}
	}
}

func (d *durable) sync() {
	if err := d.log.Sync(); err != nil {
		d.zlog.Error("disk buffer: fsync failed", zap.String("dir", d.dir), zap.Error(err))
	}
	if d.observer != nil {
		d.observer()
	}
}

// beforeBatch runs when a consumer takes a batch (FsyncEveryBatch).
func (d *durable) beforeBatch() {
	if d.policy == FsyncEveryBatch {
		d.sync()
	}
}

// append writes ev's JSON and records its place in ev.
func (d *durable) append(ev *event, data []byte) error {
	seg, off, err := d.log.Append(data)
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
	if err := d.log.Ack(len(onDisk), func(i int) (*diskbuf.Segment, uint32) { return onDisk[i].seg, onDisk[i].off }); err != nil {
		d.zlog.Error("disk buffer: acknowledgement not written; the events may be sent again by a later client",
			zap.String("dir", d.dir), zap.Error(err))
	}
}

// close stops the sync goroutine and closes the log (syncing it).
func (d *durable) close() {
	close(d.stop)
	d.stopped.Wait()
	if err := d.log.Close(); err != nil {
		d.zlog.Error("disk buffer: close failed", zap.String("dir", d.dir), zap.Error(err))
	}
}
