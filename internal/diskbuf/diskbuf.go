// Package diskbuf is the on-disk log behind the client's durable mode: a
// directory of append-only segment files holding events, ack files holding
// their outcomes, and a lock file.
//
// Every file starts with a 16-byte header: a 4-byte magic ("RKSG" for a
// segment, "RKAK" for an ack file), the format version (uint32, little
// endian, FormatVersion) and the file's sequence number (uint64). Records
// follow, each an 8-byte header — the length of the body (uint32, little
// endian) and the CRC-32C of the body — and the body: one kind byte and
// the payload. A segment holds event records (kind 1, the event's JSON).
// An ack file holds acknowledgements (kind 2: (segment, offset) pairs as
// unsigned varints), deletion markers (kind 3: (first, count) ranges of
// segment numbers deleted on purpose) and a floor (kind 4: the oldest
// segment number still in use and the next to be created), written by
// compaction, and counts (kind 5: (segment, events) pairs, written when a
// segment is sealed, so a segment that goes missing is reported with the
// number of events it took). An event is named by its segment and the byte offset of its
// record.
//
// Appends go to the active (newest) segment. Acknowledgements go to the
// active ack file and never to a segment, so reclaiming space never writes
// to a segment and can never start one. A background goroutine deletes
// every sealed segment whose events all have their outcome (after a
// deletion marker for it is on stable storage) and compacts the ack files
// once they outgrow what they still need to say: one pass over a fixed set
// of files, whose output goes to a file of its own. Neither step can make
// work for itself, so both terminate; neither runs in Append.
//
// Open reads every file, reports the events without an acknowledgement,
// and starts a new active segment and ack file. A record whose checksum
// does not match is skipped and counted (as torn when nothing valid
// follows it in its file, as corrupt otherwise); a segment number that is
// missing between present segments without a deletion marker, or a
// segment without a valid header, is counted as missing.
//
// Log is safe for concurrent use.
package diskbuf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	headerSize     = 8  // record header
	fileHeaderSize = 16 // file header: magic, version, sequence number
	kindEvent      = 1
	kindAck        = 2
	kindGone       = 3
	kindFloor      = 4
	kindCount      = 5
	// FormatVersion is the version in every file header this package
	// writes. Open refuses a directory with a file of another version.
	FormatVersion = 1
	// MaxRecord is the largest record body Open accepts; a larger length
	// in a header is treated as corruption.
	MaxRecord = 1 << 20
	segSuffix = ".seg"
	ackSuffix = ".ack"
	tmpSuffix = ".tmp"
	// LockName is the lock file in the directory where the directory
	// itself cannot be locked (Windows, systems without flock).
	LockName = "lock"
	segMagic = "RKSG"
	ackMagic = "RKAK"
	// retryRotate is how long a failed segment creation is not retried
	// (its error is returned at once), so a full disk costs each enqueue
	// call no system call.
	retryRotate = 100 * time.Millisecond
	// minCompact is the size of the ack files below which they are not
	// compacted; above it, compaction runs whenever they doubled since the
	// last one, so its work is proportional to the acknowledgements
	// written.
	minCompact = 64 << 10
	// retryReclaim is how soon a reclaim pass that could not delete a
	// segment (or write its deletion marker) runs again.
	retryReclaim = time.Second
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrFull is returned by Append when a new segment would take the
// directory past Options.MaxBytes.
var ErrFull = errors.New("diskbuf: size limit reached")

// ErrLocked is returned by Open when another Log (in this or another
// process) has the directory open.
var ErrLocked = errors.New("diskbuf: directory is locked by another client")

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("diskbuf: log closed")

// ErrDirGone is returned by Append once the directory was found removed
// or replaced (checked at every segment rotation and Sync).
var ErrDirGone = errors.New("diskbuf: directory was removed or replaced while in use")

// ErrUnsafeDir is returned by Open for a directory that another user could
// write to: writable by group or others, or owned by another user.
var ErrUnsafeDir = errors.New("diskbuf: directory is not private to this user")

// Options configure a Log.
type Options struct {
	SegmentBytes int64 // a segment is sealed once it would grow past this
	MaxBytes     int64 // the files together never exceed this (acks may, briefly)
	// Logf reports skipped records, files and missing segments; nil is
	// silent. Errorf reports lost data (missing segments); nil uses Logf.
	Logf, Errorf func(format string, args ...any)
	// NoMmap writes with write(2) on Linux too (see active).
	NoMmap bool
}

// Segment is one segment file. Its methods are not exported; callers keep
// pointers as handles for Ack.
type Segment struct {
	seq    uint64
	path   string
	size   int64        // bytes used, header included; guarded by Log.mu
	live   atomic.Int64 // event records without an acknowledgement
	sealed bool         // guarded by Log.mu
	// count: event records this Log appended to it; damaged: its file was
	// found shorter than what was written (someone else cut it). Both
	// guarded by Log.mu.
	count   int
	damaged bool
	// undeletable: its deletion failed (logged once); reclaimer only.
	undeletable bool
}

// Stats counts what Open skipped.
type Stats struct {
	Torn    int // invalid bytes at the end of a file (a write cut short)
	Corrupt int // invalid regions followed by valid records, segments with a wrong number in their header
	Missing int // segments lost: absent between present ones without a deletion marker, or without a valid header
	Skipped int // directory entries named like log files that are not regular files
}

// Log is an open directory.
type Log struct {
	dir     string
	dirInfo os.FileInfo
	opts    Options
	lock    io.Closer

	mu       sync.Mutex // appends, rotation, segs
	segs     []*Segment // oldest first; the last is active if act != nil
	act      active     // nil after a failed write, a failed rotation and Close
	actBytes int64      // disk space the active segment takes (preallocated: SegmentBytes)
	nextSeq  uint64
	buf      []byte
	closed   bool
	broken   error // the directory is gone: every append fails
	rotErr   error // the last rotation's failure, returned until rotErrAt+retryRotate
	rotErrAt time.Time
	unsynced []string // segments sealed since the last Sync
	newFiles bool     // a file was created since the last Sync
	written  int64
	dirty    atomic.Bool
	stats    Stats
	reader   *Reader

	ackMu      sync.Mutex // the ack file
	ackF       *os.File   // nil after Close or when it could not be created
	ackSeq     uint64
	ackSize    int64 // bytes of ackF
	ackFiles   []uint64
	ackDirty   atomic.Bool
	ackBuf     []byte
	ackPending [][]byte     // ack records whose write failed (sealed), written before the next; guarded by ackMu
	pendingN   int          // their bytes
	ackWritten atomic.Int64 // bytes of ack records written by this Log
	ackBytes   atomic.Int64 // bytes of every ack file
	compactAt  atomic.Int64 // compaction starts once ackBytes exceeds this
	unmarked   []gap        // segments missing at Open, to mark as deleted; reclaimer only
	retry      bool         // a reclaim pass left segments it could not delete or mark; reclaimer only

	freed chan struct{} // closed (and replaced) when reclaim deletes segments; guarded by mu

	wake  chan struct{}
	flush chan chan struct{} // Reclaim's requests
	quit  chan struct{}
	done  chan struct{}
}

