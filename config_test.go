package analytics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// U5, R48, R49: an unconfigured client's effective config is the defaults table of docs/delivery.md.
func TestDefaultConfig(t *testing.T) {
	c, err := New("wk")
	require.NoError(t, err)
	auditLater(t, c, nil)
	defer func() { require.NoError(t, closeClient(t, c, time.Second)) }()
	assert.Equal(t, Config{
		Endpoint:                "https://api.segment.io",
		FlushAt:                 250,
		FlushInterval:           5 * time.Second,
		QueueCapacity:           30_000,
		Consumers:               DefaultConsumers,
		HTTPTimeout:             10 * time.Second,
		MaxRetries:              1000,
		MaxTotalBackoffDuration: 43_200 * time.Second,
		MaxRateLimitDuration:    43_200 * time.Second,
		CloseTimeout:            30 * time.Second,
		backoff: backoffPolicy{
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
	b := newBackoff(c.Config().backoff)
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
	auditLater(t, c, nil)
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
	auditLater(t, c, nil)
	assert.Nil(t, mine.CheckRedirect)
	assert.True(t, c.Config().CustomHTTPClient)
	require.NoError(t, closeClient(t, c, time.Second))
}

// Every numeric option has an upper bound: a value above it, up to the
// largest int or Duration, is a *ConfigError naming the field, never a
// panic or an allocation; the bound itself is accepted.
func TestConfigUpperBounds(t *testing.T) {
	type bound struct {
		field string
		at    Option // the bound itself: accepted
		above []Option
	}
	bounds := []bound{
		{"FlushAt", WithFlushAt(MaxFlushAt), []Option{WithFlushAt(MaxFlushAt + 1), WithFlushAt(math.MaxInt), WithFlushAt(math.MaxInt - 5000)}},
		{"QueueCapacity", WithQueueCapacity(MaxQueueCapacity), []Option{WithQueueCapacity(MaxQueueCapacity + 1), WithQueueCapacity(math.MaxInt)}},
		{"Consumers", WithConsumers(MaxConsumers), []Option{WithConsumers(MaxConsumers + 1), WithConsumers(math.MaxInt)}},
		{"MaxRetries", WithMaxRetries(MaxRetriesBound), []Option{WithMaxRetries(MaxRetriesBound + 1), WithMaxRetries(math.MaxInt)}},
		{"FlushInterval", WithFlushInterval(MaxFlushInterval), []Option{WithFlushInterval(MaxFlushInterval + 1), WithFlushInterval(math.MaxInt64)}},
		{"HTTPTimeout", WithHTTPTimeout(MaxHTTPTimeout), []Option{WithHTTPTimeout(MaxHTTPTimeout + 1), WithHTTPTimeout(math.MaxInt64)}},
		{"MaxTotalBackoffDuration", WithMaxTotalBackoffDuration(MaxTotalBackoffDurationBound), []Option{WithMaxTotalBackoffDuration(MaxTotalBackoffDurationBound + 1), WithMaxTotalBackoffDuration(math.MaxInt64)}},
		{"MaxRateLimitDuration", WithMaxRateLimitDuration(MaxRateLimitDurationBound), []Option{WithMaxRateLimitDuration(MaxRateLimitDurationBound + 1), WithMaxRateLimitDuration(math.MaxInt64)}},
	}
	for _, b := range bounds {
		for i, o := range b.above {
			var c *Client
			var err error
			require.NotPanics(t, func() { c, err = New("wk", WithEndpoint("http://127.0.0.1:1"), o) }, "%s #%d", b.field, i)
			if c != nil {
				_ = closeClient(t, c, time.Second)
			}
			var ce *ConfigError
			require.ErrorAs(t, err, &ce, "%s #%d: a value out of bounds is accepted", b.field, i)
			assert.Equal(t, b.field, ce.Field)
			bound := "Max" + b.field // MaxFlushAt; the Max… settings' bounds are …Bound
			if strings.HasPrefix(b.field, "Max") {
				bound = b.field + "Bound"
			}
			assert.Contains(t, err.Error(), "("+bound+")", "the error names the bound")
		}
		c, err := New("wk", WithEndpoint("http://127.0.0.1:1"), b.at)
		require.NoError(t, err, b.field)
		auditLater(t, c, nil)
		require.NoError(t, closeClient(t, c, 5*time.Second))
	}
	for _, o := range []Option{WithFlushAt(math.MinInt), WithQueueCapacity(math.MinInt), WithConsumers(math.MinInt),
		WithMaxRetries(math.MinInt), WithHTTPTimeout(math.MinInt64), WithMaxRateLimitDuration(math.MinInt64)} {
		_, err := New("wk", o)
		var ce *ConfigError
		assert.ErrorAs(t, err, &ce)
	}
	assert.Equal(t, 10_000, MaxFlushAt)
	assert.Equal(t, 1_000_000, MaxQueueCapacity)
	assert.Equal(t, 7*24*time.Hour, MaxRateLimitDurationBound)
}

// A later option overrides an earlier one, also when the earlier value was
// invalid: only the final values are checked.
func TestConfigValidatesFinalValues(t *testing.T) {
	c, err := New("wk", WithEndpoint("http://127.0.0.1:1"),
		WithFlushAt(0), WithFlushAt(10),
		WithQueueCapacity(-1), WithQueueCapacity(20),
		WithConsumers(0), WithConsumers(2),
		WithHTTPTimeout(0), WithHTTPTimeout(time.Second),
		WithFlushInterval(-1), WithFlushInterval(time.Second),
		WithMaxRetries(-1), WithMaxRetries(3),
		WithMaxTotalBackoffDuration(-1), WithMaxTotalBackoffDuration(time.Minute),
		WithMaxRateLimitDuration(-1), WithMaxRateLimitDuration(time.Minute),
		WithHTTPClient(nil), WithHTTPClient(&http.Client{}),
		WithLogger(nil), WithLogger(zap.NewNop()),
	)
	require.NoError(t, err)
	auditLater(t, c, nil)
	cfg := c.Config()
	assert.Equal(t, 10, cfg.FlushAt)
	assert.Equal(t, 20, cfg.QueueCapacity)
	assert.Equal(t, 2, cfg.Consumers)
	assert.Equal(t, 3, cfg.MaxRetries)
	require.NoError(t, closeClient(t, c, time.Second))

	// And the other way round: a valid value overridden by an invalid one fails.
	_, err = New("wk", WithFlushAt(10), WithFlushAt(0))
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "FlushAt", ce.Field)
}

// An endpoint that already ends in /v1/batch, or has a query or fragment,
// fails New with a *ConfigError that says to pass the base URL.
func TestEndpointMustBeTheBaseURL(t *testing.T) {
	for _, ep := range []string{
		"https://api.segment.io/v1/batch",
		"https://api.segment.io/v1/batch/",
		"https://proxy.example.com/segment/V1/Batch",
		"https://api.segment.io?region=eu",
		"https://api.segment.io/?",
		"https://api.segment.io#x",
		"https://api.segment.io/#",
		"https://api.segment.io/v1",
		"https://api.segment.io/v1/",
		"https://proxy.example.com/segment/V1",
		"https://api.segment.io//",
		"https://proxy.example.com/segment//",
	} {
		c, err := New("wk", WithEndpoint(ep))
		assert.Nil(t, c, ep)
		var ce *ConfigError
		if assert.ErrorAs(t, err, &ce, ep) {
			assert.Equal(t, "Endpoint", ce.Field)
			assert.Contains(t, err.Error(), "base URL", ep)
			assert.Contains(t, err.Error(), "https://api.segment.io", ep)
		}
	}
	for _, ep := range []string{"https://proxy.example.com/segment", "http://127.0.0.1:1/", "https://api.segment.io/v1/batcher",
		"https://proxy.example.com/v1x", "https://proxy.example.com/api/v10/"} {
		c, err := New("wk", WithEndpoint(ep))
		require.NoError(t, err, ep)
		auditLater(t, c, nil)
		require.NoError(t, closeClient(t, c, time.Second))
	}
}

// A password (or any user information) in the endpoint URL is not printed
// by Config.String (logged at debug) or by a ConfigError.
func TestEndpointUserInfoRedacted(t *testing.T) {
	c, err := New("wk", WithEndpoint("https://proxyuser:hunter2@proxy.example.com/segment"))
	require.NoError(t, err)
	auditLater(t, c, nil)
	defer func() { require.NoError(t, closeClient(t, c, time.Second)) }()
	s := c.Config().String()
	assert.NotContains(t, s, "hunter2")
	assert.NotContains(t, s, "proxyuser")
	assert.Contains(t, s, "endpoint=https://xxxxx@proxy.example.com/segment")

	for _, ep := range []string{
		"https://proxyuser:hunter2@proxy.example.com/v1/batch",
		"ftp://proxyuser:hunter2@proxy.example.com",
		"https://proxyuser:hunter2@proxy.example.com/?q=1",
		"proxyuser:hunter2@proxy.example.com",
		"https://proxyuser:hun ter2@proxy.example.com%zz",
	} {
		_, err := New("wk", WithEndpoint(ep))
		require.Error(t, err, ep)
		assert.NotContains(t, err.Error(), "hunter2", ep)
		assert.NotContains(t, err.Error(), "hun ter2", ep)
	}
}

// Config is safe to log in every form, not only through String: a password
// in the endpoint URL never reaches slog's JSON handler, JSON, %+v, %#v or
// zap.Any.
func TestConfigRedactedInEveryForm(t *testing.T) {
	c, err := New("wk", WithEndpoint("https://proxyuser:s3cret@proxy.example.com/segment"))
	require.NoError(t, err)
	auditLater(t, c, nil)
	defer func() { require.NoError(t, closeClient(t, c, time.Second)) }()
	cfg := c.Config()

	var out bytes.Buffer
	slog.New(slog.NewJSONHandler(&out, nil)).Info("client", "config", cfg)
	fmt.Fprintf(&out, "\n%v\n%+v\n%#v\n%s\n", cfg, cfg, cfg, cfg)
	j, err := json.Marshal(cfg)
	require.NoError(t, err)
	out.Write(j)
	var zout bytes.Buffer
	zl := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&zout), zapcore.DebugLevel))
	zl.Info("client", zap.Any("config", cfg), zap.Stringer("s", cfg))
	out.Write(zout.Bytes())

	text := out.String()
	assert.NotContains(t, text, "s3cret")
	assert.NotContains(t, text, "proxyuser")
	assert.Contains(t, text, `"Endpoint":"https://xxxxx@proxy.example.com/segment"`)
	assert.Equal(t, "https://xxxxx@proxy.example.com/segment", cfg.Endpoint)
}

// A write key with surrounding whitespace (read from a secret file with its
// newline) is refused at New, without printing the key, instead of getting
// a 401 on every request.
func TestWriteKeyWhitespaceRefused(t *testing.T) {
	for _, wk := range []string{"s3cretkey\n", "s3cretkey\r\n", " s3cretkey", "s3cretkey\t"} {
		c, err := New(wk, WithEndpoint("http://127.0.0.1:1"))
		assert.Nil(t, c)
		var ce *ConfigError
		if assert.ErrorAs(t, err, &ce, "%q", wk) {
			assert.Equal(t, "WriteKey", ce.Field)
			assert.Contains(t, err.Error(), "whitespace")
			assert.NotContains(t, err.Error(), "s3cretkey")
		}
	}
	c, err := New("s3cret key", WithEndpoint("http://127.0.0.1:1")) // inner space: the key's business
	require.NoError(t, err)
	auditLater(t, c, nil)
	require.NoError(t, closeClient(t, c, time.Second))
}
