// Package leaseotel turns a lease store's events into OpenTelemetry
// metrics, and optionally spans, through the OpenTelemetry API only: the
// program picks the SDK and the exporter (Prometheus, OTLP, …).
//
//	obs, err := leaseotel.New(otel.GetMeterProvider())
//	store, err := lease.Open(ctx, url, lease.WithObserver(obs))
//
// The instruments, each with the attribute lease.store.kind (the driver's
// name, or "local"):
//
//	lease.held              up-down counter {lease}        grants held now
//	lease.acquisitions      counter {acquisition}          lease.takeover (bool)
//	lease.renewals          counter {renewal}              keys renewed one by one (a driver without sessions)
//	lease.session.renewals  counter {renewal}              session renewals: one write renews every key of the session
//	lease.renewal.failures  counter {failure}              error.type (a key's renewal, or a session's)
//	lease.sessions          counter {session}              lease.session.event (started, ended, killed)
//	lease.losses            counter {loss}                 lease.loss.cause (taken, expired, closed, deadline)
//	lease.releases          counter {release}              lease.release.all (bool)
//	lease.wait.duration     histogram s                    lease.wait.outcome (acquired, gave_up)
//	lease.storage.duration  histogram s                    lease.storage.operation, error.type on failure
//
// Keys and owners are never metric attributes: their number has no bound.
// With WithTracerProvider, each storage call and each wait of a Hold is
// also a span (lease.storage, lease.wait), which names its key. Events
// carry no context, so these spans start traces of their own.
package leaseotel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasekit/lease"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/leasekit/lease/leaseotel"

// Attribute keys of the instruments and spans.
const (
	AttrStoreKind    = attribute.Key("lease.store.kind")
	AttrTakeover     = attribute.Key("lease.takeover")
	AttrLossCause    = attribute.Key("lease.loss.cause")
	AttrReleaseAll   = attribute.Key("lease.release.all")
	AttrWaitOutcome  = attribute.Key("lease.wait.outcome")
	AttrStorageOp    = attribute.Key("lease.storage.operation")
	AttrErrorType    = attribute.Key("error.type")
	AttrKey          = attribute.Key("lease.key")   // spans only
	AttrOwner        = attribute.Key("lease.owner") // spans only
	AttrEpoch        = attribute.Key("lease.epoch") // spans only
	AttrBatchSize    = attribute.Key("lease.batch.size")
	AttrSessionEvent = attribute.Key("lease.session.event")
)

// Option configures New.
type Option func(*config)

type config struct {
	tp trace.TracerProvider
}

// WithTracerProvider makes the observer record storage calls and waits as
// spans from tp. Without it, the observer records metrics only.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// Bucket boundaries, in seconds: storage calls take from a fraction of a
// millisecond (a local write) to seconds (a failing backend); waits for
// a held key last up to a TTL or more.
var (
	storageBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	waitBuckets    = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
)

// New returns an Observer for lease.WithObserver that records into
// meters from mp. It fails only if mp refuses an instrument.
func New(mp metric.MeterProvider, opts ...Option) (lease.Observer, error) {
	if mp == nil {
		return nil, errors.New("leaseotel: New given a nil MeterProvider")
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	m := mp.Meter(ScopeName)
	o := &observer{}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	o.held, err = m.Int64UpDownCounter("lease.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Grants held now by this process's stores."))
	add(err)
	o.acquisitions, err = m.Int64Counter("lease.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("New grants; lease.takeover marks those whose previous holder did not release."))
	add(err)
	o.renewals, err = m.Int64Counter("lease.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Grants renewed."))
	add(err)
	o.renewalFailures, err = m.Int64Counter("lease.renewal.failures", metric.WithUnit("{failure}"),
		metric.WithDescription("Renewals that failed while the lease still stood (storage failing)."))
	add(err)
	o.losses, err = m.Int64Counter("lease.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Grants that ended without a release by their holder, by lease.loss.cause."))
	add(err)
	o.releases, err = m.Int64Counter("lease.releases", metric.WithUnit("{release}"),
		metric.WithDescription("Grants released."))
	add(err)
	o.sessionRenewals, err = m.Int64Counter("lease.session.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Session renewals: each one write that renews every key attached to the session."))
	add(err)
	o.sessions, err = m.Int64Counter("lease.sessions", metric.WithUnit("{session}"),
		metric.WithDescription("Sessions started, ended (lapsed, ended by another store, or ended clean), and killed (another store's, ended after it expired), by lease.session.event."))
	add(err)
	o.waitDuration, err = m.Float64Histogram("lease.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long Hold waited for a held key."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	add(err)
	o.storageDuration, err = m.Float64Histogram("lease.storage.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of storage calls, by lease.storage.operation."),
		metric.WithExplicitBucketBoundaries(storageBuckets...))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.tp != nil {
		o.tracer = cfg.tp.Tracer(ScopeName)
	}
	return o, nil
}