type gap struct{ first, count uint64 }

// Open is OpenLog followed by reading every event it found back (with the
// Reader), oldest first: for tests and tools; a client uses OpenLog and
// reads back as memory allows.
func Open(dir string, opts Options) (*Log, []Replayed, error) {
	l, n, err := OpenLog(dir, opts)
	if err != nil {
		return nil, nil, err
	}
	recs := make([]Replayed, 0, n)
	for len(recs) < n {
		got, lost, err := l.Reader().Next(n-len(recs), 4<<20)
		if err != nil {
			l.Close()
			return nil, nil, err
		}
		recs = append(recs, got...)
		n -= lost
		if len(got) == 0 && lost == 0 {
			break
		}
	}
	l.Reader().Close()
	return l, recs, nil
}

// OpenLog locks dir (creating it if needed), reads its files and returns
// the log and the number of events that have no acknowledgement. Their
// bytes are not kept: the Reader reads them back, oldest first. A
// directory writable by group or others, or owned by another user, is
// refused (ErrUnsafeDir). When no segment can be created (a full disk, or
// the limit reached by what the directory holds) OpenLog still succeeds:
// the events can be read back, and Append fails until there is room.
func OpenLog(dir string, opts Options) (*Log, int, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 4 << 20
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 512 << 20
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, 0, err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, 0, err
	}
	if err := checkPrivate(dir, fi); err != nil {
		return nil, 0, err
	}
	// Nothing in dir is read or written before the lock is held: a
	// refused client touches no file of the holder's.
	lock, fi, err := lockDir(dir)
	if err != nil {
		return nil, 0, err
	}
	if err := checkPrivate(dir, fi); err != nil { // replaced since the first check
		lock.Close()
		return nil, 0, err
	}
	l := &Log{
		dir: dir, dirInfo: fi, opts: opts, lock: lock, buf: make([]byte, 0, 4096),
		freed: make(chan struct{}),
		wake:  make(chan struct{}, 1), flush: make(chan chan struct{}), quit: make(chan struct{}), done: make(chan struct{}),
	}
	found, replayed, err := l.load()
	if err != nil {
		lock.Close()
		return nil, 0, err
	}
	var first uint64
	if len(l.segs) > 0 {
		first = l.segs[0].seq
	}
	l.reader = newReader(l, first, found)
	l.compactAt.Store(max(minCompact, 2*l.ackBytes.Load()))
	if err := l.newAckFile(); err != nil {
		l.logf("diskbuf: no new ack file at open (tried again in the background): %v", err)
	}
	if err := l.rotate(true); err != nil {
		l.logf("diskbuf: no new segment at open (appends fail until there is room): %v", err)
	}
	go l.reclaimer()
	l.poke()
	return l, replayed, nil
}

// Reader returns the log's reader, positioned at the oldest event Open
// found (or at the first segment created since, if there was none).
func (l *Log) Reader() *Reader { return l.reader }

// giveUp marks s damaged, seals it if it is the active segment (appends
// go to a new one) and returns the event records this Log appended to it.
func (l *Log) giveUp(s *Segment) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.act != nil && l.segs[len(l.segs)-1] == s {
		_ = l.sealActiveLocked()
	}
	s.damaged = true
	return s.count
}

// segmentFrom returns the present segment with the smallest number ≥ seq,
// its written size and whether it is sealed.
func (l *Log) segmentFrom(seq uint64) (*Segment, int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.segs, seq, func(s *Segment, seq uint64) int {
		switch {
		case s.seq < seq:
			return -1
		case s.seq > seq:
			return 1
		}
		return 0
	})
	if i == len(l.segs) {
		return nil, 0, false
	}
	s := l.segs[i]
	return s, s.size, s.sealed
}

// appended returns the number of event records this Log appended to s.
func (l *Log) appended(s *Segment) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return s.count
}

// segmentsFrom calls f, under l.mu, with each present segment numbered
// seq or more, oldest first, with its written size and the event records
// this Log appended to it: a consistent view of them for the Reader.
func (l *Log) segmentsFrom(seq uint64, f func(s *Segment, size int64, count int)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		if s.seq >= seq {
			f(s, s.size, s.count)
		}
	}
}

// lose drops n events of s that cannot be read back, as their
// acknowledgement would.
func (l *Log) lose(s *Segment, n int) {
	if s.live.Add(-int64(n)) <= 0 {
		l.poke()
	}
}

func (l *Log) logf(format string, args ...any) {
	if l.opts.Logf != nil {
		l.opts.Logf(format, args...)
	}
}

func (l *Log) errorf(format string, args ...any) {
	if l.opts.Errorf != nil {
		l.opts.Errorf(format, args...)
		return
	}
	l.logf(format, args...)
}

// Stats returns what Open skipped.
func (l *Log) Stats() Stats { return l.stats }

func (l *Log) segPath(seq uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("%020d%s", seq, segSuffix))
}

func (l *Log) ackPath(seq uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("%020d%s", seq, ackSuffix))
}

func fileHeader(magic string, seq uint64) []byte {
	h := make([]byte, fileHeaderSize)
	copy(h, magic)
	binary.LittleEndian.PutUint32(h[4:], FormatVersion)
	binary.LittleEndian.PutUint64(h[8:], seq)
	return h
}

// parseName returns the sequence number and suffix of a log file name.
func parseName(name string) (uint64, string, bool) {
	for _, suf := range []string{segSuffix, ackSuffix} {
		if digits, ok := strings.CutSuffix(name, suf); ok && len(digits) == 20 {
			seq, err := strconv.ParseUint(digits, 10, 64)
			return seq, suf, err == nil && seq > 0
		}
	}
	return 0, "", false
}

