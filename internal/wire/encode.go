// Package wire is the client's wire format: the JSON of events, encoded
// once when an event is accepted, and read back; message ids; the slabs
// that hold event JSON; and the request body around a batch of events,
// with the per-event sentAt. It knows nothing of the client: it takes the
// library entry and the default maps from its caller and returns neutral
// errors, which the caller turns into its own error types.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// The encoder writes an event's JSON once, when the event is accepted
// (posthog-go's lesson): its size is known at once, and later changes to the
// caller's maps cannot race with the upload. Common value types are written
// directly; anything else goes through encoding/json. Map keys are written
// in map order (JSON objects are unordered).

// MaxNesting is how deep maps and lists may nest below an event's
// top-level map (properties, traits, context, integrations).
const MaxNesting = 64

// ErrTooDeep is the error of a value nested deeper than MaxNesting.
var ErrTooDeep = errors.New("nesting deeper than 64 levels (a cycle?)")

// An Encoder writes one event's JSON at a time. Its zero value writes an
// event as it is: no library entry, no defaults. Not safe for concurrent
// use.
type Encoder struct {
	buf    []byte
	err    error
	typ    string     // the message type being written, for errors
	second secondText // the last second a timestamp was written in
	// defaults are the encoded default maps (nil without them), merged
	// under the event's own maps.
	defaults *Defaults
	// library is the JSON value of the context.library entry added to
	// every event; "" adds none, and leaves an empty context out.
	library string
	// path is where the value that set err sits, innermost first: map
	// keys and [i] array indexes, recorded as the error unwinds (so only
	// a failing event pays for it). See keyPath.
	path []string
}

// Defaults are the default maps an Encoder merges under each event's own,
// encoded once. A nil member adds nothing.
type Defaults struct {
	Context    *Members // under every event's context
	Properties *Members // under the properties of track, page and screen events
}

// newEncoder returns an Encoder with room for a typical event.
func newEncoder() Encoder { return Encoder{buf: make([]byte, 0, 1024)} }

// clean drops the defaults and an outsize buffer, for the next user.
func (e *Encoder) clean() {
	e.defaults = nil
	if cap(e.buf) > 64<<10 { // do not keep a huge event's buffer
		e.buf = make([]byte, 0, 1024)
	}
}

// Reset empties e for the next event, which gets the library entry
// library (the JSON value of context.library; "" for none) and the
// defaults d (nil for none).
func (e *Encoder) Reset(d *Defaults, library string) {
	e.buf, e.err, e.defaults, e.library = e.buf[:0], nil, d, library
}

// Bytes is the JSON written since the last Reset. It stays valid until
// the next Reset.
func (e *Encoder) Bytes() []byte { return e.buf }

// Members are the entries of a map as JSON object members, each
// `"key":value`, encoded once and spliced into each event's object (see
// Defaults).
type Members struct {
	keys    []string // keys[i] is the key of members[i]
	members [][]byte
	all     []byte // every member, comma-separated: for an event without a map of its own
	library bool   // the map has a "library" entry (context only: it replaces the caller's)
}

// EncodeMembers encodes m's entries; nil for an empty m. A value that
// cannot be encoded is an error naming its key path.
func EncodeMembers(m map[string]any) (*Members, error) {
	if len(m) == 0 {
		return nil, nil
	}
	d := &Members{}
	var e Encoder
	for k, v := range m {
		e.buf = e.buf[:0]
		first := true
		e.entry(&first, k, v, 0)
		if e.err != nil {
			return nil, fmt.Errorf("%s cannot be encoded as JSON: %w", e.keyPath(""), e.err)
		}
		member := append([]byte(nil), e.buf...)
		d.keys, d.members = append(d.keys, k), append(d.members, member)
		if len(d.all) > 0 {
			d.all = append(d.all, ',')
		}
		d.all = append(d.all, member...)
		if k == "library" {
			d.library = true
		}
	}
	return d, nil
}

// A FieldError is why one of an event's top-level maps could not be
// encoded: the message type, the map's JSON key ("properties"), the key
// path of the value from that key ("properties.revenue",
// "context.device.ids[2]") and the cause.
type FieldError struct {
	Type, Key, Path string
	Err             error
}

