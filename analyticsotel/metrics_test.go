package analyticsotel_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticsotel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// script answers the n-th request with statuses[n] (the last repeats) and
// records what it was sent.
type script struct {
	mu       sync.Mutex
	statuses []int
	n        int
	bodies   []string
}

func (s *script) RoundTrip(r *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	st := s.statuses[min(s.n, len(s.statuses)-1)]
	s.n++
	s.bodies = append(s.bodies, string(body))
	s.mu.Unlock()
	return &http.Response{StatusCode: st, Body: io.NopCloser(strings.NewReader("{}")), Header: http.Header{}, Request: r}, nil
}

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != analyticsotel.ScopeName || sm.Scope.Version != analytics.Version {
			t.Errorf("scope %+v", sm.Scope)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sum returns the value of the int64 sum name for the data point whose
// attributes include attrs.
func sum(t *testing.T, ms map[string]metricdata.Metrics, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T", name, m.Data)
	}
	var total int64
	for _, dp := range s.DataPoints {
		if has(dp.Attributes, attrs) {
			total += dp.Value
		}
	}
	return total
}

func has(set attribute.Set, attrs []attribute.KeyValue) bool {
	for _, kv := range attrs {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func TestMetricsReadBack(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	m, err := analyticsotel.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	api := &script{statuses: []int{503, 200}} // one retry, then delivered
	c, err := analytics.New("secret-write-key", m.Option(),
		analytics.WithEndpoint("http://analytics.invalid"),
		analytics.WithHTTPClient(&http.Client{Transport: api}),
		analytics.WithFlushAt(3), analytics.WithConsumers(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Observe(c); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Unregister() }()
	if err := m.Observe(c); err == nil {
		t.Error("a second Observe succeeded")
	}

	for i := 0; i < 3; i++ {
		if err := c.Track(analytics.Track{UserID: "u", Event: "E"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Track(analytics.Track{UserID: "u"}); !errors.Is(err, analytics.ErrInvalidMessage) {
		t.Fatalf("invalid event: %v", err)
	}
	big := analytics.Properties{"blob": strings.Repeat("x", analytics.MaxEventBytes)}
	if err := c.Track(analytics.Track{UserID: "u", Event: "E", Properties: big}); !errors.Is(err, analytics.ErrEventTooLarge) {
		t.Fatalf("large event: %v", err)
	}
	before := collect(t, reader)
	if got := sum(t, before, "analytics.events.accepted"); got != 3 {
		t.Errorf("accepted before Close = %d, want 3", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Track(analytics.Track{UserID: "u", Event: "E"}); !errors.Is(err, analytics.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}

	ms := collect(t, reader)
	reason := func(r string) attribute.KeyValue { return attribute.String("analytics.rejection.reason", r) }
	for _, tc := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  int64
	}{
		{"analytics.events.accepted", nil, 3},
		{"analytics.events.delivered", nil, 3},
		{"analytics.events.failed", nil, 0},
		{"analytics.events.handed_back", nil, 0},
		{"analytics.events.pending", nil, 0},
		{"analytics.events.rejected", []attribute.KeyValue{reason("invalid")}, 1},
		{"analytics.events.rejected", []attribute.KeyValue{reason("too_large")}, 1},
		{"analytics.events.rejected", []attribute.KeyValue{reason("closed")}, 1},
		{"analytics.events.rejected", []attribute.KeyValue{reason("queue_full")}, 0},
		{"analytics.events.rejected", []attribute.KeyValue{reason("disk")}, 0},
		{"analytics.batches.delivered", nil, 1},
		{"analytics.requests", nil, 2},
		{"analytics.retries", nil, 1},
		{"analytics.rate_limited", nil, 0},
	} {
		if got := sum(t, ms, tc.name, tc.attrs...); got != tc.want {
			t.Errorf("%s%v = %d, want %d", tc.name, tc.attrs, got, tc.want)
		}
	}
	// Every reason of Stats has its point, the durable mode's too.
	reasons := map[string]bool{}
	for _, dp := range ms["analytics.events.rejected"].Data.(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value("analytics.rejection.reason")
		reasons[v.AsString()] = true
	}
	if want := map[string]bool{"invalid": true, "too_large": true, "queue_full": true, "closed": true, "disk": true}; !maps.Equal(reasons, want) {
		t.Errorf("rejection reasons %v, want %v", reasons, want)
	}
	if u := ms["analytics.events.delivered"].Unit; u != "{event}" {
		t.Errorf("unit %q", u)
	}

	dur, ok := ms["analytics.request.duration"].Data.(metricdata.Histogram[float64])
	if !ok || ms["analytics.request.duration"].Unit != "s" {
		t.Fatalf("analytics.request.duration: %+v", ms["analytics.request.duration"])
	}
	byStatus := map[int64]metricdata.HistogramDataPoint[float64]{}
	for _, dp := range dur.DataPoints {
		st, _ := dp.Attributes.Value("http.response.status_code")
		byStatus[st.AsInt64()] = dp
	}
	failedAttempt, okAttempt := byStatus[503], byStatus[200]
	if failedAttempt.Count != 1 || okAttempt.Count != 1 || len(byStatus) != 2 {
		t.Fatalf("duration points %+v", dur.DataPoints)
	}
	if et, _ := failedAttempt.Attributes.Value("error.type"); et.AsString() != "503" {
		t.Errorf("error.type of the 503 attempt = %q", et.AsString())
	}
	if r, _ := okAttempt.Attributes.Value("analytics.retry"); !r.AsBool() {
		t.Error("the 200 attempt is not marked as a retry")
	}
	if _, ok := okAttempt.Attributes.Value("error.type"); ok {
		t.Error("the 200 attempt has an error.type")
	}

	size := ms["analytics.batch.size"].Data.(metricdata.Histogram[int64])
	var n uint64
	var total int64
	for _, dp := range size.DataPoints {
		n += dp.Count
		total += dp.Sum
	}
	if n != 2 || total != 6 {
		t.Errorf("batch.size: %d attempts, %d events in all; want 2 attempts of 3", n, total)
	}
	body := ms["analytics.request.body.size"].Data.(metricdata.Histogram[int64])
	var bytes int64
	for _, dp := range body.DataPoints {
		bytes += dp.Sum
	}
	api.mu.Lock()
	wantBytes := int64(len(api.bodies[0]) + len(api.bodies[1]))
	api.mu.Unlock()
	if bytes != wantBytes {
		t.Errorf("request.body.size sum %d, want %d (what the server received)", bytes, wantBytes)
	}
	for _, dp := range dur.DataPoints {
		for _, kv := range dp.Attributes.ToSlice() {
			if strings.Contains(kv.Value.String(), "secret-write-key") {
				t.Errorf("attribute %s carries the write key", kv.Key)
			}
		}
	}
}

func TestNewRejectsNil(t *testing.T) {
	if _, err := analyticsotel.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	m, err := analyticsotel.New(sdkmetric.NewMeterProvider())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Observe(nil); err == nil {
		t.Error("Observe(nil) succeeded")
	}
	if err := m.Unregister(); err != nil {
		t.Errorf("Unregister without Observe: %v", err)
	}
}