// readRegular reads path if it is a regular file (not following a
// symbolic link, not blocking on a FIFO).
func readRegular(path string) ([]byte, error) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, fi.Size())
	_, err = io.ReadFull(f, data)
	return data, err
}

var (
	errNotRegular = errors.New("not a regular file")
	errDamaged    = errors.New("diskbuf: segment file was cut short, removed or replaced by another process")
	errNoAckFile  = errors.New("diskbuf: no ack file (it could not be created)")
)

// checkHeader reports whether data starts with a header of magic and seq;
// a header of another version is an error.
func checkHeader(data []byte, magic string, seq uint64) (ok bool, err error) {
	if len(data) < fileHeaderSize || string(data[:4]) != magic {
		return false, nil
	}
	if v := binary.LittleEndian.Uint32(data[4:]); v != FormatVersion {
		return false, fmt.Errorf("diskbuf: file format version %d, this version reads %d", v, FormatVersion)
	}
	return binary.LittleEndian.Uint64(data[8:]) == seq, nil
}

// load reads the directory's files (see the package comment) and returns
// the segments Open found, by number, each with the offsets of its events
// without an acknowledgement (none for a segment without a valid header),
// and how many such events there are in all.
func (l *Log) load() (found map[uint64][]uint32, events int, err error) {
	found = map[uint64][]uint32{}
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, 0, err
	}
	var segSeqs, ackSeqs []uint64
	taken := map[uint64]bool{} // segment numbers used by entries that are not regular files
	var maxSeq uint64
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, tmpSuffix) && e.Type().IsRegular() {
			_ = os.Remove(filepath.Join(l.dir, name)) // a compaction cut short
			continue
		}
		seq, suf, ok := parseName(name)
		if !ok {
			continue
		}
		if !e.Type().IsRegular() {
			l.stats.Skipped++
			l.logf("diskbuf: skipped %s: not a regular file (%v)", name, e.Type())
			if suf == segSuffix {
				taken[seq] = true
				maxSeq = max(maxSeq, seq)
			}
			continue
		}
		if suf == segSuffix {
			segSeqs = append(segSeqs, seq)
			maxSeq = max(maxSeq, seq)
		} else {
			ackSeqs = append(ackSeqs, seq)
		}
	}
	slices.Sort(segSeqs)
	slices.Sort(ackSeqs)

	// The ack files: acknowledged offsets per segment, deletion markers.
	acked := map[uint64][]uint32{}
	counts := map[uint64]uint64{}
	var gone []gap
	var floor uint64 = 1
	for _, seq := range ackSeqs {
		path := l.ackPath(seq)
		data, err := readRegular(path)
		if errors.Is(err, errNotRegular) {
			l.stats.Skipped++
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		l.ackFiles = append(l.ackFiles, seq)
		l.ackSeq = max(l.ackSeq, seq)
		l.ackBytes.Add(int64(len(data)))
		ok, err := checkHeader(data, ackMagic, seq)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", path, err)
		}
		if !ok {
			if len(data) > 0 {
				l.stats.Corrupt++
				l.logf("diskbuf: skipped %s: no valid header", filepath.Base(path))
			}
			continue
		}
		scanRecords(data, fileHeaderSize, ackKinds, l.skipped(path), func(_ int, kind byte, p []byte) {
			switch kind {
			case kindAck:
				forEachPair(p, func(sq, off uint64) {
					if off < 1<<32 {
						acked[sq] = append(acked[sq], uint32(off))
					}
					maxSeq = max(maxSeq, sq)
				})
			case kindGone:
				forEachPair(p, func(first, n uint64) {
					if n > 0 && first+n > first {
						gone = append(gone, gap{first, n})
						maxSeq = max(maxSeq, first+n-1)
					}
				})
			case kindFloor:
				forEachPair(p, func(fl, next uint64) {
					floor = max(floor, fl)
					if next > 0 {
						maxSeq = max(maxSeq, next-1)
					}
				})
			case kindCount:
				forEachPair(p, func(sq, n uint64) { counts[sq] = n })
			}
		})
	}
	l.nextSeq = maxSeq + 1
	// lostIn is what the segments [first, first+n) held without an
	// acknowledgement, as far as count records tell (known false when a
	// segment of them has none).
	lostIn := func(first, n uint64) (events uint64, known bool) {
		known = true
		if n > uint64(len(counts)) { // a wide range: only counted segments can be known
			known = false
		}
		for seq, c := range counts {
			if seq >= first && seq-first < n {
				events += c - min(c, uint64(len(acked[seq])))
			}
		}
		if known {
			for seq := first; seq-first < n; seq++ {
				if _, ok := counts[seq]; !ok {
					known = false
					break
				}
			}
		}
		return events, known
	}
	lostText := func(first, n uint64) string {
		if events, known := lostIn(first, n); known {
			return fmt.Sprintf("%d event(s) without an outcome lost", events)
		} else if events > 0 {
			return fmt.Sprintf("their events are lost (%d counted; a segment not sealed before a crash is not)", events)
		}
		return "their events are lost (how many is not known: not sealed before a crash)"
	}
	gone = mergeGaps(gone)

	// The segments, one at a time: only the offsets of the events to
	// replay are kept.
	for _, seq := range segSeqs {
		s := &Segment{seq: seq, path: l.segPath(seq), sealed: true}
		data, err := readRegular(s.path)
		if errors.Is(err, errNotRegular) { // replaced since ReadDir
			l.stats.Skipped++
			taken[seq] = true
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		ok, err := checkHeader(data, segMagic, seq)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", s.path, err)
		}
		end := len(data)
		for end > 0 && data[end-1] == 0 {
			end--
		}
		if !ok {
			// Deleted (with a marker) like an empty segment. A segment
			// appears under its name with its header in it (see
			// createSegment), so a crash cannot leave one without: it was
			// emptied or overwritten, even the newest.
			switch {
			case len(data) >= fileHeaderSize && string(data[:4]) == segMagic:
				l.stats.Corrupt++
				l.logf("diskbuf: skipped %s: its header names another segment", filepath.Base(s.path))
			default:
				l.stats.Missing++
				l.errorf("diskbuf: segment %s has no valid header (emptied or overwritten): %s", filepath.Base(s.path), lostText(seq, 1))
			}
			s.size = int64(len(data))
			l.segs = append(l.segs, s)
			found[seq] = nil
			continue
		}
		if end < fileHeaderSize {
			end = fileHeaderSize
		}
		if end < len(data) {
			// The unused preallocated tail of a segment a crash left
			// behind: given back, so it does not count against the limit.
			if f, err := openRegular(s.path, os.O_WRONLY); err == nil {
				if f.Truncate(int64(end)) == nil {
					data = data[:end]
				}
				f.Close()
			}
		}
		s.size = int64(len(data))
		offs := acked[seq]
		slices.Sort(offs)
		j := 0
		var replay []uint32
		scanRecords(data, fileHeaderSize, segKinds, l.skipped(s.path), func(off int, _ byte, payload []byte) {
			for j < len(offs) && offs[j] < uint32(off) {
				j++
			}
			if j < len(offs) && offs[j] == uint32(off) {
				return
			}
			s.live.Add(1)
			replay = append(replay, uint32(off))
			events++
		})
		l.segs = append(l.segs, s)
		found[seq] = replay
	}

	// Missing segments: numbers between the floor and the newest segment
	// with neither a file nor a deletion marker.
	present := slices.Clone(segSeqs)
	for seq := range taken {
		present = append(present, seq)
	}
	slices.Sort(present)
	present = slices.Compact(present)
	if len(l.ackFiles) == 0 && len(present) > 0 {
		// A log writes an ack file before its first segment: none beside
		// segments means they were deleted. Every event still in a
		// segment is sent again (the API deduplicates by messageId), and
		// a gap in the numbers may be segments deleted on purpose, whose
		// markers went with the ack files: not reported as lost.
		l.logf("diskbuf: no ack file beside %d segment(s) (deleted?): every event in them is sent again, and gaps between them are not reported as lost", len(present))
		return found, events, nil
	}
	prev := floor - 1
	for _, seq := range present {
		if seq <= prev {
			continue
		}
		if seq > prev+1 {
			for _, g := range uncovered(gone, prev+1, seq-prev-1) {
				l.stats.Missing += int(min(g.count, 1<<30))
				l.errorf("diskbuf: %d segment(s) from number %d missing from the directory: %s", g.count, g.first, lostText(g.first, g.count))
				l.unmarked = append(l.unmarked, g)
			}
		}
		prev = seq
	}
	return found, events, nil
}

