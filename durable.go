package analytics

import (
	"errors"
	"fmt"
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
// config.go); spill.go joins the log to the pipeline: accept appends
// before the event is queued, the settler acknowledges every delivered or
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
