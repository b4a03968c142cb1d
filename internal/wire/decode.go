package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Stored is every field the Encoder writes, for reading an event's JSON
// back into its message.
type Stored struct {
	Type         string         `json:"type"`
	MessageID    string         `json:"messageId"`
	Timestamp    time.Time      `json:"timestamp"`
	UserID       string         `json:"userId"`
	AnonymousID  string         `json:"anonymousId"`
	Event        string         `json:"event"`
	GroupID      string         `json:"groupId"`
	Name         string         `json:"name"`
	Category     string         `json:"category"`
	PreviousID   string         `json:"previousId"`
	Properties   map[string]any `json:"properties"`
	Traits       map[string]any `json:"traits"`
	Context      map[string]any `json:"context"`
	Integrations map[string]any `json:"integrations"`
}

// Numbers says how Decode reads the numbers in an event's maps.
type Numbers int

const (
	// Float64s reads every number as a float64, as encoding/json does.
	Float64s Numbers = iota
	// Ints reads a number written without a fraction or an exponent that
	// fits in an int as an int, as the caller most likely gave it, and
	// every other number as a float64.
	Ints
	// JSONNumbers reads every number as a json.Number, keeping its digits.
	JSONNumbers
)

// ErrTrailing is DecodeOne's error for data after the event's object.
var ErrTrailing = errors.New("data after the JSON object")

// Decode reads an event's JSON, numbers as n says; nested objects come
// back as map[string]any.
func Decode(data []byte, n Numbers) (*Stored, error) {
	var s Stored
	if n == Float64s {
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, err
		}
		return &s, nil
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&s); err != nil {
		return nil, err
	}
	if n == Ints {
		for _, m := range []map[string]any{s.Properties, s.Traits, s.Context, s.Integrations} {
			for k, v := range m {
				m[k] = ints(v)
			}
		}
	}
	return &s, nil
}

// DecodeOne reads exactly one JSON object, numbers as json.Numbers: data
// after it is ErrTrailing.
func DecodeOne(data []byte) (*Stored, error) {
	var s Stored
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&s); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, ErrTrailing
	}
	return &s, nil
}

// ints replaces the json.Numbers in v (a decoded JSON value) by ints or
// float64s, as Ints describes.
func ints(v any) any {
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil && i >= math.MinInt && i <= math.MaxInt {
				return int(i)
			}
		}
		f, _ := strconv.ParseFloat(s, 64) // the encoder wrote only numbers a float64 holds
		return f
	case map[string]any:
		for k, item := range x {
			x[k] = ints(item)
		}
	case []any:
		for i, item := range x {
			x[i] = ints(item)
		}
	}
	return v
}