// mergeGaps sorts gs and merges overlapping or adjacent ranges.
func mergeGaps(gs []gap) []gap {
	slices.SortFunc(gs, func(a, b gap) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	out := gs[:0]
	for _, g := range gs {
		if n := len(out); n > 0 && g.first <= out[n-1].first+out[n-1].count {
			out[n-1].count = max(out[n-1].count, g.first+g.count-out[n-1].first)
			continue
		}
		out = append(out, g)
	}
	return out
}

// uncovered returns the parts of [first, first+count) that no range of
// gs (merged) covers.
func uncovered(gs []gap, first, count uint64) []gap {
	var out []gap
	end := first + count
	at := first
	for _, g := range gs {
		gEnd := g.first + g.count
		if gEnd <= at || g.first >= end {
			continue
		}
		if g.first > at {
			out = append(out, gap{at, g.first - at})
		}
		at = max(at, gEnd)
	}
	if at < end {
		out = append(out, gap{at, end - at})
	}
	return out
}

// skipped returns the reporter of invalid regions in path for scanRecords.
func (l *Log) skipped(path string) func(off, n int, torn bool) {
	return func(off, n int, torn bool) {
		if torn {
			l.stats.Torn++
			l.logf("diskbuf: skipped a torn record (%d bytes) at the end of %s", n, filepath.Base(path))
		} else {
			l.stats.Corrupt++
			l.logf("diskbuf: skipped %d corrupt bytes at offset %d of %s", n, off, filepath.Base(path))
		}
	}
}

var (
	segKinds = []byte{kindEvent}
	ackKinds = []byte{kindAck, kindGone, kindFloor, kindCount}
)

// scanRecords calls f for every valid record of data from start, and bad
// (if not nil) for every invalid region: torn when no valid record follows
// it. Zero bytes at the end are the unused part of a preallocated segment.
//
// Resynchronising after an invalid byte tries a record at every offset,
// and a crafted file could make each try checksum up to MaxRecord bytes.
// The bytes checksummed are therefore bounded, to four times the file's
// size plus one largest record: past that, the rest of the file is one
// invalid region. So a scan costs O(len(data)) whatever the data.
func scanRecords(data []byte, start int, kinds []byte, bad func(off, n int, torn bool), f func(off int, kind byte, payload []byte)) {
	end := len(data)
	for end > start && data[end-1] == 0 {
		end--
	}
	budget := 4*len(data) + MaxRecord
	off := start
	from := -1 // start of the invalid region being skipped
	for off < end {
		n, ok := valid(data[off:end], kinds, &budget)
		if budget < 0 {
			if from < 0 {
				from = off
			}
			if bad != nil {
				bad(from, end-from, false)
			}
			return
		}
		if ok {
			if from >= 0 && bad != nil {
				bad(from, off-from, false)
			}
			from = -1
			body := data[off+headerSize : off+n]
			f(off, body[0], body[1:])
			off += n
			continue
		}
		if from < 0 {
			from = off
		}
		off++
	}
	if from >= 0 && bad != nil {
		bad(from, end-from, true)
	}
}

// valid reports whether p starts with a whole record of one of kinds
// whose checksum matches, and its size; the bytes checksummed are taken
// from budget.
func valid(p []byte, kinds []byte, budget *int) (int, bool) {
	if len(p) < headerSize+1 {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(p)
	if n == 0 || n > MaxRecord || int(n) > len(p)-headerSize {
		return 0, false
	}
	body := p[headerSize : headerSize+int(n)]
	if !slices.Contains(kinds, body[0]) { // cheap test first: resyncing tries every offset
		return 0, false
	}
	if *budget -= int(n); *budget < 0 {
		return 0, false
	}
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(p[4:]) {
		return 0, false
	}
	return headerSize + int(n), true
}

// sealRecord fills the header of the record in b (header space first, then
// the body).
func sealRecord(b []byte) {
	binary.LittleEndian.PutUint32(b, uint32(len(b)-headerSize))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[headerSize:], castagnoli))
}