// Header opens the object with the fields every message has. An empty id
// gets a new random one, written straight into the JSON.
func (e *Encoder) Header(typ, id string, ts time.Time, userID, anonymousID string) {
	e.typ = typ
	// Performance: the hot path appends to a local slice, which stays in
	// registers, and stores it back once.
	b := append(e.buf, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","messageId":`...)
	if id == "" {
		b = append(b, '"')
		b = appendUUID(b)
		b = append(b, '"')
	} else {
		b = AppendString(b, id)
	}
	b = append(b, `,"timestamp":"`...)
	b = appendTimestamp(b, ts, &e.second)
	b = append(b, '"')
	if userID != "" {
		b = appendField(b, "userId", userID)
	}
	if anonymousID != "" {
		b = appendField(b, "anonymousId", anonymousID)
	}
	e.buf = b
}

// StringField writes the member "key":v.
func (e *Encoder) StringField(key, v string) { e.buf = appendField(e.buf, key, v) }

// appendField appends the member ,"key":v (key needs no escaping).
func appendField(b []byte, key, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return AppendString(b, v)
}

// OptionalString writes the member "key":v unless v is empty.
func (e *Encoder) OptionalString(key, v string) {
	if v != "" {
		e.StringField(key, v)
	}
}

// Tail writes the free-form map m under key (properties or traits; none
// for an empty key), the context with the library entry, the
// integrations, and closes the object. A value that cannot be encoded is
// a *FieldError, and the JSON is then incomplete.
func (e *Encoder) Tail(key string, m map[string]any, ctx, integrations map[string]any) *FieldError {
	var defaultProps, defaultCtx *Members
	if e.defaults != nil {
		defaultCtx = e.defaults.Context
		if key == "properties" {
			defaultProps = e.defaults.Properties
		}
	}
	if key != "" && (m != nil || defaultProps != nil) {
		e.buf = append(e.buf, ',', '"')
		e.buf = append(e.buf, key...)
		e.buf = append(e.buf, '"', ':')
		e.merged(m, defaultProps, false)
		if e.err != nil {
			return e.encodeError(key)
		}
	}
	if e.library != "" || ctx != nil || defaultCtx != nil {
		e.buf = append(e.buf, `,"context":`...)
		e.merged(ctx, defaultCtx, e.library != "")
		if e.err != nil {
			return e.encodeError("context")
		}
	}
	if integrations != nil {
		e.buf = append(e.buf, `,"integrations":`...)
		e.object(integrations, 0)
		if e.err != nil {
			return e.encodeError("integrations")
		}
	}
	e.buf = append(e.buf, '}')
	return nil
}

// encodeError is the *FieldError of the map under jsonKey that could not
// be encoded.
func (e *Encoder) encodeError(jsonKey string) *FieldError {
	fe := &FieldError{Type: e.typ, Key: jsonKey, Path: e.keyPath(jsonKey), Err: e.err}
	e.path = e.path[:0]
	return fe
}

// keyPath joins root and the recorded path: keys after a dot, indexes and
// keys that are not plain words in brackets (properties["a.b"]).
func (e *Encoder) keyPath(root string) string {
	p := root
	for i := len(e.path) - 1; i >= 0; i-- {
		if el := e.path[i]; p == "" || el[0] == '[' {
			p += el
		} else {
			p += "." + el
		}
	}
	return p
}

// pathKey is how a map key appears in a key path.
func pathKey(k string) string {
	for _, r := range k {
		if !(r == '_' || r == '-' || r == '$' || r == '@' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return "[" + strconv.Quote(k) + "]"
		}
	}
	if k == "" {
		return `[""]`
	}
	return k
}

// merged writes one of an event's top-level maps: m, then the default
// members whose keys m does not have (the event's own key wins, whatever
// its value), as encoded once (EncodeMembers). With library set (the
// context), it adds the library entry first unless m or the defaults have
// their own.
func (e *Encoder) merged(m map[string]any, under *Members, library bool) {
	if m == nil && under == nil {
		// The common case (a context with the library alone): nothing to
		// merge, no map to look into.
		e.buf = append(e.buf, '{')
		if library {
			e.buf = append(e.buf, `"library":`...)
			e.buf = append(e.buf, e.library...)
		}
		e.buf = append(e.buf, '}')
		return
	}
	e.buf = append(e.buf, '{')
	first := true
	if library {
		if _, own := m["library"]; !own && (under == nil || !under.library) {
			e.buf = append(e.buf, `"library":`...)
			e.buf = append(e.buf, e.library...)
			first = false
		}
	}
	if !e.entries(&first, m) {
		return
	}
	if under != nil {
		if len(m) == 0 {
			if !first {
				e.buf = append(e.buf, ',')
			}
			e.buf = append(e.buf, under.all...)
		} else {
			for i, k := range under.keys {
				if _, own := m[k]; own {
					continue
				}
				if !first {
					e.buf = append(e.buf, ',')
				}
				first = false
				e.buf = append(e.buf, under.members[i]...)
			}
		}
	}
	e.buf = append(e.buf, '}')
}

// object writes the JSON object m.
func (e *Encoder) object(m map[string]any, depth int) {
	if depth > MaxNesting {
		e.err = ErrTooDeep
		return
	}
	e.buf = append(e.buf, '{')
	first := true
	for k, v := range m {
		e.entry(&first, k, v, depth)
		if e.err != nil {
			return
		}
	}
	e.buf = append(e.buf, '}')
}

// entries writes the members of m, as entry does, and reports false when
// one could not be encoded (e.err). Performance: the common scalar values
// are written here, on a local slice, without a call per member.
func (e *Encoder) entries(first *bool, m map[string]any) bool {
	b, comma := e.buf, !*first
	for k, v := range m {
		if comma {
			b = append(b, ',')
		}
		comma = true
		b = AppendString(b, k)
		b = append(b, ':')
		switch x := v.(type) {
		case string:
			b = AppendString(b, x)
		case int:
			b = strconv.AppendInt(b, int64(x), 10)
		case bool:
			b = strconv.AppendBool(b, x)
		default:
			e.buf = b
			e.value(v, 1)
			b = e.buf
			if e.err != nil {
				e.path = append(e.path, pathKey(k))
				return false
			}
		}
	}
	e.buf, *first = b, !comma
	return true
}

// entry writes one "key":value member of an object.
func (e *Encoder) entry(first *bool, k string, v any, depth int) {
	if !*first {
		e.buf = append(e.buf, ',')
	}
	*first = false
	e.buf = AppendString(e.buf, k)
	e.buf = append(e.buf, ':')
	e.value(v, depth+1)
	if e.err != nil {
		e.path = append(e.path, pathKey(k))
	}
}

func (e *Encoder) value(v any, depth int) {
	switch x := v.(type) {
	case nil:
		e.buf = append(e.buf, "null"...)
	case string:
		e.buf = AppendString(e.buf, x)
	case bool:
		e.buf = strconv.AppendBool(e.buf, x)
	case int:
		e.buf = strconv.AppendInt(e.buf, int64(x), 10)
	case int64:
		e.buf = strconv.AppendInt(e.buf, x, 10)
	case int32:
		e.buf = strconv.AppendInt(e.buf, int64(x), 10)
	case uint:
		e.buf = strconv.AppendUint(e.buf, uint64(x), 10)
	case uint64:
		e.buf = strconv.AppendUint(e.buf, x, 10)
	case uint32:
		e.buf = strconv.AppendUint(e.buf, uint64(x), 10)
	case float64:
		e.float(x, 64)
	case float32:
		e.float(float64(x), 32)
	case map[string]any:
		e.object(x, depth)
	case []any:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			return
		}
		e.buf = append(e.buf, '[')
		for i, item := range x {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if depth > MaxNesting {
				e.err = ErrTooDeep
			} else {
				e.value(item, depth+1)
			}
			if e.err != nil {
				e.path = append(e.path, "["+strconv.Itoa(i)+"]")
				return
			}
		}
		e.buf = append(e.buf, ']')
	case []string:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			return
		}
		e.buf = append(e.buf, '[')
		for i, s := range x {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.buf = AppendString(e.buf, s)
		}
		e.buf = append(e.buf, ']')
	case time.Time:
		e.buf = append(e.buf, '"')
		e.buf = appendTimestamp(e.buf, x, &e.second)
		e.buf = append(e.buf, '"')
	case json.RawMessage:
		if !json.Valid(x) {
			e.err = errors.New("invalid json.RawMessage")
			return
		}
		e.buf = append(e.buf, x...)
	case json.Number:
		e.number(x)
	default:
		b, err := marshalValue(x)
		if err != nil {
			e.err = err
			return
		}
		e.buf = append(e.buf, b...)
	}
}

