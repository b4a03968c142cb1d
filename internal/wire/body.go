package wire

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The bytes of events once they are accepted: the request body around a
// batch (with the per-event sentAt), the slabs that hold event JSON, and
// the time text both the encoder and the body's sentAt write.

// A request body is {"batch":[…],"sentAt":…,"writeKey":…}: the events'
// JSON as encoded at acceptance, comma separated, then the caller's extra
// members, the attempt's sentAt and the write key. With the per-event
// sentAt on, the attempt's sentAt is also spliced into every event, so no
// event is encoded again.

// maxTimestampBytes is the longest timestamp appendTimestamp writes for a
// year in 0–9999.
const maxTimestampBytes = len("2006-01-02T15:04:05.999999999Z")

// eventSentAtBytes is the most the per-event sentAt adds to one event:
// `,"sentAt":"…"` with the longest timestamp.
const eventSentAtBytes = len(`,"sentAt":""`) + maxTimestampBytes

// PerEvent is what a body adds to each event beyond its JSON and a comma:
// eventSentAtBytes with the per-event sentAt on, 0 with it off.
func PerEvent(eventSentAt bool) int {
	if eventSentAt {
		return eventSentAtBytes
	}
	return 0
}

// Events are the events of one body, in order.
type Events interface {
	Len() int          // how many
	JSON(i int) []byte // the JSON of event i, as encoded at acceptance
	Bytes() int        // their JSON and the commas between them
}

// A Frame is what a body has around its events. The zero value is not
// useful; see NewFrame.
type Frame struct {
	writeKey    []byte // as a JSON string
	extra       []byte // members written after the batch array
	eventSentAt bool   // sentAt on every event too
}

// NewFrame returns the frame of bodies with the write key writeKey, the
// extra members extra (JSON object members without braces, or nil; see
// ValidExtra) and, with eventSentAt, the attempt's sentAt on every event.
func NewFrame(writeKey string, extra []byte, eventSentAt bool) Frame {
	return Frame{writeKey: AppendString(nil, writeKey), extra: extra, eventSentAt: eventSentAt}
}

// Size is the most a body adds around its events (their JSON and the
// commas between them): the envelope, the longest sentAt, the write key
// and the extra members, as Encode writes them. It is the one formula for
// the frame: Encode sizes its buffer with it, and a body limit less Size is
// what the events may take.
func (f *Frame) Size() int {
	n := len(`{"batch":[],"sentAt":"","writeKey":}`) + maxTimestampBytes + len(f.writeKey)
	if len(f.extra) > 0 {
		n += 1 + len(f.extra) // the comma before the members
	}
	return n
}

// BodySize is the most the body of evs takes: Size, their JSON and commas,
// and what the per-event sentAt adds to each.
func (f *Frame) BodySize(evs Events) int {
	return evs.Bytes() + evs.Len()*PerEvent(f.eventSentAt) + f.Size()
}

// Encode writes the body of evs into buf (reused when large enough);
// sentAt is the time of the attempt, written in UTC.
func (f *Frame) Encode(buf []byte, evs Events, sentAt time.Time) []byte {
	var text [64]byte
	stamp := appendTimestamp(text[:0], sentAt.UTC(), nil)
	// The size is known: allocate once rather than grow by doubling, with
	// an eighth to spare, so that a reused buffer (the bodies of one
	// client's full batches differ by a few bytes) rarely has to be
	// allocated again.
	if need := f.BodySize(evs); cap(buf) < need {
		buf = make([]byte, 0, need+need/8)
	}
	buf = append(buf[:0], `{"batch":[`...)
	buf = appendEvents(buf, evs, f.eventSentAt, stamp)
	buf = append(buf, ']')
	if len(f.extra) > 0 {
		buf = append(append(buf, ','), f.extra...)
	}
	buf = append(buf, `,"sentAt":"`...)
	buf = append(buf, stamp...)
	buf = append(buf, `","writeKey":`...)
	buf = append(buf, f.writeKey...)
	return append(buf, '}')
}