// active is the writing end of the active segment: a shared memory
// mapping of the preallocated file on Linux (a copy is all an append costs,
// and the page cache keeps it when the process dies), the file itself with
// one write(2) per record elsewhere.
type active interface {
	// write stores rec at offset off, the segment's end: the body first
	// and the header last, so a record cut short has no valid header.
	write(off int64, rec []byte) error
	sync() error
	// seal makes the file used bytes long and closes it; a file someone
	// else shrank is closed as it is, with an error matching errDamaged.
	seal(used int64) error
	// preallocated reports whether the file takes its full size on disk.
	preallocated() bool
	// check returns an error matching errDamaged when the file is shorter
	// than it must be (used bytes written; a preallocated file's full
	// size) or no longer has its name: someone else cut, removed or
	// replaced it.
	check(used int64) error
	// abandon closes the file as it is, neither cut nor synced (what a
	// crash leaves; tests use it).
	abandon()
}

// checkDirLocked returns ErrDirGone (and remembers it) when the directory
// was removed or replaced; l.mu is held.
func (l *Log) checkDirLocked() error {
	if l.broken != nil {
		return l.broken
	}
	fi, err := os.Stat(l.dir)
	if err == nil && os.SameFile(fi, l.dirInfo) {
		return nil
	}
	l.markGoneLocked()
	return l.broken
}

func (l *Log) markGoneLocked() {
	l.broken = ErrDirGone
	l.errorf("diskbuf: directory %s was removed or replaced: appends fail from now on", l.dir)
	_ = l.sealActiveLocked()
}

// shrunkLocked reports, once, that s was cut short, removed or replaced
// by someone else; the events on disk only in it that are gone are
// counted as lost by the Reader when it gets there. l.mu is held.
func (l *Log) shrunkLocked(s *Segment, err error) {
	if s.damaged {
		return
	}
	s.damaged = true
	if l.broken == nil { // the whole directory gone is reported once, by markGoneLocked
		l.errorf("%v; appends go to a new segment", err)
	}
}

// rotate seals the active segment and starts a new one; l.mu is held (or
// the log is not shared yet). With limit, the new segment must fit under
// MaxBytes (what every file takes, the ack files included).
func (l *Log) rotate(limit bool) error {
	if err := l.checkDirLocked(); err != nil {
		return err
	}
	if l.rotErr != nil && time.Since(l.rotErrAt) < retryRotate {
		return l.rotErr
	}
	_ = l.sealActiveLocked() // sealed either way: its records were written, or failed, before
	if limit && l.usedLocked()+l.opts.SegmentBytes > l.opts.MaxBytes {
		return ErrFull
	}
	var err error
	for try := 0; try < 8; try++ {
		seq := l.nextSeq
		s := &Segment{seq: seq, path: l.segPath(seq), size: fileHeaderSize}
		var a active
		a, err = openActive(s.path, l.opts.SegmentBytes, l.opts.NoMmap, fileHeader(segMagic, seq))
		if errors.Is(err, os.ErrExist) {
			l.nextSeq++ // something else has that name: never ours
			continue
		}
		if err != nil {
			break
		}
		l.nextSeq++
		l.rotErr = nil
		l.act = a
		l.actBytes = fileHeaderSize
		if a.preallocated() {
			l.actBytes = l.opts.SegmentBytes
		}
		l.segs = append(l.segs, s)
		l.newFiles = true
		return nil
	}
	l.rotErr, l.rotErrAt = err, time.Now()
	return err
}

// sealActiveLocked seals the active segment, if any, and wakes the
// reclaimer (it may hold nothing live already).
func (l *Log) sealActiveLocked() error {
	if l.act == nil {
		return nil
	}
	s := l.segs[len(l.segs)-1]
	s.sealed = true
	err := l.act.seal(s.size)
	if errors.Is(err, errDamaged) {
		l.shrunkLocked(s, err)
	}
	if s.count > 0 {
		// How many events it took, for a later Open that finds it gone;
		// best effort (a full disk: reported without the number).
		l.ackMu.Lock()
		b := append(l.ackBufLocked(), kindCount)
		b = binary.AppendUvarint(b, s.seq)
		b = binary.AppendUvarint(b, uint64(s.count))
		_ = l.writeAckLocked(b)
		l.ackBuf = b[:0]
		l.ackMu.Unlock()
	}
	l.act = nil
	l.actBytes = 0
	l.unsynced = append(l.unsynced, s.path)
	l.poke()
	return err
}

// usedLocked is what the files take on disk: the segments (the active one
// preallocated in full on Linux) and the ack files.
func (l *Log) usedLocked() int64 {
	n := l.ackBytes.Load()
	for _, s := range l.segs {
		n += s.size
	}
	if l.act != nil {
		n += l.actBytes - l.segs[len(l.segs)-1].size
	}
	return n
}

// Append writes one event record and returns its handle. It fails with
// ErrFull when a new segment would take the directory past MaxBytes,
// ErrClosed after Close, ErrDirGone once the directory is gone, or the
// error of the file system; after a failed write the next call starts a
// new segment, so a partial record is never followed by a good one in the
// same file. It holds the log's mutex for the copy into the segment (and,
// once per segment, for sealing one and creating the next); no other I/O
// happens in Append.
func (l *Log) Append(payload []byte) (*Segment, uint32, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, 0, ErrClosed
	}
	if l.broken != nil {
		return nil, 0, l.broken
	}
	b := append(l.buf[:0], 0, 0, 0, 0, 0, 0, 0, 0, kindEvent)
	b = append(b, payload...)
	s, off, err := l.writeLocked(b)
	l.buf = b[:0]
	if cap(l.buf) > 64<<10 {
		l.buf = make([]byte, 0, 4096)
	}
	if err != nil {
		return nil, 0, err
	}
	s.live.Add(1)
	return s, off, nil
}

func (l *Log) writeLocked(b []byte) (*Segment, uint32, error) {
	sealRecord(b)
	if int64(len(b)) > l.opts.SegmentBytes-fileHeaderSize {
		return nil, 0, fmt.Errorf("diskbuf: a %d-byte record does not fit in a segment", len(b))
	}
	if l.act == nil || l.segs[len(l.segs)-1].size+int64(len(b)) > l.opts.SegmentBytes {
		if err := l.rotate(true); err != nil {
			return nil, 0, err
		}
	}
	s := l.segs[len(l.segs)-1]
	off := s.size
	if err := l.act.write(off, b); err != nil {
		if errors.Is(err, errDamaged) {
			l.shrunkLocked(s, err)
		}
		// Nothing after a failed write goes to this segment.
		if serr := l.sealActiveLocked(); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, 0, err
	}
	s.size += int64(len(b))
	s.count++
	l.written += int64(len(b))
	l.dirty.Store(true)
	return s, uint32(off), nil
}

