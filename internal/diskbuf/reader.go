package diskbuf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Reader reads events back from the log in log order: first the events
// Open found without an acknowledgement (the offsets it listed, segment by
// segment), then every event appended from the position given to Seek
// (every record of the segments created since Open). It reads with
// pread(2) on a descriptor of its own and takes the log's mutex only to
// look up a segment and how far it is written, never across I/O, so
// appends go on while it reads. One goroutine at a time may use it.
//
// A segment holding an event not read back yet is never reclaimed: the
// event has no acknowledgement.
//
// A segment that cannot be read back as it was written — cut short,
// removed, replaced by something that is not a regular file, overwritten
// (a record of this Log's own with a wrong checksum), or failing with
// another error maxFails times in a row — is skipped at once: its events
// not read yet are counted as lost (Next's lost), reported with one
// Errorf naming their number, and reading goes on with the next segment.
type Reader struct {
	l     *Log
	seq   uint64 // the segment being read (or the first after it that is present)
	off   int64  // next offset in a segment created since Open
	ri    int    // next index into an old segment's replay list
	idx   int    // records before off in a segment created since Open (see Seek)
	fails int    // consecutive failed reads at this position
	f     *os.File
	fseq  uint64
	buf   []byte
	avg   int // bytes per record read so far, to size reads
	// found holds the segments Open found, by number: their events to
	// read back are the offsets listed (sorted), not every record. A list
	// read, or given up, is dropped; the segment's number stays.
	found map[uint64][]uint32
}

// Replayed is an event read back from the log: found by Open without an
// acknowledgement, or appended by this Log (see Reader).
type Replayed struct {
	Seg  *Segment
	Off  uint32
	Data []byte
	// Old reports an event an earlier Log wrote (found by Open).
	Old bool
}

// newReader returns a reader of l positioned at segment first; found
// lists the events to read back of the segments Open found (see
// Reader.found).
func newReader(l *Log, first uint64, found map[uint64][]uint32) *Reader {
	return &Reader{l: l, seq: first, found: found}
}

// old reports whether s was found by Open.
func (r *Reader) old(s *Segment) bool {
	_, ok := r.found[s.seq]
	return ok
}

// ErrBadRecord is the cause reported for a record of this Log's own that
// no longer has a valid checksum (the file was changed by someone else):
// the rest of its segment is skipped.
var ErrBadRecord = errors.New("diskbuf: invalid record")

// maxFails is how many reads in a row may fail at one position with an
// error that may pass (EIO, EACCES, too many open files; Next returns
// it, the caller retries) before the segment is skipped as unreadable.
const maxFails = 20

// readChunk is the most the Reader reads from a segment with one pread;
// a read is sized for the events asked for (at least minChunk), so a
// reader asked for a batch's worth holds a buffer of about a batch.
const (
	readChunk = 256 << 10
	minChunk  = 16 << 10
)

// chunk is the size of a read for limit events.
func (r *Reader) chunk(limit int) int {
	avg := r.avg
	if avg == 0 {
		avg = 512
	}
	return min(readChunk, max(minChunk, limit*avg+avg))
}

// learn updates the bytes per record from a read of n records of bytes.
func (r *Reader) learn(n, bytes int) {
	if n > 0 {
		r.avg = (r.avg + (bytes+n*(headerSize+1))/n + 1) / 2
	}
}

// Seek makes (s, off) the next event Next returns: the event this Log
// appended last (Seek is called right after its Append, before any other).
// The events before it must all have been read back, or not be meant to
// be.
func (r *Reader) Seek(s *Segment, off uint32) {
	idx := r.l.appended(s) - 1
	r.seq, r.off, r.ri, r.idx, r.fails = s.seq, int64(off), 0, idx, 0
}

