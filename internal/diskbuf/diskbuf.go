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
	active *os.File
	total  int64 // bytes of all segments
	buf    []byte
	closed bool
	err    error // sticky write error of the active segment
	dirty  atomic.Bool
	stats  Stats
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
		err = l.rotate()
	}
	if err != nil {
		l.closeFiles()
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

// Dir returns the directory.
func (l *Log) Dir() string { return l.dir }

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
		l.total += s.size
		bySeq[seq] = s
		l.segs = append(l.segs, s)
		l.scan(s, data, func(off int, kind byte, payload []byte) {
			switch kind {
			case kindEvent:
				events = append(events, Replayed{Seg: s, Off: uint32(off), Data: payload})
			case kindAck:
				for len(payload) > 0 {
					sq, n := binary.Uvarint(payload)
					if n <= 0 {
						return
					}
					o, m := binary.Uvarint(payload[n:])
					if m <= 0 {
						return
					}
					payload = payload[n+m:]
					if t := bySeq[sq]; t != nil {
						acked[eventRef{t, uint32(o)}] = true
						if t != s && !slices.Contains(s.refs, sq) {
							s.refs = append(s.refs, sq)
						}
					}
				}
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

// scan calls f for every valid record of data, skipping invalid regions.
func (l *Log) scan(s *Segment, data []byte, f func(off int, kind byte, payload []byte)) {
	off := 0
	bad := -1 // start of the invalid region being skipped
	for off < len(data) {
		if n, ok := valid(data[off:]); ok {
			if bad >= 0 {
				l.stats.Corrupt++
				l.logf("diskbuf: skipped %d corrupt bytes at offset %d of %s", off-bad, bad, filepath.Base(s.path))
				bad = -1
			}
			body := data[off+headerSize : off+n]
			f(off, body[0], body[1:])
			off += n
			continue
		}
		if bad < 0 {
			bad = off
		}
		off++
	}
	if bad >= 0 {
		l.stats.Torn++
		l.logf("diskbuf: skipped a torn record (%d bytes) at the end of %s", len(data)-bad, filepath.Base(s.path))
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

// rotate seals the active segment and starts a new one; l.mu is held (or
// the log is not shared yet).
func (l *Log) rotate() error {
	var seq uint64 = 1
	if len(l.segs) > 0 {
		last := l.segs[len(l.segs)-1]
		seq = last.seq + 1
		last.sealed = true
	}
	if l.active != nil {
		// Sealed either way: its records were written, or failed, by write(2).
		_ = l.active.Close()
		l.active = nil
	}
	s := &Segment{seq: seq, path: l.segPath(seq)}
	f, err := os.OpenFile(s.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	l.active = f
	l.segs = append(l.segs, s)
	l.reclaimLocked()
	return nil
}

func appendHeader(buf []byte, body []byte) []byte {
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(body)))
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(body, castagnoli))
}

// Append writes one event record with a single write(2) and returns its
// handle. It fails with ErrFull past MaxBytes, ErrClosed after Close, or
// the *os.PathError of the write; after a failed write the log starts a
// new segment at the next call, so a partial record is never followed by
// a good one in the same file.
func (l *Log) Append(payload []byte) (*Segment, uint32, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, 0, ErrClosed
	}
	size := int64(headerSize + 1 + len(payload))
	if l.total+size > l.opts.MaxBytes {
		return nil, 0, ErrFull
	}
	s := l.segs[len(l.segs)-1]
	if l.err != nil || (s.size > 0 && s.size+size > l.opts.SegmentBytes) {
		if err := l.rotate(); err != nil {
			return nil, 0, err
		}
		l.err = nil
		s = l.segs[len(l.segs)-1]
	}
	b := l.buf[:0]
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, kindEvent)
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-headerSize))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[headerSize:], castagnoli))
	l.buf = b[:0]
	if cap(l.buf) > 64<<10 {
		l.buf = make([]byte, 0, 4096)
	}
	off := s.size
	n, err := l.active.Write(b)
	s.size += int64(n)
	l.total += int64(n)
	if err != nil {
		l.err = err
		return nil, 0, err
	}
	s.live.Add(1)
	l.dirty.Store(true)
	return s, uint32(off), nil
}

// Ack acknowledges n events: at(i) names the i-th. It writes one ack
// record (unless every event's segment is already gone) and deletes the
// segments that no longer hold anything to deliver. The ack record is
// written even past MaxBytes. A write error is returned, and the events
// are still counted as acknowledged in this process.
func (l *Log) Ack(n int, at func(i int) (*Segment, uint32)) error {
	if n == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buf[:0]
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, kindAck)
	for i := 0; i < n; i++ {
		s, off := at(i)
		b = binary.AppendUvarint(b, s.seq)
		b = binary.AppendUvarint(b, uint64(off))
		s.live.Add(-1)
	}
	var err error
	if !l.closed && l.err == nil {
		binary.LittleEndian.PutUint32(b, uint32(len(b)-headerSize))
		binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[headerSize:], castagnoli))
		act := l.segs[len(l.segs)-1]
		var w int
		w, err = l.active.Write(b)
		act.size += int64(w)
		l.total += int64(w)
		if err != nil {
			l.err = err
		} else {
			for i := 0; i < n; i++ {
				s, _ := at(i)
				if s != act && !slices.Contains(act.refs, s.seq) {
					act.refs = append(act.refs, s.seq)
				}
			}
			l.dirty.Store(true)
		}
	}
	l.buf = b[:0]
	l.reclaimLocked()
	return err
}

// reclaimLocked deletes every sealed segment with nothing live whose ack
// records refer only to segments already gone.
func (l *Log) reclaimLocked() {
	for changed := true; changed; {
		changed = false
		for i := 0; i < len(l.segs); i++ {
			s := l.segs[i]
			if !s.sealed || s.live.Load() > 0 || l.refersToLive(s) {
				continue
			}
			if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				continue // tried again at the next reclaim
			}
			l.total -= s.size
			l.segs = slices.Delete(l.segs, i, i+1)
			i--
			changed = true
		}
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
	defer l.mu.Unlock()
	if l.closed || l.active == nil {
		return nil
	}
	return l.active.Sync()
}

// Size returns the bytes the segments take.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Segments returns the number of segment files.
func (l *Log) Segments() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.segs)
}

// Close syncs and closes the active segment (sealing it), deletes what
// holds nothing to deliver, and releases the lock. Events not acknowledged
// stay for the next Open. A second Close returns nil.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var err error
	if l.active != nil {
		err = l.active.Sync()
	}
	l.segs[len(l.segs)-1].sealed = true
	if cerr := l.closeFiles(); err == nil {
		err = cerr
	}
	l.reclaimLocked()
	if uerr := l.lock.Close(); err == nil {
		err = uerr
	}
	l.lock = nil
	return err
}

func (l *Log) closeFiles() error {
	var err error
	if l.active != nil {
		err = l.active.Close()
		l.active = nil
	}
	return err
}