// newAckFile starts the next ack file; it is the one Ack appends to.
func (l *Log) newAckFile() error {
	seq := l.ackSeq + 1
	path := l.ackPath(seq)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(fileHeader(ackMagic, seq)); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	l.ackMu.Lock()
	old := l.ackF
	l.ackF, l.ackSeq, l.ackSize = f, seq, fileHeaderSize
	l.ackFiles = append(l.ackFiles, seq)
	l.ackMu.Unlock()
	l.ackBytes.Add(fileHeaderSize)
	l.ackDirty.Store(true)
	l.mu.Lock()
	l.newFiles = true
	l.mu.Unlock()
	if old != nil {
		_ = old.Sync()
		old.Close()
	}
	return nil
}

// writeAckLocked appends one record (header space first) to the ack file;
// l.ackMu is held. A failed write is cut off again, so the file never
// holds part of a record before a whole one.
func (l *Log) writeAckLocked(b []byte) error {
	if l.ackF == nil {
		return errNoAckFile
	}
	sealRecord(b)
	if _, err := l.ackF.WriteAt(b, l.ackSize); err != nil {
		_ = l.ackF.Truncate(l.ackSize)
		return err
	}
	l.ackSize += int64(len(b))
	l.ackBytes.Add(int64(len(b)))
	l.ackWritten.Add(int64(len(b)))
	l.ackDirty.Store(true)
	return nil
}

// maxPending bounds the bytes of ack records kept for a later write when
// writing them failed; past it, records are dropped (their events may be
// sent again by a later client, which the failed Ack's error says).
const maxPending = 16 << 20

// keepPendingLocked keeps a copy of the sealed record b to write later;
// l.ackMu is held.
func (l *Log) keepPendingLocked(b []byte) {
	if l.pendingN+len(b) <= maxPending {
		l.ackPending = append(l.ackPending, slices.Clone(b))
		l.pendingN += len(b)
	}
}

// flushPendingLocked writes the ack records kept after a failed write, in
// order; l.ackMu is held.
func (l *Log) flushPendingLocked() error {
	for len(l.ackPending) > 0 {
		if err := l.writeAckLocked(l.ackPending[0]); err != nil {
			return err
		}
		l.pendingN -= len(l.ackPending[0])
		l.ackPending[0] = nil
		l.ackPending = l.ackPending[1:]
	}
	l.ackPending = nil
	return nil
}

// hasPending reports ack records waiting for a write.
func (l *Log) hasPending() bool {
	l.ackMu.Lock()
	defer l.ackMu.Unlock()
	return len(l.ackPending) > 0
}

// Ack acknowledges n events: at(i) names the i-th. It appends ack records
// to the ack file (even past MaxBytes) and wakes the reclaimer when a
// segment may have become deletable; it never deletes, reads or creates a
// segment itself. A write error is returned; the events count as
// acknowledged in this process either way, and the records that could
// not be written (a read-only or full file system, for a while) are kept
// and written before the next ones, or by the reclaimer, which tries every
// second; a later Open may replay those never written whose segment was
// not deleted.
func (l *Log) Ack(n int, at func(i int) (*Segment, uint32)) error {
	if n == 0 {
		return nil
	}
	var err error
	wake := false
	l.ackMu.Lock()
	for from := 0; from < n; from += ackChunk {
		to := min(from+ackChunk, n)
		b := append(l.ackBufLocked(), kindAck)
		for i := from; i < to; i++ {
			s, off := at(i)
			b = binary.AppendUvarint(b, s.seq)
			b = binary.AppendUvarint(b, uint64(off))
		}
		if err == nil {
			err = l.flushPendingLocked()
		}
		if err == nil {
			err = l.writeAckLocked(b)
		}
		if err != nil {
			sealRecord(b)
			l.keepPendingLocked(b)
		}
		l.ackBuf = b[:0]
	}
	l.ackMu.Unlock()
	for i := 0; i < n; i++ {
		if s, _ := at(i); s.live.Add(-1) == 0 {
			wake = true
		}
	}
	if wake || l.ackBytes.Load() > l.compactAt.Load() {
		l.poke()
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		err = nil // after Close: the next Open replays them
	}
	return err
}

// ackBufLocked returns the record buffer with room for the header; l.ackMu
// is held.
func (l *Log) ackBufLocked() []byte {
	if cap(l.ackBuf) > 64<<10 {
		l.ackBuf = nil
	}
	return append(l.ackBuf[:0], 0, 0, 0, 0, 0, 0, 0, 0)
}

// ackChunk events per ack record: 20 bytes of varints each at most.
const ackChunk = maxAckBody / 20

// maxAckBody bounds an ack record.
const maxAckBody = 16 << 10

// forEachPair calls f for each pair of unsigned varints of p.
func forEachPair(p []byte, f func(a, b uint64)) {
	for len(p) > 0 {
		a, n := binary.Uvarint(p)
		if n <= 0 {
			return
		}
		b, m := binary.Uvarint(p[n:])
		if m <= 0 {
			return
		}
		p = p[n+m:]
		f(a, b)
	}
}

func (l *Log) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// reclaimer runs reclaim and compaction, off every caller's path, until
// Close.
func (l *Log) reclaimer() {
	defer close(l.done)
	for {
		var reply chan struct{}
		var retry <-chan time.Time
		if l.retry || l.hasPending() {
			retry = time.After(retryReclaim)
		}
		select {
		case <-l.quit:
			return
		case <-l.wake:
		case reply = <-l.flush:
		case <-retry:
		}
		l.ackMu.Lock()
		noAcks := l.ackF == nil
		l.ackMu.Unlock()
		if noAcks {
			_ = l.newAckFile() // none since Open (a full disk): tried at every wake
		}
		l.ackMu.Lock()
		_ = l.flushPendingLocked()
		l.ackMu.Unlock()
		l.reclaim()
		if l.ackBytes.Load() > l.compactAt.Load() || len(l.ackFiles) > 2 {
			l.compact()
		}
		if reply != nil {
			close(reply)
		}
	}
}

