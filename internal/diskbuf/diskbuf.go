// Package diskbuf is the on-disk log behind the client's durable mode: a
// directory of append-only segment files and a lock file.
//
// A segment is named by a 20-digit sequence number and the suffix ".seg".
// It holds records, each an 8-byte header — the length of the body
// (uint32, little endian) and the CRC-32C of the body — followed by the
// body: one kind byte and the payload. Kind 1 is an event (its payload is
// the event's JSON); kind 2 acknowledges events, listing (segment, offset)
// pairs as unsigned varints. An event is named by its segment and the byte
// offset of its record, which stays valid whatever records around it are
// lost.
//
// Appends go to the active (newest) segment with one write(2) each, so an
// appended record survives the process dying at any instant. A segment is
// deleted, whole, once it is sealed (a newer one is active, or the log was
// closed), every event in it is acknowledged, and every segment its
// acknowledgements refer to is gone; nothing is rewritten in place. Open
// reads every segment, reports the events without an acknowledgement, and
// starts a new active segment; a record whose checksum does not match is
// skipped and counted (as torn when nothing valid follows it in its
// segment, as corrupt otherwise).
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
)

const (
	headerSize = 8
	kindEvent  = 1
	kindAck    = 2
	// MaxRecord is the largest record body Open accepts; a larger length
	// in a header is treated as corruption.
	MaxRecord = 1 << 20
	segSuffix = ".seg"
	// LockName is the lock file in the directory.
	LockName = "lock"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrFull is returned by Append when the record would take the directory
// past Options.MaxBytes.
var ErrFull = errors.New("diskbuf: size limit reached")

// ErrLocked is returned by Open when another Log (in this or another
// process) has the directory open.
var ErrLocked = errors.New("diskbuf: directory is locked by another client")

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("diskbuf: log closed")

// Options configure a Log.
type Options struct {
	SegmentBytes int64 // a segment is sealed once it would grow past this
	MaxBytes     int64 // the segments together never exceed this
	// Logf reports skipped records; nil is silent.
	Logf func(format string, args ...any)
	// NoMmap writes with write(2) on Linux too (see active).
	NoMmap bool
}

// Segment is one segment file. Its methods are not exported; callers keep
// pointers as handles for Ack.
type Segment struct {
	seq    uint64
	path   string
	size   int64
	live   atomic.Int64 // event records without an acknowledgement
	sealed bool         // guarded by Log.mu
	refs   []uint64     // older segments its ack records refer to; guarded by Log.mu
}

// Replayed is an event found by Open without an acknowledgement.
type Replayed struct {
	Seg  *Segment
	Off  uint32
	Data []byte
}

// Stats counts what Open skipped.
type Stats struct {
	Torn    int // invalid bytes at the end of a segment (a write cut short)
	Corrupt int // invalid regions followed by valid records
}

// Log is an open directory.
type Log struct {
	dir  string
	opts Options

	mu     sync.Mutex
	lock   io.Closer
	segs   []*Segment // oldest first; the last is active unless closed
	act    active     // nil after a failed write until the next rotate, and after Close
	buf    []byte
	closed bool
	dirty  atomic.Bool

	written    int64    // bytes of records written by this Log
	unsynced   []string // segments sealed since the last Sync
	reclaiming bool     // reclaimLocked is running
	newFiles   bool     // a segment was created since the last Sync
	stats      Stats
}

// Open locks dir (creating it if needed), reads its segments and returns
// the log with the events that have no acknowledgement, oldest first.
func Open(dir string, opts Options) (*Log, []Replayed, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 4 << 20
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 512 << 20
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	lock, err := lockDir(filepath.Join(dir, LockName))
	if err != nil {
		return nil, nil, err
	}
	l := &Log{dir: dir, opts: opts, lock: lock, buf: make([]byte, 0, 4096)}
	replayed, err := l.load()
	if err == nil {
		err = l.rotate(false)
	}
	if err != nil {
		_ = l.sealActiveLocked()
		lock.Close()
		return nil, nil, err
	}
	return l, replayed, nil
}

func (l *Log) logf(format string, args ...any) {
	if l.opts.Logf != nil {
		l.opts.Logf(format, args...)
	}
}

// Stats returns what Open skipped.
func (l *Log) Stats() Stats { return l.stats }

type eventRef struct {
	seg *Segment
	off uint32
}

func (l *Log) load() ([]Replayed, error) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, segSuffix) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err != nil {
			continue
		}
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	bySeq := make(map[uint64]*Segment, len(seqs))
	var events []Replayed
	acked := make(map[eventRef]bool)
	for _, seq := range seqs {
		s := &Segment{seq: seq, path: l.segPath(seq), sealed: true}
		data, err := os.ReadFile(s.path)
		if err != nil {
			return nil, err
		}
		s.size = int64(len(data))
		bySeq[seq] = s
		l.segs = append(l.segs, s)
		scanRecords(data, l.skipped(s), func(off int, kind byte, payload []byte) {
			switch kind {
			case kindEvent:
				events = append(events, Replayed{Seg: s, Off: uint32(off), Data: payload})
			case kindAck:
				forEachAck(payload, func(sq, o uint64) {
					if t := bySeq[sq]; t != nil {
						acked[eventRef{t, uint32(o)}] = true
						if t != s && !slices.Contains(s.refs, sq) {
							s.refs = append(s.refs, sq)
						}
					}
				})
			}
		})
	}
	out := events[:0]
	for _, ev := range events {
		if !acked[eventRef{ev.Seg, ev.Off}] {
			ev.Seg.live.Add(1)
			out = append(out, ev)
		}
	}
	l.reclaimLocked()
	return out, nil
}