// Next returns up to max events (and about maxBytes of them, at least one)
// from the reader's position, oldest first, and advances past them. It
// returns fewer, or none, when it reaches the end of what was written. The
// events' Data are copies of their own. lost counts events that can no
// longer be read back (see Reader: their segment was damaged): they are
// skipped at once, as their acknowledgement would (their segment's live
// count drops), and reading goes on after them. An error that may pass is
// returned with what was read; the next call tries again.
func (r *Reader) Next(limit, maxBytes int) (recs []Replayed, lost int, err error) {
	bytes := 0
	for len(recs) < limit && bytes < maxBytes {
		s, size, sealed := r.l.segmentFrom(r.seq)
		if s == nil {
			break
		}
		if s.seq != r.seq { // the one before is gone or done: start this one
			r.seq, r.off, r.ri, r.idx, r.fails = s.seq, fileHeaderSize, 0, 0, 0
		}
		var got []Replayed
		var n int
		if r.old(s) {
			got, n, err = r.readOld(s, size, limit-len(recs), maxBytes-bytes)
		} else {
			got, err = r.readNew(s, size, limit-len(recs), maxBytes-bytes)
		}
		lost += n
		for _, g := range got {
			bytes += len(g.Data)
		}
		recs = append(recs, got...)
		if err != nil {
			r.closeFile()
			if r.fails++; !permanent(err) && r.fails < maxFails {
				return recs, lost, err // tried again at the next call
			}
			lost += r.skip(s, err)
			err = nil
			continue
		}
		r.fails = 0
		if len(got) == 0 && n == 0 {
			// Nothing more in this segment: move on if it is complete.
			if !r.old(s) && !sealed {
				break // the active segment: caught up with the writer
			}
			r.next()
		}
	}
	return recs, lost, nil
}

// next moves to the following segment.
func (r *Reader) next() {
	r.seq, r.off, r.ri, r.idx, r.fails = r.seq+1, fileHeaderSize, 0, 0, 0
	r.closeFile()
}

// permanent reports a read error that says the segment is damaged: it
// will not pass.
func permanent(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, errNotRegular) ||
		errors.Is(err, errDamaged) || errors.Is(err, ErrBadRecord)
}

// skip gives up the rest of s: its events not read yet are lost (their
// number is returned and reported once), and the reader moves on.
func (r *Reader) skip(s *Segment, cause error) int {
	var n int
	if r.old(s) {
		n = len(r.found[s.seq]) - r.ri
		r.found[s.seq] = nil
	} else {
		n = r.l.giveUp(s) - r.idx
	}
	n = max(n, 0)
	if n > 0 {
		r.l.lose(s, n)
	}
	r.l.errorf("diskbuf: skipped the rest of %s, which can no longer be read back (%v): %d event(s) in it lost", filepath.Base(s.path), cause, n)
	r.next()
	return n
}

func (r *Reader) closeFile() {
	if r.f != nil {
		r.f.Close()
		r.f, r.fseq = nil, 0
	}
}

// Idle drops the reader's buffer (a read allocates a new one): for a
// reader that waits, so that an idle reader holds no memory.
func (r *Reader) Idle() { r.buf = nil }

// Close releases the reader's descriptor; the reader's user calls it
// (a later Next opens it again).
func (r *Reader) Close() { r.closeFile() }