// appendEvents writes evs to buf as the members of the batch array, comma
// separated. With sentAt on, each event gets `,"sentAt":"<stamp>"` before
// its closing brace, stamp being the attempt's sentAt as the body's own
// field has it. The Encoder writes every event as an object ending in '}'
// whose top-level keys are its own (type, messageId, timestamp, ids,
// names, properties or traits, context, integrations) and never sentAt:
// the caller's maps are nested under properties, traits, context and
// integrations, so the spliced key is never a duplicate. An event that
// does not end in '}' is written unchanged.
func appendEvents(buf []byte, evs Events, sentAt bool, stamp []byte) []byte {
	var text [96]byte
	tail := append(append(append(text[:0], `,"sentAt":"`...), stamp...), '"', '}')
	for i := range evs.Len() {
		if i > 0 {
			buf = append(buf, ',')
		}
		d := evs.JSON(i)
		if !sentAt || len(d) == 0 || d[len(d)-1] != '}' {
			buf = append(buf, d...)
			continue
		}
		buf = append(buf, d[:len(d)-1]...)
		buf = append(buf, tail...)
	}
	return buf
}

// ValidExtra reports whether members are JSON object members, at most
// limit bytes, that take none of the body's own keys (batch, sentAt,
// writeKey).
func ValidExtra(members []byte, limit int) bool {
	if len(members) > limit {
		return false
	}
	obj := append(append([]byte{'{'}, members...), '}')
	var m map[string]json.RawMessage
	if bytes.HasPrefix(bytes.TrimSpace(members), []byte{','}) || json.Unmarshal(obj, &m) != nil {
		return false
	}
	_, batch := m["batch"]
	_, sentAt := m["sentAt"]
	_, key := m["writeKey"]
	return !batch && !sentAt && !key
}

// The hot path hands out small pieces of larger allocations: event JSON is
// copied into 32 KiB slabs, and message ids that callbacks will read are cut
// from strings of 64 ids (without callbacks, ids are written straight into
// the JSON). One allocation then serves many events. The caller keeps one
// Scratch per P (through sync.Pool), so concurrent callers rarely share a
// slab.
//
// Slabs are reused. A slab counts holds: the events cut from it that have
// no disposition yet, plus the tickets its scratch has not handed out yet.
// A scratch takes a new slab with slabTickets tickets and hands one to each
// event without touching the count; when it moves on to the next slab it
// gives the rest back in one step, and each disposition gives one back. The
// count reaches zero when the scratch has moved on and every event is done;
// the slab then goes back to a pool. An event's JSON is read only between
// its acceptance and its disposition (the request body is a copy), and
// every accepted event has exactly one disposition, which is what makes
// this safe. A slab whose count never reaches zero (a scratch dropped by
// the pool, say) is simply collected.

// SlabSize is the size of a slab; an event larger than a quarter of it
// gets its own allocation.
const SlabSize = 32 << 10

const (
	idsPerBlock = 64
	slabTickets = 1 << 30 // more than a slab can hold events
)

// A Slab holds the JSON of many events. Only the Scratch that owns it
// appends.
type Slab struct {
	buf  []byte
	refs atomic.Int32 // holds, as described above
}

var slabs = sync.Pool{New: func() any { return &Slab{buf: make([]byte, 0, SlabSize)} }}

// PoisonFreedSlabs makes tests overwrite a slab as it goes back to the
// pool, so that JSON read after its release shows at once as a broken
// body. Set it before any slab is used.
var PoisonFreedSlabs = false

// Release gives back n holds (one per event cut from sl whose JSON will not
// be read again); the last one returns the slab to the pool.
func (sl *Slab) Release(n int32) {
	if sl.refs.Add(-n) == 0 {
		if PoisonFreedSlabs {
			clear(sl.buf)
		}
		sl.buf = sl.buf[:0]
		slabs.Put(sl)
	}
}

