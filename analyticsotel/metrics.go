// Package analyticsotel reports the metrics of an analytics.Client through
// an OpenTelemetry metric.MeterProvider. It is a separate Go module, so
// programs that do not import it do not download or link OpenTelemetry.
//
// Use it in three steps: New creates the instruments, Metrics.Option
// passes the per-attempt hook to analytics.New, and Metrics.Observe starts
// reporting the client's counters:
//
//	m, err := analyticsotel.New(otel.GetMeterProvider())
//	…
//	client, err := analytics.New(writeKey, m.Option())
//	…
//	err = m.Observe(client)
//
// The instruments, named after OpenTelemetry's semantic-convention style
// (dot-separated namespaces, units in UCUM, counts in curly braces):
//
//	analytics.events.accepted      counter         {event}   enqueue calls that returned nil
//	analytics.events.rejected      counter         {event}   enqueue calls that returned an error, by analytics.rejection.reason
//	                                                          (invalid, too_large, queue_full, closed, disk)
//	analytics.events.delivered     counter         {event}   events answered 2xx
//	analytics.events.failed        counter         {event}   events reported to OnError as failed
//	analytics.events.handed_back   counter         {event}   events handed back at shutdown
//	analytics.events.pending       updowncounter   {event}   accepted events without a disposition yet (queue depth)
//	analytics.batches.delivered    counter         {batch}   batches answered 2xx
//	analytics.requests             counter         {request} HTTP attempts
//	analytics.retries              counter         {request} counted retries sent
//	analytics.rate_limited         counter         {response} responses with a usable Retry-After
//	analytics.rate_limit.waits     counter         {wait}    waits of a consumer at the closed rate-limit gate
//	analytics.isolations           counter         {batch}   batches answered 400 and halved to isolate the events at fault
//	analytics.limit.body           gauge           By        body limit learned from a 413 (0 until learned)
//	analytics.limit.events         gauge           {event}   events-per-request limit learned from 429s (0 until learned)
//	analytics.disk.replayed        counter         {event}   events an earlier client left on disk, sent first (durable mode)
//	analytics.disk.spilled         counter         {event}   events accepted while memory was full, kept on disk only
//	analytics.disk.events          updowncounter   {event}   events on disk only now, waiting to be read back (the backlog)
//	analytics.disk.usage           updowncounter   By        size of the disk buffer's files now
//	analytics.disk.torn            counter         {record}  torn records skipped when the disk buffer was opened
//	analytics.disk.corrupt         counter         {region}  corrupt regions skipped, and replayed records that were not events
//	analytics.disk.missing         counter         {segment} segments found lost when the disk buffer was opened
//	analytics.disk.skipped         counter         {file}    entries named like buffer files that are not regular files
//	analytics.disk.lost            counter         {event}   events whose records another process cut, removed or replaced
//	analytics.request.duration     histogram       s         duration of each HTTP attempt
//	analytics.batch.size           histogram       {event}   events per HTTP attempt
//	analytics.request.body.size    histogram       By        request body size per attempt, as sent
//
// Every field of analytics.Stats has an instrument. The counters, levels
// and limits are read from Client.Stats when the MeterProvider collects
// (the disk ones stay 0 without analytics.WithDiskBuffer);
// the histograms are recorded by the hook after each attempt, with the
// attributes http.response.status_code (when a response arrived),
// error.type (the status code for a non-2xx response; "timeout",
// "canceled" or "_OTHER" when none arrived) and analytics.retry (whether
// the attempt was a retry). No attribute carries the write key or event
// data.
package analyticsotel

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/relaykit/analytics-go"
)

// ScopeName is the instrumentation scope name of the Meter used.
const ScopeName = "github.com/relaykit/analytics-go/analyticsotel"

// Metrics holds the instruments for one analytics.Client. Create it with
// New. Its methods are safe for concurrent use.
type Metrics struct {
	meter     metric.Meter
	duration  metric.Float64Histogram
	batchSize metric.Int64Histogram
	bodySize  metric.Int64Histogram

	// observables are the instruments of statInstruments, by name.
	observables map[string]metric.Int64Observable

	mu       sync.Mutex
	reg      metric.Registration
	observed bool
}

// kind is the kind of an observable instrument.
type kind int

const (
	counter   kind = iota // cumulative, only grows
	upDown                // a level that goes up and down (a sum)
	gaugeKind             // a level that is not a sum (a limit)
)

// statInstrument reports one analytics.Stats field.
type statInstrument struct {
	field            string // the analytics.Stats field, for the test that every field has one
	name, unit, desc string
	kind             kind
	reason           string // the analytics.rejection.reason attribute, or ""
	get              func(analytics.Stats) int64
}