// marshalValue encodes a value of a type the encoder does not know with
// encoding/json. A MarshalJSON (or MarshalText) that panics is an encoding
// error of the event, not a panic in the caller's enqueue call.
func marshalValue(x any) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("encoding %T panicked: %v", x, r)
		}
	}()
	return json.Marshal(x)
}

// number writes a json.Number: it must be a JSON number that a server can
// decode as a float64 (a magnitude up to about 1.8e308; smaller ones round
// to 0). An empty Number is 0, as encoding/json writes it.
func (e *Encoder) number(n json.Number) {
	s := string(n)
	if s == "" {
		s = "0"
	}
	if !validJSONNumber(s) {
		e.err = fmt.Errorf("json.Number %s is not a JSON number", clipQuote(s))
		return
	}
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		e.err = fmt.Errorf("json.Number %s is outside the range of a float64", clipQuote(s))
		return
	}
	e.buf = append(e.buf, s...)
}

// clipQuote quotes the start of s, for an error message.
func clipQuote(s string) string {
	const n = 40
	if len(s) > n {
		return strconv.Quote(s[:n]) + "…"
	}
	return strconv.Quote(s)
}

// validJSONNumber reports whether s is a number in JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validJSONNumber(s string) bool {
	i := 0
	digits := func() int {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - start
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

func (e *Encoder) float(f float64, bits int) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		e.err = fmt.Errorf("unsupported value %v", f)
		return
	}
	// Same shape as encoding/json: plain notation for ordinary magnitudes,
	// exponent notation for very small or large ones.
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	e.buf = strconv.AppendFloat(e.buf, f, format, -1, bits)
}

