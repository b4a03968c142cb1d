package wire

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Decode reads numbers as asked: float64s, ints where the text is a whole
// number that fits, or json.Numbers; nested ones too.
func TestDecodeNumbers(t *testing.T) {
	data := []byte(`{"type":"track","properties":{"i":42,"f":1.5,"e":1e3,"big":12345678901234567890,"deep":[{"n":7}]}}`)
	s, err := Decode(data, Float64s)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"i": 42.0, "f": 1.5, "e": 1000.0, "big": 12345678901234567890.0, "deep": []any{map[string]any{"n": 7.0}}}, s.Properties)
	s, err = Decode(data, Ints)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"i": 42, "f": 1.5, "e": 1000.0, "big": 12345678901234567890.0, "deep": []any{map[string]any{"n": 7}}}, s.Properties)
	s, err = Decode(data, JSONNumbers)
	require.NoError(t, err)
	assert.Equal(t, json.Number("12345678901234567890"), s.Properties["big"])
	assert.Equal(t, "track", s.Type)
}

// DecodeOne reads one object and nothing after it.
func TestDecodeOne(t *testing.T) {
	s, err := DecodeOne([]byte(` {"type":"alias","previousId":"p","context":{"n":1}} `))
	require.NoError(t, err)
	assert.Equal(t, "p", s.PreviousID)
	assert.Equal(t, json.Number("1"), s.Context["n"])
	_, err = DecodeOne([]byte(`{"type":"alias"}{"type":"track"}`))
	assert.ErrorIs(t, err, ErrTrailing)
	_, err = DecodeOne([]byte(`[1]`))
	assert.Error(t, err)
	assert.NotErrorIs(t, err, ErrTrailing)
}