// statInstruments is every analytics.Stats field and the instrument that
// reports it; TestEveryStatsFieldHasAnInstrument fails when a field has
// none. Entries with the same name are one instrument, told apart by
// reason.
var statInstruments = []statInstrument{
	{"Accepted", "analytics.events.accepted", "{event}", "Events accepted by an enqueue call.", counter, "", func(s analytics.Stats) int64 { return s.Accepted }},
	{"RejectedInvalid", "analytics.events.rejected", "{event}", rejectedDesc, counter, "invalid", func(s analytics.Stats) int64 { return s.RejectedInvalid }},
	{"RejectedTooLarge", "analytics.events.rejected", "{event}", rejectedDesc, counter, "too_large", func(s analytics.Stats) int64 { return s.RejectedTooLarge }},
	{"RejectedQueueFull", "analytics.events.rejected", "{event}", rejectedDesc, counter, "queue_full", func(s analytics.Stats) int64 { return s.RejectedQueueFull }},
	{"RejectedClosed", "analytics.events.rejected", "{event}", rejectedDesc, counter, "closed", func(s analytics.Stats) int64 { return s.RejectedClosed }},
	{"RejectedDisk", "analytics.events.rejected", "{event}", rejectedDesc, counter, "disk", func(s analytics.Stats) int64 { return s.RejectedDisk }},
	{"Delivered", "analytics.events.delivered", "{event}", "Events answered 2xx.", counter, "", func(s analytics.Stats) int64 { return s.Delivered }},
	{"Failed", "analytics.events.failed", "{event}", "Events reported to OnError as failed.", counter, "", func(s analytics.Stats) int64 { return s.Failed }},
	{"HandedBack", "analytics.events.handed_back", "{event}", "Events handed back at shutdown.", counter, "", func(s analytics.Stats) int64 { return s.HandedBack }},
	{"Pending", "analytics.events.pending", "{event}", "Accepted events without a disposition yet: queued, in a batch, in flight or waiting for a retry.", upDown, "", func(s analytics.Stats) int64 { return s.Pending }},
	{"Batches", "analytics.batches.delivered", "{batch}", "Batches answered 2xx.", counter, "", func(s analytics.Stats) int64 { return s.Batches }},
	{"Requests", "analytics.requests", "{request}", "HTTP attempts made.", counter, "", func(s analytics.Stats) int64 { return s.Requests }},
	{"Retries", "analytics.retries", "{request}", "Counted retries sent.", counter, "", func(s analytics.Stats) int64 { return s.Retries }},
	{"RateLimited", "analytics.rate_limited", "{response}", "Responses with a usable Retry-After.", counter, "", func(s analytics.Stats) int64 { return s.RateLimited }},
	{"RateLimitWaits", "analytics.rate_limit.waits", "{wait}", "Waits of a consumer at the closed rate-limit gate.", counter, "", func(s analytics.Stats) int64 { return s.RateLimitWaits }},
	{"Isolations", "analytics.isolations", "{batch}", "Batches answered 400 and sent again as two halves to isolate the events at fault.", counter, "", func(s analytics.Stats) int64 { return s.Isolations }},
	{"BodyLimit", "analytics.limit.body", "By", "Request body limit learned from a 413 (uncompressed); 0 until one is learned.", gaugeKind, "", func(s analytics.Stats) int64 { return s.BodyLimit }},
	{"EventLimit", "analytics.limit.events", "{event}", "Events per request learned from repeated 429s without Retry-After; 0 until one is learned.", gaugeKind, "", func(s analytics.Stats) int64 { return s.EventLimit }},
	{"Replayed", "analytics.disk.replayed", "{event}", "Events an earlier client left in the disk buffer, sent first (durable mode).", counter, "", func(s analytics.Stats) int64 { return s.Replayed }},
	{"Spilled", "analytics.disk.spilled", "{event}", "Events accepted while memory was full, written to the disk buffer only and read back later (durable mode).", counter, "", func(s analytics.Stats) int64 { return s.Spilled }},
	{"OnDisk", "analytics.disk.events", "{event}", "Events on disk only now, waiting to be read back into memory (durable mode).", upDown, "", func(s analytics.Stats) int64 { return s.OnDisk }},
	{"DiskBytes", "analytics.disk.usage", "By", "Size of the disk buffer's files now (durable mode).", upDown, "", func(s analytics.Stats) int64 { return s.DiskBytes }},
	{"DiskTorn", "analytics.disk.torn", "{record}", "Torn records (a write cut short by a crash) skipped when the disk buffer was opened.", counter, "", func(s analytics.Stats) int64 { return s.DiskTorn }},
	{"DiskCorrupt", "analytics.disk.corrupt", "{region}", "Corrupt regions of the disk buffer skipped, and replayed records that were not events.", counter, "", func(s analytics.Stats) int64 { return s.DiskCorrupt }},
	{"DiskMissing", "analytics.disk.missing", "{segment}", "Segments of the disk buffer found lost when it was opened.", counter, "", func(s analytics.Stats) int64 { return s.DiskMissing }},
	{"DiskLost", "analytics.disk.lost", "{event}", "Events whose records were found gone from the disk buffer (cut, removed or replaced by another process) before they could be read back; failed without a callback.", counter, "", func(s analytics.Stats) int64 { return s.DiskLost }},
	{"DiskSkipped", "analytics.disk.skipped", "{file}", "Directory entries named like disk buffer files that are not regular files, ignored when it was opened.", counter, "", func(s analytics.Stats) int64 { return s.DiskSkipped }},
}