type observer struct {
	held            metric.Int64UpDownCounter
	acquisitions    metric.Int64Counter
	renewals        metric.Int64Counter
	renewalFailures metric.Int64Counter
	losses          metric.Int64Counter
	releases        metric.Int64Counter
	sessionRenewals metric.Int64Counter
	sessions        metric.Int64Counter
	waitDuration    metric.Float64Histogram
	storageDuration metric.Float64Histogram
	tracer          trace.Tracer // nil: no spans

	last  atomic.Pointer[kindOptions] // the kind seen last: most programs have one
	kinds sync.Map                    // store kind → *kindOptions
}

// kindOptions are the attribute sets of one store kind, made once and
// kept as the option slices the instruments take, so that recording an
// event allocates nothing.
type kindOptions struct {
	name     string
	kind     attribute.KeyValue
	base     []metric.AddOption
	takeover [2][]metric.AddOption // by lease.takeover
	release  [2][]metric.AddOption // by lease.release.all
	loss     map[lease.LossCause][]metric.AddOption
	wait     [2][]metric.RecordOption // acquired, gave_up
	ops      map[lease.StorageOp][]metric.RecordOption
}

var (
	lossCauses = []lease.LossCause{lease.LossTaken, lease.LossExpired, lease.LossClosed, lease.LossDeadline}
	storageOps = []lease.StorageOp{lease.OpGet, lease.OpGetMany, lease.OpPut, lease.OpPutMany, lease.OpList,
		lease.OpLock, lease.OpUnlock, lease.OpRead, lease.OpWrite}
)

func newKindOptions(kind string) *kindOptions {
	kv := AttrStoreKind.String(kind)
	set := func(extra ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{kv}, extra...)...))
	}
	add := func(extra ...attribute.KeyValue) []metric.AddOption { return []metric.AddOption{set(extra...)} }
	rec := func(extra ...attribute.KeyValue) []metric.RecordOption { return []metric.RecordOption{set(extra...)} }
	k := &kindOptions{
		name:     kind,
		kind:     kv,
		base:     add(),
		takeover: [2][]metric.AddOption{add(AttrTakeover.Bool(false)), add(AttrTakeover.Bool(true))},
		release:  [2][]metric.AddOption{add(AttrReleaseAll.Bool(false)), add(AttrReleaseAll.Bool(true))},
		wait:     [2][]metric.RecordOption{rec(AttrWaitOutcome.String("acquired")), rec(AttrWaitOutcome.String("gave_up"))},
		loss:     make(map[lease.LossCause][]metric.AddOption),
		ops:      make(map[lease.StorageOp][]metric.RecordOption),
	}
	for _, c := range lossCauses {
		k.loss[c] = add(AttrLossCause.String(c.String()))
	}
	for _, op := range storageOps {
		k.ops[op] = rec(AttrStorageOp.String(string(op)))
	}
	return k
}