// AppendString writes s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does; no HTML escaping.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	i := plainPrefix(s)
	if i == len(s) {
		b = append(b, s...)
		return append(b, '"')
	}
	for i < len(s) {
		c := s[i]
		if plainByte[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plainPrefix returns the length of the longest prefix of s that needs no
// escaping in JSON (printable ASCII other than '"' and '\\'): eight bytes at
// a time (the last eight overlapping the bytes already checked), or four
// for a string of four to seven bytes, then a byte at a time through
// plainByte from the first word that has a byte to escape, and for strings
// under four bytes.
func plainPrefix(s string) int {
	i := 0
	switch {
	case len(s) >= 8:
		for ; i+8 <= len(s); i += 8 {
			if !plainWord(word8(s, i)) {
				goto bytes
			}
		}
		if i == len(s) || plainWord(word8(s, len(s)-8)) {
			return len(s)
		}
	case len(s) >= 4:
		if plainWord(word4(s, 0)) && plainWord(word4(s, len(s)-4)) {
			return len(s)
		}
	}
bytes:
	for i < len(s) && plainByte[s[i]] {
		i++
	}
	return i
}

// word8 and word4 are the eight or four bytes of s from i, the first in
// the lowest byte (one load each, as the compiler reads the pattern).
func word8(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func word4(s string, i int) uint32 {
	s = s[i : i+4]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// plainWord reports whether no byte of x, four or eight bytes, needs
// escaping: none is below 0x20, '"', '\\' or 0x80 and above.
// (x - lsb·n) & ^x has a byte's top bit set for some byte below n whenever
// there is one, and never otherwise: a borrow starts only at such a byte.
func plainWord[W uint32 | uint64](x W) bool {
	lsb := ^W(0) / 0xff // 0x01 in every byte
	msb := lsb << 7
	quote, backslash := x^(lsb*'"'), x^(lsb*'\\')
	special := (x - lsb*0x20) & ^x
	special |= (quote - lsb) & ^quote
	special |= (backslash - lsb) & ^backslash
	return (special|x)&msb == 0
}

// hexDigits are the digits of a \u00XX escape.
const hexDigits = "0123456789abcdef"

// plainByte[c] reports whether byte c is written as is in a JSON string.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