// skipped returns the reporter of invalid regions in s for scanRecords.
func (l *Log) skipped(s *Segment) func(off, n int, torn bool) {
	return func(off, n int, torn bool) {
		if torn {
			l.stats.Torn++
			l.logf("diskbuf: skipped a torn record (%d bytes) at the end of %s", n, filepath.Base(s.path))
		} else {
			l.stats.Corrupt++
			l.logf("diskbuf: skipped %d corrupt bytes at offset %d of %s", n, off, filepath.Base(s.path))
		}
	}
}

// scanRecords calls f for every valid record of data and bad (if not nil)
// for every invalid region: torn when no valid record follows it. Zero
// bytes at the end are the unused part of a preallocated segment.
func scanRecords(data []byte, bad func(off, n int, torn bool), f func(off int, kind byte, payload []byte)) {
	end := len(data)
	for end > 0 && data[end-1] == 0 {
		end--
	}
	off := 0
	from := -1 // start of the invalid region being skipped
	for off < end {
		if n, ok := valid(data[off:]); ok {
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

// valid reports whether p starts with a whole record whose checksum
// matches, and its size.
func valid(p []byte) (int, bool) {
	if len(p) < headerSize+1 {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(p)
	if n == 0 || n > MaxRecord || int(n) > len(p)-headerSize {
		return 0, false
	}
	body := p[headerSize : headerSize+int(n)]
	if body[0] != kindEvent && body[0] != kindAck { // cheap test first: resyncing tries every offset
		return 0, false
	}
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(p[4:]) {
		return 0, false
	}
	return headerSize + int(n), true
}

func (l *Log) segPath(seq uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("%020d%s", seq, segSuffix))
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
	// seal makes the file used bytes long and closes it.
	seal(used int64) error
}

// rotate seals the active segment and starts a new one; l.mu is held (or
// the log is not shared yet). With limit, the new segment must fit under
// MaxBytes.
func (l *Log) rotate(limit bool) error {
	var seq uint64 = 1
	if len(l.segs) > 0 {
		seq = l.segs[len(l.segs)-1].seq + 1
	}
	if limit && l.usedBytes()+l.opts.SegmentBytes > l.opts.MaxBytes {
		return ErrFull
	}
	_ = l.sealActiveLocked() // sealed either way: its records were written, or failed, before
	s := &Segment{seq: seq, path: l.segPath(seq)}
	a, err := openActive(s.path, l.opts.SegmentBytes, l.opts.NoMmap)
	if err != nil {
		return err
	}
	l.act = a
	l.segs = append(l.segs, s)
	l.newFiles = true
	// No reclaim here: rotate runs in an enqueue call, and reclaiming may
	// read a segment (carryAcks). The next Ack reclaims the sealed one.
	return nil
}

// sealActiveLocked seals the active segment, if any.
func (l *Log) sealActiveLocked() error {
	if l.act == nil {
		return nil
	}
	s := l.segs[len(l.segs)-1]
	s.sealed = true
	err := l.act.seal(s.size)
	l.act = nil
	l.unsynced = append(l.unsynced, s.path)
	return err
}

// usedBytes is what the segments hold (a sealed segment takes that much
// on disk; the active one may take up to SegmentBytes).
func (l *Log) usedBytes() int64 {
	var n int64
	for _, s := range l.segs {
		n += s.size
	}
	return n
}

// writeLocked appends the record in b (header space first, then the body)
// to the active segment, starting a new one when it does not fit (within
// MaxBytes if limit), and returns the segment and offset.
func (l *Log) writeLocked(b []byte, limit bool) (*Segment, uint32, error) {
	binary.LittleEndian.PutUint32(b, uint32(len(b)-headerSize))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[headerSize:], castagnoli))
	if int64(len(b)) > l.opts.SegmentBytes {
		return nil, 0, fmt.Errorf("diskbuf: a %d-byte record does not fit in a segment", len(b))
	}
	s := l.segs[len(l.segs)-1]
	if l.act == nil || s.size+int64(len(b)) > l.opts.SegmentBytes {
		if err := l.rotate(limit); err != nil {
			return nil, 0, err
		}
		s = l.segs[len(l.segs)-1]
	}
	off := s.size
	if err := l.act.write(off, b); err != nil {
		// Nothing after a failed write goes to this segment.
		if serr := l.sealActiveLocked(); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, 0, err
	}
	s.size += int64(len(b))
	l.written += int64(len(b))
	l.dirty.Store(true)
	return s, uint32(off), nil
}

// Append writes one event record and returns its handle. It fails with
// ErrFull when a new segment would take the directory past MaxBytes,
// ErrClosed after Close, or the error of the file system; after a failed
// write the next call starts a new segment, so a partial record is never
// followed by a good one in the same file.
func (l *Log) Append(payload []byte) (*Segment, uint32, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, 0, ErrClosed
	}
	b := append(l.buf[:0], 0, 0, 0, 0, 0, 0, 0, 0, kindEvent)
	b = append(b, payload...)
	s, off, err := l.writeLocked(b, true)
	l.keepBuf(b)
	if err != nil {
		return nil, 0, err
	}
	s.live.Add(1)
	return s, off, nil
}