// Reclaim runs a pass of the reclaimer and waits for it: every sealed
// segment without live events is deleted when it returns (unless the disk
// refused its deletion marker). Tests use it; the log needs no call.
func (l *Log) Reclaim() {
	reply := make(chan struct{})
	select {
	case l.flush <- reply:
		<-reply
	case <-l.done:
	}
}

// reclaim deletes every sealed segment that holds nothing live. One pass
// over the segment list: it writes only to the ack file, so it cannot
// create a segment or make more work for itself. A deletion marker for
// the segments goes first, on stable storage, so a later Open tells a
// deleted segment from a lost one. When the marker cannot be written (a
// full disk), the oldest of them are emptied to their header instead,
// which gives their space back and leaves a segment holding nothing (a
// later Open reports no loss); they are deleted once a marker can be
// written. A segment leaves the list only when its file is gone: one
// whose deletion fails (a directory made read-only for a while) stays,
// its acknowledgements with it, and the deletion is tried again.
func (l *Log) reclaim() {
	l.mu.Lock()
	var gone []*Segment
	prefix := 0 // how many of gone are the oldest segments
	for i, s := range l.segs {
		if s.sealed && s.live.Load() <= 0 {
			if len(gone) == i {
				prefix++
			}
			gone = append(gone, s)
		}
	}
	l.mu.Unlock()
	marks := slices.Clone(l.unmarked)
	for _, s := range gone {
		marks = append(marks, gap{s.seq, 1})
	}
	if len(marks) == 0 {
		l.retry = false
		return
	}
	if err := l.writeMarks(mergeGaps(marks)); err != nil {
		l.retry = len(gone) > 0
		l.empty(gone[:prefix])
		return
	}
	l.unmarked = nil
	l.retry = false
	removed := make(map[*Segment]bool, len(gone))
	for _, s := range gone {
		if err := removeSegment(s.path); err != nil {
			l.retry = true
			if !s.undeletable {
				s.undeletable = true // logged once per segment
				l.logf("diskbuf: could not delete %s (tried again): %v", filepath.Base(s.path), err)
			}
			continue
		}
		removed[s] = true
	}
	if len(removed) == 0 {
		return
	}
	l.mu.Lock()
	l.segs = slices.DeleteFunc(l.segs, func(s *Segment) bool { return removed[s] })
	l.signalFreedLocked()
	l.mu.Unlock()
}

// removeSegment deletes the segment file path. What is no longer a
// regular file there is not the log's to delete: it is left (a later Open
// skips it), and so is the name. Done when nothing of the log's is left.
func removeSegment(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// empty cuts the files of segs, which hold nothing live, to their header:
// ftruncate needs no free block, so this works on a full disk, where no
// deletion marker can be written. They stay in the list until a marker
// lets reclaim delete them.
func (l *Log) empty(segs []*Segment) {
	done := false
	for _, s := range segs {
		l.mu.Lock()
		size := s.size
		l.mu.Unlock()
		if size <= fileHeaderSize {
			continue // emptied by an earlier pass
		}
		f, err := openRegular(s.path, os.O_WRONLY)
		if err != nil {
			continue
		}
		if err := f.Truncate(fileHeaderSize); err == nil {
			l.mu.Lock()
			s.size = fileHeaderSize
			l.mu.Unlock()
			done = true
		}
		f.Close()
	}
	if done {
		l.mu.Lock()
		l.signalFreedLocked()
		l.mu.Unlock()
	}
}

// signalFreedLocked wakes the waiters for room; l.mu is held.
func (l *Log) signalFreedLocked() {
	if !l.closed {
		close(l.freed)
		l.freed = make(chan struct{})
	}
}

// Freed returns a channel closed the next time segments are deleted (room
// may have come back under MaxBytes), or at Close.
func (l *Log) Freed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.freed
}

// writeMarks appends deletion markers for gs and syncs the ack file.
func (l *Log) writeMarks(gs []gap) error {
	l.ackMu.Lock()
	defer l.ackMu.Unlock()
	if err := l.flushPendingLocked(); err != nil {
		return err
	}
	for len(gs) > 0 {
		b := append(l.ackBufLocked(), kindGone)
		for len(gs) > 0 && len(b) < maxAckBody {
			b = binary.AppendUvarint(b, gs[0].first)
			b = binary.AppendUvarint(b, gs[0].count)
			gs = gs[1:]
		}
		err := l.writeAckLocked(b)
		l.ackBuf = b[:0]
		if err != nil {
			return err
		}
	}
	if l.ackF == nil {
		return errNoAckFile
	}
	return l.ackF.Sync()
}