// A Scratch is the hot path's working state: an Encoder, the current slab
// and the current id block. The zero value is ready to use. Not safe for
// concurrent use; the caller keeps one per P through sync.Pool.
type Scratch struct {
	Enc    Encoder
	slab   *Slab
	handed int32  // tickets of slab handed out
	ids    string // a block of idsPerBlock ids, 36 bytes each
	next   int    // the next id of ids

	// Between AimAtSlab and the next CopyToSlab or Clean, Enc writes into
	// the free end of slab and own keeps the encoder's own buffer.
	aimed bool
	own   []byte
}

// NewScratch returns a Scratch whose Encoder has room for a typical event.
func NewScratch() Scratch {
	return Scratch{Enc: newEncoder()}
}

// Clean drops what s refers to of its last user (the defaults) and an
// outsize encoder buffer, before s goes back to a pool.
func (s *Scratch) Clean() {
	s.unaim()
	s.Enc.clean()
}

// aimRoom is the least free room of a slab that AimAtSlab writes into;
// with less, it moves on to a fresh slab (the rest, under a typical
// event's size, is left unused).
const aimRoom = 1 << 10

// AimAtSlab has the next event encoded straight into the free end of the
// current slab, so that CopyToSlab finds its JSON already in place and
// copies nothing: the one copy of an event's JSON on the hot path is then
// the request body's. Call it after Enc.Reset. It does nothing when the
// encoder's own buffer has grown past the slab room at hand (an event of
// that size may come again: it is encoded apart and copied, as without
// AimAtSlab). What was written in the slab's free end and not taken by
// CopyToSlab is overwritten by the next event: the slab's length moves
// only in CopyToSlab.
func (s *Scratch) AimAtSlab() {
	if s.aimed {
		return
	}
	sl := s.slab
	if sl == nil || cap(sl.buf)-len(sl.buf) < aimRoom {
		sl = s.nextSlab()
	}
	free := sl.buf[len(sl.buf):cap(sl.buf)]
	if cap(s.Enc.buf) > len(free) {
		return
	}
	s.own, s.aimed = s.Enc.buf[:0], true
	s.Enc.buf = free[:0]
}

// unaim gives the encoder its own buffer back. One that outgrew the slab
// room (append moved it to a new array) becomes its own buffer, as it
// would have grown without AimAtSlab, unless it is larger than an event
// cut from a slab: a rare large event must not stop AimAtSlab for good.
func (s *Scratch) unaim() {
	if !s.aimed {
		return
	}
	if grown := s.Enc.buf; !s.inSlab(grown) && cap(grown) > cap(s.own) && cap(grown) <= SlabSize/4 {
		s.own = grown
	}
	s.Enc.buf, s.own, s.aimed = s.own[:0], nil, false
}

// inSlab reports whether p starts at the free end of the current slab:
// the encoder wrote it there (aimed) and it did not outgrow the room.
func (s *Scratch) inSlab(p []byte) bool {
	sl := s.slab
	if !s.aimed || sl == nil || cap(p) == 0 {
		return false
	}
	n := len(sl.buf)
	return n < cap(sl.buf) && &sl.buf[:n+1][n] == &p[:1][0]
}

// nextSlab gives back the tickets of the current slab not handed out and
// takes a fresh slab.
func (s *Scratch) nextSlab() *Slab {
	if s.slab != nil {
		s.slab.Release(slabTickets - s.handed) // the tickets not handed out
	}
	sl := slabs.Get().(*Slab)
	sl.refs.Store(slabTickets)
	s.slab, s.handed = sl, 0
	return sl
}