func (l *Log) keepBuf(b []byte) {
	l.buf = b[:0]
	if cap(l.buf) > 64<<10 {
		l.buf = make([]byte, 0, 4096)
	}
}

// Ack acknowledges n events: at(i) names the i-th. It writes one ack
// record (even past MaxBytes) and deletes the segments that no longer hold
// anything to deliver. A write error is returned; the events count as
// acknowledged in this process either way, and a later Open may replay
// them.
func (l *Log) Ack(n int, at func(i int) (*Segment, uint32)) error {
	if n == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	for from := 0; from < n; from += ackChunk { // records under maxAckBody
		to := min(from+ackChunk, n)
		b := append(l.buf[:0], 0, 0, 0, 0, 0, 0, 0, 0, kindAck)
		for i := from; i < to; i++ {
			s, off := at(i)
			b = binary.AppendUvarint(b, s.seq)
			b = binary.AppendUvarint(b, uint64(off))
			s.live.Add(-1)
		}
		if !l.closed && err == nil {
			var act *Segment
			if act, _, err = l.writeLocked(b, false); err == nil {
				for i := from; i < to; i++ {
					if s, _ := at(i); s != act && !slices.Contains(act.refs, s.seq) {
						act.refs = append(act.refs, s.seq)
					}
				}
			}
		}
		l.keepBuf(b)
	}
	l.reclaimLocked()
	return err
}

// ackChunk events per ack record: 20 bytes of varints each at most.
const ackChunk = maxAckBody / 20

