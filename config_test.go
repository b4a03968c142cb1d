package analytics

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// U5, R48, R49: an unconfigured client's effective config is the defaults table of docs/delivery.md.
func TestDefaultConfig(t *testing.T) {
	c, err := New("wk")
	require.NoError(t, err)
	defer func() { require.NoError(t, closeClient(t, c, time.Second)) }()
	assert.Equal(t, Config{
		Endpoint:                "https://api.segment.io",
		FlushAt:                 250,
		FlushInterval:           5 * time.Second,
		QueueCapacity:           10_000,
		Consumers:               DefaultConsumers,
		HTTPTimeout:             10 * time.Second,
		MaxRetries:              10,
		MaxTotalBackoffDuration: 43_200 * time.Second,
		MaxRateLimitDuration:    43_200 * time.Second,
		Backoff: BackoffPolicy{
			InitialInterval:     500 * time.Millisecond,
			Multiplier:          2,
			MaxInterval:         60 * time.Second,
			RandomizationFactor: 0.1,
			MaxElapsedTime:      0,
		},
		MaxEventBytes: 32_768,
		MaxBatchBytes: 500_000,
	}, c.Config())
	assert.NotContains(t, c.Config().String(), "wk")

	// The backoff the consumers build has exactly these parameters.
	b := newBackoff(c.Config().Backoff)
	assert.Equal(t, 500*time.Millisecond, b.InitialInterval)
	assert.Equal(t, 2.0, b.Multiplier)
	assert.Equal(t, 60*time.Second, b.MaxInterval)
	assert.Equal(t, 0.1, b.RandomizationFactor)
	assert.Equal(t, time.Duration(0), b.MaxElapsedTime)
}

// S30, R48: explicit zeros survive; negatives fail naming the field.
func TestConfigValidation(t *testing.T) {
	c, err := New("wk", WithMaxRetries(0), WithMaxTotalBackoffDuration(0), WithMaxRateLimitDuration(0), WithEndpoint("http://127.0.0.1:1/"))
	require.NoError(t, err)
	cfg := c.Config()
	assert.Zero(t, cfg.MaxRetries)
	assert.Zero(t, cfg.MaxTotalBackoffDuration)
	assert.Zero(t, cfg.MaxRateLimitDuration)
	assert.Equal(t, "http://127.0.0.1:1", cfg.Endpoint)
	require.NoError(t, closeClient(t, c, time.Second))

	bad := map[string][]Option{
		"MaxRetries":              {WithMaxRetries(-1)},
		"MaxTotalBackoffDuration": {WithMaxTotalBackoffDuration(-time.Second)},
		"MaxRateLimitDuration":    {WithMaxRateLimitDuration(-time.Second)},
		"FlushAt":                 {WithFlushAt(0)},
		"FlushInterval":           {WithFlushInterval(0)},
		"QueueCapacity":           {WithQueueCapacity(0)},
		"Consumers":               {WithConsumers(0)},
		"HTTPTimeout":             {WithHTTPTimeout(-1)},
		"HTTPClient":              {WithHTTPClient(nil)},
		"Logger":                  {WithLogger(nil)},
		"Endpoint":                {WithEndpoint("api.segment.io")},
		"Option":                  {nil},
	}
	for field, opts := range bad {
		c, err := New("wk", opts...)
		assert.Nil(t, c)
		var ce *ConfigError
		require.True(t, errors.As(err, &ce), "%s: %v", field, err)
		assert.Equal(t, field, ce.Field)
		assert.Contains(t, err.Error(), field)
	}
	_, err = New(" ")
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "WriteKey", ce.Field)
}

// WithHTTPClient copies the caller's client; the caller's stays untouched.
func TestHTTPClientIsCopied(t *testing.T) {
	mine := &http.Client{Timeout: time.Minute}
	c, err := New("wk", WithHTTPClient(mine))
	require.NoError(t, err)
	assert.Nil(t, mine.CheckRedirect)
	assert.True(t, c.Config().CustomHTTPClient)
	require.NoError(t, closeClient(t, c, time.Second))
}