func (r *Reader) file(s *Segment) (*os.File, error) {
	if r.f != nil && r.fseq == s.seq {
		return r.f, nil
	}
	r.closeFile()
	f, err := openRegular(s.path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	r.f, r.fseq = f, s.seq
	return f, nil
}

// read fills r.buf with up to n bytes of s from off; it returns the bytes
// read (fewer, or none, at the end of the file).
func (r *Reader) read(s *Segment, off int64, n int) ([]byte, error) {
	f, err := r.file(s)
	if err != nil {
		return nil, err
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	m, err := f.ReadAt(b, off)
	if errors.Is(err, io.EOF) {
		err = nil // the caller tells a file cut short by the bytes missing
	}
	return b[:m], err
}

// record returns the length of the whole record at b's start (header and
// body) when b holds all of it and its checksum matches, need > 0 when b
// holds only part of it (the bytes the whole record takes), and ok false
// with need 0 when it is not a valid record.
func record(b []byte, budget *int) (n, need int, ok bool) {
	if len(b) < headerSize {
		return 0, headerSize, false
	}
	l := int(binary.LittleEndian.Uint32(b))
	if l == 0 || l > MaxRecord {
		return 0, 0, false
	}
	if len(b) < headerSize+l {
		return 0, headerSize + l, false
	}
	n, ok = valid(b[:headerSize+l], segKinds, budget)
	return n, 0, ok
}

// readNew reads the records of a segment written by this Log, from r.off
// up to size (what is written of it now). A file that ends before size,
// or a record there that is not valid, is an error matching errDamaged or
// ErrBadRecord; the records before it are returned with it.
func (r *Reader) readNew(s *Segment, size int64, limit, maxBytes int) (out []Replayed, err error) {
	if r.off >= size {
		return nil, nil
	}
	want := int(min(size-r.off, int64(r.chunk(limit))))
	b, err := r.read(s, r.off, want)
	if err != nil {
		return nil, err
	}
	pos, bytes := 0, 0
	defer func() {
		r.off += int64(pos)
		r.idx += len(out)
		own(out, bytes)
		r.learn(len(out), bytes)
	}()
	short := func() error {
		return fmt.Errorf("%w: %s ends before offset %d, where %d bytes were written", errDamaged, s.path, r.off+int64(pos), size)
	}
	for pos < len(b) && len(out) < limit && bytes < maxBytes {
		budget := MaxRecord
		n, need, ok := record(b[pos:], &budget)
		if need > 0 {
			switch {
			case len(b) < want:
				return out, short()
			case pos == 0 && int64(need) <= size-r.off:
				// A record larger than the chunk: read it whole.
				if b, err = r.read(s, r.off, need); err != nil {
					return out, err
				}
				if want = need; len(b) < need {
					return out, short()
				}
				continue
			}
			return out, nil // the rest in the next read
		}
		if !ok {
			return out, fmt.Errorf("%w in %s at offset %d", ErrBadRecord, s.path, r.off+int64(pos))
		}
		body := b[pos+headerSize+1 : pos+n]
		out = append(out, Replayed{Seg: s, Off: uint32(r.off) + uint32(pos), Data: body})
		bytes += len(body)
		pos += n
	}
	if pos == len(b) && len(b) < want {
		return out, short()
	}
	return out, nil
}

// own copies the events' Data (in the read buffer) into one allocation
// of exactly their size, so an event kept in memory holds no more than
// the events read with it.
func own(out []Replayed, bytes int) {
	data := make([]byte, 0, bytes)
	for i := range out {
		at := len(data)
		data = append(data, out[i].Data...)
		out[i].Data = data[at:len(data):len(data)]
	}
}

// readOld reads the listed events of a segment Open found, whose file
// held size bytes. A listed
// offset that no longer holds a valid record (the file was overwritten)
// is counted in lost (and the segment's live count drops, so it can be
// reclaimed); a file that now ends before a listed offset is an error
// matching errDamaged.
func (r *Reader) readOld(s *Segment, size int64, limit, maxBytes int) (out []Replayed, lost int, err error) {
	replay := r.found[s.seq]
	if r.ri >= len(replay) {
		r.found[s.seq] = nil // read: no longer needed
		return nil, 0, nil
	}
	start := int64(replay[r.ri])
	want := int(min(int64(r.chunk(limit)), max(size-start, headerSize)))
	b, err := r.read(s, start, want)
	if err != nil {
		return nil, 0, err
	}
	bytes := 0
	defer func() {
		own(out, bytes)
		r.learn(len(out), bytes)
		if lost > 0 {
			r.l.lose(s, lost)
			r.l.errorf("diskbuf: %d event(s) of %s can no longer be read back (the file was changed since it was opened): lost", lost, filepath.Base(s.path))
		}
	}()
	short := func(off int64) error {
		return fmt.Errorf("%w: %s ends before offset %d", errDamaged, s.path, off)
	}
	for r.ri < len(replay) && len(out) < limit && bytes < maxBytes {
		off := int64(replay[r.ri])
		pos := int(off - start)
		if pos >= len(b) {
			if len(b) < want {
				return out, lost, short(off)
			}
			break // in the next read
		}
		budget := MaxRecord
		n, need, ok := record(b[pos:], &budget)
		if need > 0 {
			if len(b) < want {
				return out, lost, short(off)
			}
			if pos > 0 {
				break // in the next read, from its start
			}
			// A record larger than a chunk: read it whole.
			if b, err = r.read(s, off, need); err != nil {
				return out, lost, err
			}
			if len(b) < need {
				return out, lost, short(off)
			}
			budget = MaxRecord
			n, _, ok = record(b, &budget)
		}
		r.ri++
		if !ok {
			lost++
			continue
		}
		body := b[pos+headerSize+1 : pos+n]
		out = append(out, Replayed{Seg: s, Off: uint32(off), Data: body, Old: true})
		bytes += len(body)
	}
	return out, lost, nil
}

// AtEnd reports whether the reader has read everything written so far:
// it is at the end of the active segment (or no segment is left after
// its position).
func (r *Reader) AtEnd() bool {
	s, size, sealed := r.l.segmentFrom(r.seq)
	if s == nil {
		return true
	}
	return s.seq == r.seq && !r.old(s) && !sealed && r.off >= size
}

// Unreadable counts the events not read back yet whose segment file is
// gone, is no longer a regular file, or is shorter than what it held
// (then the valid records still in it are not counted): they are dropped
// as lost, as Next would, reported with one Errorf per segment, and their
// number is returned. For Close, which leaves the rest on disk for the
// next client and must count only what is really there; a stat per
// segment, a read of a segment only when it was cut short. Not to be
// called while Next runs.
func (r *Reader) Unreadable() int {
	type seg struct {
		s     *Segment
		size  int64
		count int
	}
	var segs []seg
	r.l.segmentsFrom(r.seq, func(s *Segment, size int64, count int) {
		segs = append(segs, seg{s, size, count})
	})
	total := 0
	for _, g := range segs {
		s := g.s
		first, from := s.seq == r.seq, int64(fileHeaderSize)
		var n int
		var offs []uint32
		switch {
		case r.old(s) && first:
			replay := r.found[s.seq]
			offs = replay[min(r.ri, len(replay)):]
			n = len(offs)
		case r.old(s):
			offs = r.found[s.seq]
			n = len(offs)
		case first:
			n, from = g.count-r.idx, r.off
		default:
			n = g.count
		}
		if n <= 0 {
			continue
		}
		fi, err := os.Lstat(s.path)
		left := 0
		switch {
		case err != nil && !errors.Is(err, os.ErrNotExist):
			continue // cannot tell: left as kept
		case err != nil || !fi.Mode().IsRegular():
		case fi.Size() >= g.size:
			continue
		default:
			data, err := readRegular(s.path)
			if err != nil {
				continue
			}
			if r.old(s) {
				for _, off := range offs {
					budget := MaxRecord
					if int(off) < len(data) {
						if _, ok := valid(data[off:], segKinds, &budget); ok {
							left++
						}
					}
				}
			} else if from < int64(len(data)) {
				scanRecords(data, int(from), segKinds, nil, func(int, byte, []byte) { left++ })
			}
		}
		if lost := n - min(left, n); lost > 0 {
			r.l.lose(s, lost)
			total += lost
			r.l.errorf("diskbuf: %s was removed, replaced or cut short: %d event(s) in it that were not read back are lost", filepath.Base(s.path), lost)
		}
	}
	return total
}