// reclaimLocked deletes every sealed segment with nothing live. Its ack
// records that name segments still present are first copied to the active
// segment, so an event stuck in an old segment does not keep newer ones.
func (l *Log) reclaimLocked() {
	if l.reclaiming {
		return // carryAcks started a segment: the outer call goes on
	}
	l.reclaiming = true
	defer func() { l.reclaiming = false }()
	var failed map[*Segment]bool // not deletable now; tried again at the next reclaim
	for {
		var s *Segment
		for _, t := range l.segs {
			if t.sealed && t.live.Load() == 0 && !failed[t] {
				s = t
				break
			}
		}
		if s == nil {
			return
		}
		// carryAcks may start a new segment (appended to l.segs), so s is
		// found again by identity below.
		if (l.refersToLive(s) && !l.carryAcks(s)) ||
			(os.Remove(s.path) != nil && fileExists(s.path)) {
			if failed == nil {
				failed = map[*Segment]bool{}
			}
			failed[s] = true
			continue
		}
		if i := slices.Index(l.segs, s); i >= 0 {
			l.segs = slices.Delete(l.segs, i, i+1)
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// carryAcks copies the acknowledgements in s of segments still present
// into one ack record in the active segment.
func (l *Log) carryAcks(s *Segment) bool {
	if l.closed || l.act == nil {
		return false
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return false
	}
	present := make(map[uint64]*Segment, len(l.segs))
	for _, t := range l.segs {
		if t != s {
			present[t.seq] = t
		}
	}
	var recs [][]byte // ack records of at most maxAckBody bytes each
	var refs []uint64
	scanRecords(data, nil, func(_ int, kind byte, p []byte) {
		if kind != kindAck {
			return
		}
		forEachAck(p, func(seq, off uint64) {
			if present[seq] == nil {
				return
			}
			if len(recs) == 0 || len(recs[len(recs)-1]) > maxAckBody {
				recs = append(recs, []byte{0, 0, 0, 0, 0, 0, 0, 0, kindAck})
			}
			b := recs[len(recs)-1]
			b = binary.AppendUvarint(b, seq)
			recs[len(recs)-1] = binary.AppendUvarint(b, off)
			if !slices.Contains(refs, seq) {
				refs = append(refs, seq)
			}
		})
	})
	for _, b := range recs {
		act, _, err := l.writeLocked(b, false)
		if err != nil {
			return false // the records already written only repeat acknowledgements
		}
		for _, seq := range refs {
			if seq != act.seq && !slices.Contains(act.refs, seq) {
				act.refs = append(act.refs, seq)
			}
		}
	}
	return true
}

// maxAckBody bounds an ack record (well under the smallest segment).
const maxAckBody = 16 << 10

// forEachAck calls f for each (segment, offset) pair of an ack payload.
func forEachAck(p []byte, f func(seq, off uint64)) {
	for len(p) > 0 {
		seq, n := binary.Uvarint(p)
		if n <= 0 {
			return
		}
		off, m := binary.Uvarint(p[n:])
		if m <= 0 {
			return
		}
		p = p[n+m:]
		f(seq, off)
	}
}

func (l *Log) refersToLive(s *Segment) bool {
	for _, seq := range s.refs {
		for _, t := range l.segs {
			if t.seq == seq {
				return true
			}
		}
	}
	return false
}

// Sync flushes the active segment to stable storage if anything was
// written since the last Sync.
func (l *Log) Sync() error {
	if !l.dirty.Swap(false) {
		return nil
	}
	l.mu.Lock()
	a, sealed, newFiles := l.act, l.unsynced, l.newFiles
	l.unsynced, l.newFiles = nil, false
	l.mu.Unlock()
	// Outside the mutex: appends go on during the fsync.
	var err error
	for _, path := range sealed {
		if serr := syncPath(path, os.O_RDWR); serr != nil && !errors.Is(serr, os.ErrNotExist) && err == nil {
			err = serr // a reclaimed segment needs no sync
		}
	}
	if newFiles {
		// The new segments' directory entries; not possible on every
		// platform (Windows), where it is skipped.
		_ = syncPath(l.dir, os.O_RDONLY)
	}
	if a != nil {
		if serr := a.sync(); serr != nil && !errors.Is(serr, os.ErrClosed) && err == nil {
			err = serr // sealed meanwhile: it is in unsynced for the next Sync
		}
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

// Size returns the bytes the segment files take, the active one counted
// as a whole segment (it is preallocated on Linux).
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.usedBytes()
	if l.act != nil {
		n += l.opts.SegmentBytes - l.segs[len(l.segs)-1].size
	}
	return n
}

// Written returns the bytes of the records (events and acknowledgements)
// this Log has written.
func (l *Log) Written() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written
}

// Close syncs the active segment and seals it (cut to the bytes used),
// deletes what holds nothing to deliver, and releases the lock. Events not
// acknowledged stay for the next Open. A second Close returns nil.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	err := l.sealActiveLocked()
	l.closed = true
	l.reclaimLocked()
	l.mu.Unlock()
	l.dirty.Store(true)
	if serr := l.Sync(); err == nil {
		err = serr
	}
	if uerr := l.lock.Close(); err == nil {
		err = uerr
	}
	return err
}
