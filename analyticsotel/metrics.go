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
//	analytics.request.duration     histogram       s         duration of each HTTP attempt
//	analytics.batch.size           histogram       {event}   events per HTTP attempt
//	analytics.request.body.size    histogram       By        request body size per attempt, as sent
//
// The counters are read from Client.Stats when the MeterProvider collects;
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

	accepted, rejected, delivered, failed, handedBack metric.Int64ObservableCounter
	batches, requests, retries, rateLimited, waits    metric.Int64ObservableCounter
	pending                                           metric.Int64ObservableUpDownCounter

	mu       sync.Mutex
	reg      metric.Registration
	observed bool
}

// Attribute values of analytics.rejection.reason.
var (
	reasonInvalid   = metric.WithAttributeSet(attribute.NewSet(attribute.String("analytics.rejection.reason", "invalid")))
	reasonTooLarge  = metric.WithAttributeSet(attribute.NewSet(attribute.String("analytics.rejection.reason", "too_large")))
	reasonQueueFull = metric.WithAttributeSet(attribute.NewSet(attribute.String("analytics.rejection.reason", "queue_full")))
	reasonClosed    = metric.WithAttributeSet(attribute.NewSet(attribute.String("analytics.rejection.reason", "closed")))
	reasonDisk      = metric.WithAttributeSet(attribute.NewSet(attribute.String("analytics.rejection.reason", "disk")))
)

// New creates the instruments with a Meter of mp named ScopeName. It
// returns the first error of the MeterProvider; a nil mp is an error.
func New(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		return nil, errors.New("analyticsotel: nil MeterProvider")
	}
	m := &Metrics{meter: mp.Meter(ScopeName, metric.WithInstrumentationVersion(analytics.Version))}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.accepted = counter("analytics.events.accepted", "{event}", "Events accepted by an enqueue call.")
	m.rejected = counter("analytics.events.rejected", "{event}", "Events rejected by an enqueue call, by analytics.rejection.reason.")
	m.delivered = counter("analytics.events.delivered", "{event}", "Events answered 2xx.")
	m.failed = counter("analytics.events.failed", "{event}", "Events reported to OnError as failed.")
	m.handedBack = counter("analytics.events.handed_back", "{event}", "Events handed back at shutdown.")
	m.batches = counter("analytics.batches.delivered", "{batch}", "Batches answered 2xx.")
	m.requests = counter("analytics.requests", "{request}", "HTTP attempts made.")
	m.retries = counter("analytics.retries", "{request}", "Counted retries sent.")
	m.rateLimited = counter("analytics.rate_limited", "{response}", "Responses with a usable Retry-After.")
	m.waits = counter("analytics.rate_limit.waits", "{wait}", "Waits of a consumer at the closed rate-limit gate.")
	var err error
	m.pending, err = m.meter.Int64ObservableUpDownCounter("analytics.events.pending", metric.WithUnit("{event}"),
		metric.WithDescription("Accepted events without a disposition yet: queued, in a batch, in flight or waiting for a retry."))
	errs = append(errs, err)
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
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := c.Stats()
		o.ObserveInt64(m.accepted, s.Accepted)
		o.ObserveInt64(m.rejected, s.RejectedInvalid, reasonInvalid)
		o.ObserveInt64(m.rejected, s.RejectedTooLarge, reasonTooLarge)
		o.ObserveInt64(m.rejected, s.RejectedQueueFull, reasonQueueFull)
		o.ObserveInt64(m.rejected, s.RejectedClosed, reasonClosed)
		o.ObserveInt64(m.rejected, s.RejectedDisk, reasonDisk) // durable mode (WithDiskBuffer)
		o.ObserveInt64(m.delivered, s.Delivered)
		o.ObserveInt64(m.failed, s.Failed)
		o.ObserveInt64(m.handedBack, s.HandedBack)
		o.ObserveInt64(m.pending, s.Pending)
		o.ObserveInt64(m.batches, s.Batches)
		o.ObserveInt64(m.requests, s.Requests)
		o.ObserveInt64(m.retries, s.Retries)
		o.ObserveInt64(m.rateLimited, s.RateLimited)
		o.ObserveInt64(m.waits, s.RateLimitWaits)
		return nil
	}, m.accepted, m.rejected, m.delivered, m.failed, m.handedBack, m.pending,
		m.batches, m.requests, m.retries, m.rateLimited, m.waits)
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
