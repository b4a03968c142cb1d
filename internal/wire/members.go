package wire

import "fmt"

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