// compact rewrites the ack files but the active one into one file that
// keeps only what a later Open needs: the acknowledgements of events in
// segments still present, the deletion markers above the oldest present
// segment, and a floor record. The files compacted are fixed when it
// starts (a new active ack file takes the acknowledgements that arrive
// meanwhile) and its output is a file of its own, so it is one pass of
// bounded work. A crash at any point leaves either the old files or the
// new one (and maybe old ones beside it: they only repeat it).
func (l *Log) compact() {
	old := slices.Clone(l.ackFiles)
	if err := l.newAckFile(); err != nil {
		l.compactAt.Store(2 * l.ackBytes.Load()) // retried once the files doubled
		return
	}
	l.mu.Lock()
	present := make(map[uint64]bool, len(l.segs))
	floor := l.nextSeq
	for _, s := range l.segs {
		present[s.seq] = true
		floor = min(floor, s.seq)
	}
	next := l.nextSeq
	l.mu.Unlock()

	target := old[len(old)-1]
	out := fileHeader(ackMagic, target)
	rec := func(kind byte) int {
		out = append(out, 0, 0, 0, 0, 0, 0, 0, 0, kind)
		return len(out) - headerSize - 1
	}
	var gone, counts []gap
	at := rec(kindAck)
	var oldBytes int64
	for _, seq := range old {
		data, err := readRegular(l.ackPath(seq))
		if err != nil {
			continue // not compacted: still there, read again by Open
		}
		oldBytes += int64(len(data))
		if ok, _ := checkHeader(data, ackMagic, seq); !ok {
			continue
		}
		scanRecords(data, fileHeaderSize, ackKinds, nil, func(_ int, kind byte, p []byte) {
			switch kind {
			case kindAck:
				forEachPair(p, func(sq, off uint64) {
					if !present[sq] {
						return
					}
					if len(out)-at > maxAckBody {
						sealRecord(out[at:])
						at = rec(kindAck)
					}
					out = binary.AppendUvarint(out, sq)
					out = binary.AppendUvarint(out, off)
				})
			case kindGone:
				forEachPair(p, func(first, n uint64) {
					if first+n > floor && n > 0 {
						gone = append(gone, gap{max(first, floor), first + n - max(first, floor)})
					}
				})
			case kindCount:
				forEachPair(p, func(sq, n uint64) {
					if present[sq] {
						counts = append(counts, gap{sq, n})
					}
				})
			}
		})
	}
	if len(out)-at == headerSize+1 {
		out = out[:at]
	} else {
		sealRecord(out[at:])
	}
	for _, g := range mergeGaps(gone) {
		at = rec(kindGone)
		out = binary.AppendUvarint(out, g.first)
		out = binary.AppendUvarint(out, g.count)
		sealRecord(out[at:])
	}
	for len(counts) > 0 {
		at = rec(kindCount)
		for len(counts) > 0 && len(out)-at < maxAckBody {
			out = binary.AppendUvarint(out, counts[0].first)
			out = binary.AppendUvarint(out, counts[0].count)
			counts = counts[1:]
		}
		sealRecord(out[at:])
	}
	at = rec(kindFloor)
	out = binary.AppendUvarint(out, floor)
	out = binary.AppendUvarint(out, next)
	sealRecord(out[at:])

	path := l.ackPath(target)
	if err := writeFileSync(path+tmpSuffix, out); err != nil {
		_ = os.Remove(path + tmpSuffix)
		l.compactAt.Store(2 * l.ackBytes.Load())
		return
	}
	if err := os.Rename(path+tmpSuffix, path); err != nil {
		_ = os.Remove(path + tmpSuffix)
		l.compactAt.Store(2 * l.ackBytes.Load())
		return
	}
	_ = syncPath(l.dir, os.O_RDONLY)
	for _, seq := range old[:len(old)-1] {
		_ = os.Remove(l.ackPath(seq))
	}
	l.ackMu.Lock()
	l.ackFiles = slices.DeleteFunc(l.ackFiles, func(seq uint64) bool { return seq < target })
	l.ackMu.Unlock()
	l.ackBytes.Add(int64(len(out)) - oldBytes)
	l.compactAt.Store(max(minCompact, 2*l.ackBytes.Load()))
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Sync flushes what was written since the last Sync to stable storage. It
// also checks that the directory is still there (see ErrDirGone).
func (l *Log) Sync() error {
	fi, serr := os.Stat(l.dir)
	l.mu.Lock()
	if !l.closed && l.broken == nil && (serr != nil || !os.SameFile(fi, l.dirInfo)) {
		l.markGoneLocked()
	}
	if l.broken != nil && !l.closed {
		l.mu.Unlock()
		return l.broken
	}
	if !l.dirty.Swap(false) && !l.ackDirty.Load() && len(l.unsynced) == 0 && !l.newFiles {
		l.mu.Unlock()
		return nil
	}
	a, sealed, newFiles := l.act, l.unsynced, l.newFiles
	var used int64
	if a != nil {
		used = l.segs[len(l.segs)-1].size
	}
	l.unsynced, l.newFiles = nil, false
	l.mu.Unlock()
	if a != nil && errors.Is(a.check(used), errDamaged) {
		// Cut short by someone else: given up now, so no store faults
		// past the cut and no append is lost in its last page.
		l.mu.Lock()
		if l.act == a {
			_ = l.sealActiveLocked()
		}
		l.mu.Unlock()
	}
	// Outside the mutexes: appends and acks go on during the fsync.
	var err error
	for _, path := range sealed {
		if serr := syncSegment(path); serr != nil && err == nil {
			err = serr
		}
	}
	if newFiles {
		// The new files' directory entries; not possible on every
		// platform (Windows), where it is skipped.
		_ = syncPath(l.dir, os.O_RDONLY)
	}
	if a != nil {
		if serr := a.sync(); serr != nil && !errors.Is(serr, os.ErrClosed) && err == nil {
			err = serr // sealed meanwhile: it is in unsynced for the next Sync
		}
	}
	if l.ackDirty.Swap(false) {
		l.ackMu.Lock()
		f := l.ackF
		l.ackMu.Unlock()
		if f != nil {
			if serr := f.Sync(); serr != nil && !errors.Is(serr, os.ErrClosed) && err == nil {
				err = serr // replaced meanwhile: the old one was synced when it was
			}
		}
	}
	return err
}

// syncSegment fsyncs the sealed segment file path. One deleted since
// (reclaimed, or by someone else) or replaced by what is not a regular
// file needs no sync: what it held is either delivered or reported lost
// by the Reader.
func syncSegment(path string) error {
	f, err := openRegular(path, os.O_RDWR)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, errNotRegular) {
		return nil
	}
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncPath fsyncs path, opened with flag (Windows needs write access to
// flush a file).
func syncPath(path string, flag int) error {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Size returns the bytes the files take, the active segment counted in
// full when it is preallocated.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.usedLocked()
}

// Written returns the bytes of the records (events and acknowledgements)
// this Log has written.
func (l *Log) Written() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written + l.ackWritten.Load()
}

// Close seals the active segment (cut to the bytes used), stops the
// reclaimer, deletes what holds nothing to deliver, syncs, and releases
// the lock. Events not acknowledged stay for the next Open; when no
// segment is left, neither are ack files. A second Close returns nil.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	err := l.sealActiveLocked()
	l.closed = true
	close(l.freed) // a waiter for room learns of the Close
	l.mu.Unlock()
	close(l.quit)
	<-l.done
	l.reclaim()
	if serr := l.Sync(); err == nil {
		err = serr
	}
	l.ackMu.Lock()
	f := l.ackF
	l.ackF = nil
	files := l.ackFiles
	l.ackMu.Unlock()
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	l.mu.Lock()
	empty := len(l.segs) == 0 && l.broken == nil
	l.mu.Unlock()
	if empty {
		// Nothing to deliver: nothing for the ack files to say either.
		for _, seq := range files {
			_ = os.Remove(l.ackPath(seq))
		}
	}
	if uerr := l.lock.Close(); err == nil {
		err = uerr
	}
	return err
}