func (o *observer) options(kind string) *kindOptions {
	if k := o.last.Load(); k != nil && k.name == kind {
		return k
	}
	v, ok := o.kinds.Load(kind)
	if !ok {
		v, _ = o.kinds.LoadOrStore(kind, newKindOptions(kind))
	}
	k := v.(*kindOptions)
	o.last.Store(k)
	return k
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Observe records e.
func (o *observer) Observe(e lease.Event) {
	ctx := context.Background()
	k := o.options(e.Store)
	switch e.Kind {
	case lease.EventAcquired:
		o.held.Add(ctx, 1, k.base...)
		o.acquisitions.Add(ctx, 1, k.takeover[b2i(e.PreviousUnclean)]...)
	case lease.EventRenewed:
		o.renewals.Add(ctx, 1, k.base...)
	case lease.EventRenewFailed:
		o.renewalFailures.Add(ctx, 1, metric.WithAttributes(k.kind, AttrErrorType.String(errorType(e.Err))))
	case lease.EventLost:
		o.held.Add(ctx, -1, k.base...)
		o.losses.Add(ctx, 1, k.lossOptions(e.Cause)...)
	case lease.EventReleased:
		o.held.Add(ctx, -1, k.base...)
		o.releases.Add(ctx, 1, k.release[b2i(e.All)]...)
	case lease.EventWaitDone, lease.EventWaitGaveUp:
		o.waitDuration.Record(ctx, e.Duration.Seconds(), k.wait[b2i(e.Kind == lease.EventWaitGaveUp)]...)
		o.span("lease.wait", e)
	case lease.EventStorage:
		o.storageDuration.Record(ctx, e.Duration.Seconds(), k.storageOptions(e)...)
		o.span("lease.storage", e)
	case lease.EventSessionRenewed:
		if e.Err != nil {
			o.renewalFailures.Add(ctx, 1, metric.WithAttributes(k.kind, AttrErrorType.String(errorType(e.Err))))
			return
		}
		o.sessionRenewals.Add(ctx, 1, k.base...)
	case lease.EventSessionStarted, lease.EventSessionEnded, lease.EventSessionKilled:
		o.sessions.Add(ctx, 1, metric.WithAttributes(k.kind, AttrSessionEvent.String(sessionEvent(e.Kind))))
	}
}

// sessionEvent is the lease.session.event attribute of a session event.
func sessionEvent(kind lease.EventKind) string {
	switch kind {
	case lease.EventSessionStarted:
		return "started"
	case lease.EventSessionEnded:
		return "ended"
	}
	return "killed"
}

func (k *kindOptions) lossOptions(c lease.LossCause) []metric.AddOption {
	if opts, ok := k.loss[c]; ok {
		return opts
	}
	return []metric.AddOption{metric.WithAttributes(k.kind, AttrLossCause.String(c.String()))}
}

// storageOptions are the attributes of a storage call: made anew only for
// a failed one, which also names its error.type.
func (k *kindOptions) storageOptions(e lease.Event) []metric.RecordOption {
	class := errorType(e.Err)
	if opts, ok := k.ops[e.Op]; ok && class == "" {
		return opts
	}
	attrs := []attribute.KeyValue{k.kind, AttrStorageOp.String(string(e.Op))}
	if class != "" {
		attrs = append(attrs, AttrErrorType.String(class))
	}
	return []metric.RecordOption{metric.WithAttributes(attrs...)}
}

// span records e, which ended now after e.Duration, as a span of its own.
func (o *observer) span(name string, e lease.Event) {
	if o.tracer == nil {
		return
	}
	end := time.Now()
	attrs := []attribute.KeyValue{
		AttrStoreKind.String(e.Store),
		AttrOwner.String(e.Owner),
	}
	if e.Key != "" {
		attrs = append(attrs, AttrKey.String(e.Key))
	}
	if e.Epoch != 0 {
		attrs = append(attrs, AttrEpoch.Int64(int64(e.Epoch)))
	}
	if e.Kind == lease.EventStorage {
		attrs = append(attrs, AttrStorageOp.String(string(e.Op)), AttrBatchSize.Int(e.Batch))
	}
	_, sp := o.tracer.Start(context.Background(), name,
		trace.WithTimestamp(end.Add(-e.Duration)), trace.WithAttributes(attrs...),
		trace.WithSpanKind(trace.SpanKindInternal))
	if e.Err != nil {
		sp.SetAttributes(AttrErrorType.String(errorType(e.Err)))
		sp.SetStatus(codes.Error, e.Err.Error())
	}
	sp.End(trace.WithTimestamp(end))
}

// errorType is the value of the error.type attribute for err, the error
// of a failed storage call, renewal or wait: "" when err is nil, else a
// few words that a metric can carry (a bounded set, never the message):
// "not_found", "conflict", "held", "corrupt", "closed", "lost",
// "canceled", "timeout", "invalid_key", or "storage" for any other
// failure of the store's storage. The first that err matches wins.
func errorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, lease.ErrNotFound):
		return "not_found"
	case errors.Is(err, lease.ErrConflict):
		return "conflict"
	case errors.Is(err, lease.ErrHeld):
		return "held"
	case errors.Is(err, lease.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, lease.ErrClosed):
		return "closed"
	case errors.Is(err, lease.ErrLost):
		return "lost"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, lease.ErrInvalidKey):
		return "invalid_key"
	}
	return "storage"
}
