package analyticsotel_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticsotel"
	"github.com/relaykit/analytics-go/analyticstest"
)

// value returns the int64 value of the point of name (with the rejection
// reason, if any) in ms, whatever the instrument's kind; ok is false when
// the point was not exported.
func value(ms map[string]metricdata.Metrics, name, reason string) (v int64, ok bool) {
	m, found := ms[name]
	if !found {
		return 0, false
	}
	var points []metricdata.DataPoint[int64]
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		points = d.DataPoints
	case metricdata.Gauge[int64]:
		points = d.DataPoints
	default:
		return 0, false
	}
	for _, dp := range points {
		r, _ := dp.Attributes.Value("analytics.rejection.reason")
		if r.AsString() == reason {
			return dp.Value, true
		}
	}
	return 0, false
}

// checkEveryField compares every field of c's Stats with what the reader
// exports, from a collection between two equal snapshots (a client at
// work may move between them: then it collects again). It returns the
// snapshot.
func checkEveryField(t *testing.T, when string, reader *sdkmetric.ManualReader, c *analytics.Client) analytics.Stats {
	t.Helper()
	var (
		ms map[string]metricdata.Metrics
		st analytics.Stats
	)
	for range 100 {
		st = c.Stats()
		ms = collect(t, reader)
		if c.Stats() == st {
			break
		}
	}
	fields := analyticsotel.StatFields()
	sv := reflect.ValueOf(st)
	for i := range sv.NumField() {
		f := sv.Type().Field(i)
		inst, ok := fields[f.Name]
		if !ok {
			continue // reported at the start of the test
		}
		got, ok := value(ms, inst[0], inst[1])
		if !ok {
			t.Errorf("%s: %s (Stats.%s) was not exported", when, inst[0], f.Name)
			continue
		}
		if want := sv.Field(i).Int(); got != want {
			t.Errorf("%s: %s%s = %d, Stats.%s = %d", when, inst[0], map[bool]string{true: "{" + inst[1] + "}"}[inst[1] != ""], got, f.Name, want)
		}
	}
	return st
}

// Every field of analytics.Stats has an instrument, and it exports the
// field's value: checked by reflection over the fields, against a durable
// client that left events on disk (OnDisk, Spilled, HandedBack) and the one
// that replayed them against a server that refused one batch with a 400
// (Isolations, Failed) and has a body limit (BodyLimit). A field added to
// Stats without an instrument fails this test.
func TestEveryStatsFieldHasAnInstrument(t *testing.T) {
	fields := analyticsotel.StatFields()
	statsType := reflect.TypeFor[analytics.Stats]()
	for i := range statsType.NumField() {
		if name := statsType.Field(i).Name; fields[name][0] == "" {
			t.Errorf("Stats.%s has no OpenTelemetry instrument: add one to statInstruments in analyticsotel/metrics.go (and to the package doc and docs/reference.md)", name)
		}
	}
	for name := range fields {
		if _, ok := statsType.FieldByName(name); !ok {
			t.Errorf("statInstruments names Stats.%s, which does not exist", name)
		}
	}
	doc, err := os.ReadFile("../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	for field, inst := range fields {
		if !strings.Contains(string(doc), "`"+inst[0]+"`") {
			t.Errorf("docs/reference.md does not list %s (Stats.%s)", inst[0], field)
		}
		if !strings.Contains(string(src), "//\t"+inst[0]+" ") {
			t.Errorf("the package doc does not list %s (Stats.%s)", inst[0], field)
		}
	}

	dir := t.TempDir()
	srv := analyticstest.NewServer(t)
	srv.Down()
	observe := func(opts ...analytics.Option) (*analytics.Client, *sdkmetric.ManualReader, func()) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		m, err := analyticsotel.New(mp)
		if err != nil {
			t.Fatal(err)
		}
		c, err := analytics.New("key", append([]analytics.Option{m.Option(), analytics.WithEndpoint(srv.URL()),
			analytics.WithDiskBuffer(dir), analytics.WithQueueCapacity(10)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Observe(c); err != nil {
			t.Fatal(err)
		}
		return c, reader, func() { _ = m.Unregister(); _ = mp.Shutdown(context.Background()) }
	}

	// The first client meets a server that is down; Close leaves its
	// events on disk.
	first, reader, done := observe(analytics.WithConsumers(1), analytics.WithFlushAt(5))
	defer done()
	for i := range 40 {
		if err := first.Track(analytics.Track{MessageID: fmt.Sprint("e", i), UserID: "u", Event: "E"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Track(analytics.Track{UserID: "u"}); err == nil {
		t.Fatal("an invalid event was accepted")
	}
	st := checkEveryField(t, "during the outage", reader, first)
	if st.OnDisk == 0 || st.Spilled == 0 || st.DiskBytes == 0 || st.Pending == 0 || st.RejectedInvalid == 0 {
		t.Fatalf("the first client's scenario did not run as meant: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_ = first.Close(ctx)
	cancel()
	if st := checkEveryField(t, "after the first Close", reader, first); st.HandedBack == 0 || st.RejectedClosed != 0 {
		t.Fatalf("the first client's Close did not run as meant: %+v", st)
	}

	// The second replays them; the server is up, with a body limit, and
	// refuses the first batch.
	if err := srv.Up(); err != nil {
		t.Fatal(err)
	}
	srv.FailNext(1, analyticstest.Fault{Status: 400})
	srv.SetBodyLimit(1500)
	second, reader, done2 := observe(analytics.WithFlushAt(40))
	defer done2()
	flushCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := second.Flush(flushCtx); err != nil {
		t.Fatal(err)
	}
	srv.FailNext(1, analyticstest.Fault{Status: 400}) // an event the server refuses alone fails
	if err := second.Track(analytics.Track{UserID: "u", Event: "refused"}); err != nil {
		t.Fatal(err)
	}
	_ = second.Flush(flushCtx) // reports the failure
	st = checkEveryField(t, "after the replay", reader, second)
	if st.Replayed == 0 || st.Isolations == 0 || st.Failed == 0 || st.BodyLimit == 0 || st.Delivered == 0 || st.DiskBytes == 0 {
		t.Fatalf("the second client's scenario did not run as meant: %+v", st)
	}
	if err := second.Close(flushCtx); err != nil {
		t.Fatal(err)
	}
	if err := second.Track(analytics.Track{UserID: "u", Event: "E"}); err == nil {
		t.Fatal("Track after Close succeeded")
	}
	checkEveryField(t, "after the second Close", reader, second)
}
