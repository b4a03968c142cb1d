package analytics

import "fmt"

// defaults are the maps of WithDefaultContext and WithDefaultProperties,
// copied when New applies the options and read-only afterwards, so every
// consumer and enqueue call may read them without a lock.
type defaults struct {
	context    map[string]any
	properties map[string]any

	// The same entries encoded once, at New; the encoder splices them into
	// each event's JSON (see encoder.merged).
	encodedContext, encodedProperties *encodedDefaults
}

// encodedDefaults are the entries of a defaults map as JSON members, each
// `"key":value`, ready to be written into an event's object.
type encodedDefaults struct {
	keys    []string // keys[i] is the key of members[i]
	members [][]byte
	all     []byte // every member, comma-separated: for an event without a map of its own
	library bool   // the map has a "library" entry (context only: it replaces the client's)
}

// encodeDefaults encodes m's entries; nil for an empty m.
func encodeDefaults(m map[string]any) (*encodedDefaults, error) {
	if len(m) == 0 {
		return nil, nil
	}
	d := &encodedDefaults{}
	var e encoder
	for k, v := range m {
		e.buf = e.buf[:0]
		first := true
		e.entry(&first, k, v, 0)
		if e.err != nil {
			return nil, encodedDefaultsError(&e)
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

// checkDefaults encodes m once, so that a value that is not JSON fails New
// instead of every enqueue call.
func checkDefaults(m map[string]any) error {
	_, err := encodeDefaults(m)
	return err
}

// encodedDefaultsError is the error of a defaults map that cannot be
// encoded: the key path of the value and why.
func encodedDefaultsError(e *encoder) error {
	return fmt.Errorf("%s cannot be encoded as JSON: %w", e.keyPath(""), e.err)
}

// newDefaults returns the client's defaults, or nil when there are none, so
// that enqueue calls without the options do no extra work. The options
// have checked that the maps encode.
func newDefaults(ctx, props map[string]any) *defaults {
	if len(ctx) == 0 && len(props) == 0 {
		return nil
	}
	d := &defaults{}
	if len(ctx) > 0 {
		d.context = ctx
		d.encodedContext, _ = encodeDefaults(ctx)
	}
	if len(props) > 0 {
		d.properties = props
		d.encodedProperties, _ = encodeDefaults(props)
	}
	return d
}

// mergeContext returns the Context callbacks get: a copy of own with the
// default entries it lacks (nil when both are empty).
func (d *defaults) mergeContext(own map[string]any) map[string]any {
	if d == nil {
		return cloneMap(own)
	}
	return mergeMaps(own, d.context)
}

// mergeProperties is mergeContext for Properties.
func (d *defaults) mergeProperties(own map[string]any) map[string]any {
	if d == nil {
		return cloneMap(own)
	}
	return mergeMaps(own, d.properties)
}

// mergeMaps copies own's top level and adds under's entries whose keys own
// lacks. It returns nil when own is nil and under is empty.
func mergeMaps(own, under map[string]any) map[string]any {
	if len(under) == 0 {
		return cloneMap(own)
	}
	out := make(map[string]any, len(own)+len(under))
	for k, v := range under {
		out[k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}