const rejectedDesc = "Events rejected by an enqueue call, by analytics.rejection.reason."

// reasons holds the attribute option of each analytics.rejection.reason,
// made once.
var reasons = func() map[string]metric.ObserveOption {
	out := map[string]metric.ObserveOption{}
	for _, si := range statInstruments {
		if si.reason != "" {
			out[si.reason] = metric.WithAttributeSet(attribute.NewSet(attribute.String("analytics.rejection.reason", si.reason)))
		}
	}
	return out
}()

// New creates the instruments with a Meter of mp named ScopeName. It
// returns the first error of the MeterProvider; a nil mp is an error.
func New(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		return nil, errors.New("analyticsotel: nil MeterProvider")
	}
	m := &Metrics{meter: mp.Meter(ScopeName, metric.WithInstrumentationVersion(analytics.Version))}
	var errs []error
	m.observables = map[string]metric.Int64Observable{}
	for _, si := range statInstruments {
		if m.observables[si.name] != nil {
			continue
		}
		var (
			inst metric.Int64Observable
			err  error
		)
		switch si.kind {
		case counter:
			inst, err = m.meter.Int64ObservableCounter(si.name, metric.WithUnit(si.unit), metric.WithDescription(si.desc))
		case upDown:
			inst, err = m.meter.Int64ObservableUpDownCounter(si.name, metric.WithUnit(si.unit), metric.WithDescription(si.desc))
		default:
			inst, err = m.meter.Int64ObservableGauge(si.name, metric.WithUnit(si.unit), metric.WithDescription(si.desc))
		}
		errs = append(errs, err)
		m.observables[si.name] = inst
	}
	var err error
	m.duration, err = m.meter.Float64Histogram("analytics.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of an HTTP attempt to upload a batch."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10))
	errs = append(errs, err)
	m.batchSize, err = m.meter.Int64Histogram("analytics.batch.size", metric.WithUnit("{event}"),
		metric.WithDescription("Events in the batch of an HTTP attempt."),
		metric.WithExplicitBucketBoundaries(1, 5, 10, 25, 50, 100, 250, 500, 1000))
	errs = append(errs, err)
	m.bodySize, err = m.meter.Int64Histogram("analytics.request.body.size", metric.WithUnit("By"),
		metric.WithDescription("Size of the request body of an HTTP attempt, as sent (compressed with gzip)."),
		metric.WithExplicitBucketBoundaries(1<<10, 4<<10, 16<<10, 64<<10, 128<<10, 256<<10, 512<<10))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// Option returns the analytics.WithAttemptHook option that records the
// histograms. Pass it to analytics.New of the client given to Observe.
func (m *Metrics) Option() analytics.Option {
	return analytics.WithAttemptHook(m.record)
}

// Observe reports c's counters (Client.Stats) at every collection until
// Unregister. A Metrics observes one client: a second call returns an
// error, as does a nil c.
func (m *Metrics) Observe(c *analytics.Client) error {
	if c == nil {
		return errors.New("analyticsotel: nil Client")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.observed {
		return errors.New("analyticsotel: Observe called twice: a Metrics observes one client")
	}
	insts := make([]metric.Observable, 0, len(m.observables))
	for _, inst := range m.observables {
		insts = append(insts, inst)
	}
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := c.Stats()
		for _, si := range statInstruments {
			if si.reason != "" {
				o.ObserveInt64(m.observables[si.name], si.get(s), reasons[si.reason])
			} else {
				o.ObserveInt64(m.observables[si.name], si.get(s))
			}
		}
		return nil
	}, insts...)
	if err != nil {
		return err
	}
	m.reg, m.observed = reg, true
	return nil
}

// Unregister stops reporting the counters of the observed client (the
// histograms keep recording while the client runs). It returns nil when
// nothing is observed.
func (m *Metrics) Unregister() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reg == nil {
		return nil
	}
	err := m.reg.Unregister()
	m.reg = nil
	return err
}

// record is the attempt hook.
func (m *Metrics) record(a analytics.AttemptInfo) {
	attrs := make([]attribute.KeyValue, 0, 3)
	if a.Status != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", a.Status))
		if a.Status < 200 || a.Status > 299 {
			attrs = append(attrs, attribute.String("error.type", strconv.Itoa(a.Status)))
		}
	} else {
		attrs = append(attrs, attribute.String("error.type", errorType(a.Err)))
	}
	attrs = append(attrs, attribute.Bool("analytics.retry", a.Retry > 0))
	set := metric.WithAttributeSet(attribute.NewSet(attrs...))
	ctx := context.Background()
	m.duration.Record(ctx, a.Duration.Seconds(), set)
	m.batchSize.Record(ctx, int64(a.Events), set)
	m.bodySize.Record(ctx, int64(a.Bytes), set)
}

func errorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "_OTHER"
}