// CopyToSlab returns a copy of p for an event, and the slab it was cut
// from (nil for a large event, which gets its own allocation). The caller
// owns one hold on the slab and must Release it at the event's
// disposition, or at once if the event is not accepted.
//
// After AimAtSlab, p is normally the encoder's JSON, already in the slab's
// free end: the slab then only grows over it. The encoder gets its own
// buffer back either way.
func (s *Scratch) CopyToSlab(p []byte) ([]byte, *Slab) {
	if s.inSlab(p) {
		sl := s.slab
		start := len(sl.buf)
		s.unaim() // before the slab grows over p: unaim tells p is in place
		sl.buf = sl.buf[:start+len(p)]
		s.handed++
		return sl.buf[start:len(sl.buf):len(sl.buf)], sl
	}
	defer s.unaim() // after the copy: p may be the encoder's buffer
	if len(p) > SlabSize/4 {
		return append([]byte(nil), p...), nil
	}
	sl := s.slab
	if sl == nil || cap(sl.buf)-len(sl.buf) < len(p) {
		sl = s.nextSlab()
	}
	start := len(sl.buf)
	sl.buf = append(sl.buf, p...)
	s.handed++
	return sl.buf[start:len(sl.buf):len(sl.buf)], sl
}

// MessageID returns a random (version 4) UUID cut from the current block.
// math/rand/v2's global source is ChaCha8, seeded by the runtime and safe
// for concurrent use, which is plenty for idempotency keys and far cheaper
// than crypto/rand.
func (s *Scratch) MessageID() string {
	if s.next*36 >= len(s.ids) {
		buf := make([]byte, 0, idsPerBlock*36)
		for i := 0; i < idsPerBlock; i++ {
			buf = appendUUID(buf)
		}
		s.ids, s.next = string(buf), 0
	}
	id := s.ids[s.next*36 : (s.next+1)*36]
	s.next++
	return id
}

// appendTimestamp appends t as time.RFC3339Nano would. Times in UTC (every
// timestamp the SDK stamps, and sentAt) take a direct path; other
// locations keep their offset through AppendFormat. A non-nil cache keeps
// the text of the last second formatted, so consecutive events within a
// second only format their fraction.
func appendTimestamp(b []byte, t time.Time, cache *secondText) []byte {
	if t.Location() != time.UTC {
		return t.AppendFormat(b, time.RFC3339Nano)
	}
	sec := t.Unix()
	var own secondText
	if cache == nil {
		cache = &own
	}
	if !cache.ok || cache.sec != sec {
		if !cache.set(t, sec) {
			return t.AppendFormat(b, time.RFC3339Nano)
		}
	}
	b = append(b, cache.text[:]...)
	if ns := t.Nanosecond(); ns != 0 {
		// nine digits: one, then four pairs, written in place (b's spare
		// capacity, grown once if short), the trailing zeros then cut
		at := len(b)
		b = slices.Grow(b, 11)[:at+10]
		f := (*[10]byte)(b[at:])
		f[0], f[1] = '.', byte('0'+ns/1e8)
		r := ns % 1e8
		put2(f[2:], r/1e6)
		put2(f[4:], r/1e4%100)
		put2(f[6:], r/100%100)
		put2(f[8:], r%100)
		n := 10
		for f[n-1] == '0' {
			n--
		}
		b = b[:at+n]
	}
	return append(b, 'Z')
}

// secondText is "YYYY-MM-DDTHH:MM:SS" of one second (Unix time sec).
type secondText struct {
	sec  int64
	text [19]byte
	ok   bool
}

// set formats t's second (sec is t.Unix()); it reports false for years
// outside 0–9999, which RFC 3339 cannot write in four digits.
func (c *secondText) set(t time.Time, sec int64) bool {
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return false
	}
	hour, minute, second := t.Clock()
	a := &c.text
	a[0] = byte('0' + year/1000)
	a[1] = byte('0' + year/100%10)
	put2(a[2:], year%100)
	a[4] = '-'
	put2(a[5:], int(month))
	a[7] = '-'
	put2(a[8:], day)
	a[10] = 'T'
	put2(a[11:], hour)
	a[13] = ':'
	put2(a[14:], minute)
	a[16] = ':'
	put2(a[17:], second)
	c.sec, c.ok = sec, true
	return true
}

func put2(dst []byte, v int) {
	dst[0] = byte('0' + v/10)
	dst[1] = byte('0' + v%10)
}
