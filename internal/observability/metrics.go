package observability

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// Names of the meter and instruments, as Kubewarden's policy-server defines
// them (docs/compatibility.md#metrics). On the Prometheus endpoint they appear
// verbatim: MetricEvaluationsTotal as a counter, MetricEvaluationLatency as a
// histogram with _bucket, _sum and _count series.
const (
	MeterName               = "kubewarden"
	MetricEvaluationsTotal  = "kubewarden_policy_evaluations_total"
	MetricEvaluationLatency = "kubewarden_policy_evaluation_latency_milliseconds"
	// MetricPolicyReloads is Warden's own (Kubewarden never reloads): one
	// count per policy a hot reload adds, updates or removes, with the
	// attributes policy_name (absent when the policies file itself cannot
	// be read), action (add, update, remove, or read) and result (success
	// or failure).
	MetricPolicyReloads = "warden_policy_reload_total"
	// MetricEvaluationTimeouts counts the evaluations ended by the policy's
	// time limit, by policy_name: Kubewarden's metrics count them as any
	// failure, error_code 500.
	MetricEvaluationTimeouts = "warden_policy_evaluation_timeouts_total"
	// MetricRefusedRequests counts the requests the policy server refused
	// before any evaluation to protect itself, by reason (the Refused*
	// constants).
	MetricRefusedRequests = "warden_policy_server_refused_requests_total"
	// MetricReflectorSynced is 1 for a reflector (the copies of one
	// resource that context-aware policies read, RFC 004) that holds a
	// complete list and keeps it current, 0 for one that does not, by
	// group (absent for the core group), version and resource.
	MetricReflectorSynced = "warden_reflector_synced"
	// MetricReflectorLists counts a reflector's lists of its resource, by
	// group, version, resource and result (success or failure): the first,
	// and a list again after each watch that could not be resumed.
	MetricReflectorLists = "warden_reflector_lists_total"
	// MetricReflectorLastList is when a reflector's last complete list
	// ended, in seconds since the Unix epoch, by group, version and
	// resource; absent before the first.
	MetricReflectorLastList = "warden_reflector_last_list_timestamp_seconds"
)

// Reasons of MetricRefusedRequests.
const (
	// RefusedBodyTooLarge: a body over --max-request-body-size (413).
	RefusedBodyTooLarge = "body_too_large"
	// RefusedMemoryBudget: the budget of request bodies held at once is
	// spent (429).
	RefusedMemoryBudget = "memory_budget"
	// RefusedSlowBody: the body did not arrive within
	// --request-read-timeout (408).
	RefusedSlowBody = "slow_body"
)

// DefaultServiceName is the OTLP resource's service.name unless
// [MetricsOptions].ServiceName or OTEL_SERVICE_NAME says otherwise; it is the
// service name of Kubewarden's policy-server traces (its metrics set none).
const DefaultServiceName = "kubewarden-policy-server"

// Values of [Evaluation].PolicyMode and [Evaluation].Origin.
const (
	ModeProtect    = "protect"
	ModeMonitor    = "monitor"
	OriginValidate = "validate"
	OriginAudit    = "audit"
)

// Attribute keys, Kubewarden's (docs/compatibility.md#metrics).
const (
	attrPolicyName          = "policy_name"
	attrPolicyMode          = "policy_mode"
	attrResourceKind        = "resource_kind"
	attrResourceOperation   = "resource_request_operation"
	attrAccepted            = "accepted"
	attrMutated             = "mutated"
	attrRequestOrigin       = "request_origin"
	attrResourceNamespace   = "resource_namespace"
	attrErrorCode           = "error_code"
	attrInitializationError = "initialization_error"
)

// latencyBuckets are the explicit bucket boundaries, in milliseconds, of the
// latency histogram: from sub-millisecond to ten seconds, which covers native
// CEL evaluations as well as slow wasm policies up to well past the default
// policy timeout (2 s).
var latencyBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// Evaluation describes one policy evaluation, as the metrics see it.
type Evaluation struct {
	// PolicyName is the policy id, or "group/member" for a member of a policy group.
	PolicyName string
	// PolicyMode is [ModeProtect] or [ModeMonitor].
	PolicyMode string
	// ResourceKind is the request's requestKind.kind ("" if absent).
	ResourceKind string
	// Operation is the request's operation (CREATE, UPDATE, DELETE, CONNECT).
	Operation string
	// Namespace is the request's namespace; "" (cluster-scoped) omits the attribute.
	Namespace string
	// Origin is [OriginValidate] or [OriginAudit].
	Origin string
	// Accepted and Mutated describe the response.
	Accepted, Mutated bool
	// ErrorCode is the response status code; 0 omits the attribute.
	ErrorCode int32
	// Raw marks a raw (/validate_raw) request: only policy_name, policy_mode,
	// accepted, mutated and error_code are recorded.
	Raw bool
}

// MetricsOptions configures [NewMetrics]. The zero value serves the Prometheus
// endpoint only.
type MetricsOptions struct {
	// OTLP turns on the OTLP/gRPC push, configured by the standard
	// OTEL_EXPORTER_OTLP_* environment variables (endpoint, certificates,
	// headers, ...; default endpoint localhost:4317), as with Kubewarden's
	// --enable-metrics.
	OTLP bool
	// OTLPEndpoint, when not empty, turns on the OTLP push and overrides the
	// endpoint from the environment: host:port (TLS unless
	// OTEL_EXPORTER_OTLP_INSECURE=true) or a URL (http:// means no TLS).
	OTLPEndpoint string
	// OTLPInterval is the push period; 0 means OTEL_METRIC_EXPORT_INTERVAL or
	// the SDK default (60s).
	OTLPInterval time.Duration
	// ServiceName is the OTLP resource's service.name; "" means
	// [DefaultServiceName]. OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override it. The Prometheus endpoint does not show the resource.
	ServiceName string
	// CardinalityLimit caps the number of attribute sets (series) kept per
	// instrument; past it, new sets are aggregated in one series labelled
	// otel_metric_overflow="true". 0 means the SDK default: 2000, or
	// OTEL_GO_X_CARDINALITY_LIMIT; a negative value means no limit.
	CardinalityLimit int
	// Reflectors, when set, is called each time the metrics are collected
	// (a scrape, an OTLP push) for the state of every reflector that runs:
	// the reflector metrics show exactly those. It must be safe for
	// concurrent use.
	Reflectors func() []ReflectorState
	// LabelValueLimit caps the number of distinct values kept for each label
	// whose value comes from the request (resource_namespace,
	// resource_kind); past it, new values are recorded as [LabelValueOther].
	// 0 means [DefaultLabelValueLimit]; a negative value means no limit.
	LabelValueLimit int
}

// ReflectorState is the state of one reflector, as the reflector metrics
// show it (MetricReflectorSynced, MetricReflectorLists,
// MetricReflectorLastList).
type ReflectorState struct {
	// Group ("" for the core group), Version and Resource name the
	// resource the reflector copies.
	Group, Version, Resource string
	// Synced says whether its copy is a complete list kept current.
	Synced bool
	// Lists and ListFailures count the lists that ended and failed.
	Lists, ListFailures uint64
	// LastList is when the last complete list ended; zero before the first.
	LastList time.Time
}

// Metrics records policy evaluations. Its methods are safe for concurrent use.
// A nil *Metrics records nothing, so callers need no check when metrics are
// disabled.
type Metrics struct {
	namespaces  *labelValues
	kinds       *labelValues
	provider    *sdkmetric.MeterProvider
	registry    *prometheus.Registry
	evaluations metric.Int64Counter
	latency     metric.Float64Histogram
	reloads     metric.Int64Counter
	timeouts    metric.Int64Counter
	refused     metric.Int64Counter
}

// NewMetrics builds the meter provider, its Prometheus reader (served by
// [Metrics.Handler]) and, when opts asks for it, its OTLP/gRPC periodic reader.
// Call [Metrics.Shutdown] to flush and stop the OTLP push.
func NewMetrics(ctx context.Context, opts MetricsOptions) (*Metrics, error) {
	registry := prometheus.NewRegistry()
	// The process's memory, CPU and file descriptors and the Go runtime's
	// heap and goroutines, under their usual names (process_*, go_*): what
	// a dashboard shows of a policy server besides its evaluations.
	registry.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	promReader, err := otelprom.New(
		otelprom.WithRegisterer(registry),
		// Names verbatim: Kubewarden's instrument names already end in _total
		// and _milliseconds, the names its dashboard queries.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithoutSuffixes),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("creating prometheus exporter: %w", err)
	}

	res, err := newResource(ctx, opts.ServiceName)
	if err != nil {
		return nil, fmt.Errorf("creating metrics resource: %w", err)
	}

	providerOpts := []sdkmetric.Option{
		sdkmetric.WithResource(res),
		sdkmetric.WithReader(promReader),
	}
	switch limit := opts.CardinalityLimit; {
	case limit > 0:
		providerOpts = append(providerOpts, sdkmetric.WithCardinalityLimit(limit))
	case limit < 0:
		providerOpts = append(providerOpts, sdkmetric.WithCardinalityLimit(0)) // 0: none
	}
	if opts.OTLP || opts.OTLPEndpoint != "" {
		exporter, err := newOTLPExporter(ctx, opts.OTLPEndpoint)
		if err != nil {
			return nil, err
		}
		var readerOpts []sdkmetric.PeriodicReaderOption
		if opts.OTLPInterval > 0 {
			readerOpts = append(readerOpts, sdkmetric.WithInterval(opts.OTLPInterval))
		}
		providerOpts = append(providerOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exporter, readerOpts...)))
	}
	provider := sdkmetric.NewMeterProvider(providerOpts...)

	m, err := newInstruments(provider)
	if err == nil && opts.Reflectors != nil {
		err = observeReflectors(provider.Meter(MeterName), opts.Reflectors)
	}
	if err != nil {
		return nil, errors.Join(err, provider.Shutdown(ctx))
	}
	m.registry = registry
	limit := opts.LabelValueLimit
	if limit == 0 {
		limit = DefaultLabelValueLimit
	}
	m.namespaces, m.kinds = newLabelValues(limit), newLabelValues(limit)
	return m, nil
}

func newOTLPExporter(ctx context.Context, endpoint string) (sdkmetric.Exporter, error) {
	var opts []otlpmetricgrpc.Option
	isURL, err := parseEndpoint(endpoint)
	switch {
	case err != nil:
		return nil, err
	case isURL:
		opts = append(opts, otlpmetricgrpc.WithEndpointURL(endpoint))
	case endpoint != "":
		opts = append(opts, otlpmetricgrpc.WithEndpoint(endpoint))
	}
	exporter, err := otlpmetricgrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating otlp metric exporter: %w", err)
	}
	return exporter, nil
}

// parseEndpoint checks an OTLP endpoint option and says whether it is a URL:
// "" (keep the environment's), host:port, or a URL with a host.
func parseEndpoint(endpoint string) (isURL bool, err error) {
	if !strings.Contains(endpoint, "://") {
		return false, nil
	}
	// The exporters' WithEndpointURL ignores a URL it cannot parse: check it here.
	if u, err := url.Parse(endpoint); err != nil || u.Host == "" {
		return false, fmt.Errorf("invalid otlp endpoint %q: want host:port or a URL such as http://host:4317", endpoint)
	}
	return true, nil
}

// newResource is the OTLP resource of metrics and spans: service.name is
// serviceName ("" means [DefaultServiceName]) unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise.
func newResource(ctx context.Context, serviceName string) (*resource.Resource, error) {
	if serviceName == "" {
		serviceName = DefaultServiceName
	}
	return resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), // later detectors win: the environment overrides
	)
}

func newInstruments(provider *sdkmetric.MeterProvider) (*Metrics, error) {
	meter := provider.Meter(MeterName)
	evaluations, err := meter.Int64Counter(MetricEvaluationsTotal,
		metric.WithDescription("Number of policy evaluations."))
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", MetricEvaluationsTotal, err)
	}
	latency, err := meter.Float64Histogram(MetricEvaluationLatency,
		metric.WithDescription("Policy evaluation latency in milliseconds."),
		metric.WithUnit("ms"),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", MetricEvaluationLatency, err)
	}
	reloads, err := meter.Int64Counter(MetricPolicyReloads,
		metric.WithDescription("Number of policy changes applied by hot reload, by result."))
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", MetricPolicyReloads, err)
	}
	timeouts, err := meter.Int64Counter(MetricEvaluationTimeouts,
		metric.WithDescription("Number of policy evaluations ended by the policy's time limit."))
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", MetricEvaluationTimeouts, err)
	}
	refused, err := meter.Int64Counter(MetricRefusedRequests,
		metric.WithDescription("Number of requests refused before any evaluation, by reason."))
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", MetricRefusedRequests, err)
	}
	return &Metrics{provider: provider, evaluations: evaluations, latency: latency, reloads: reloads,
		timeouts: timeouts, refused: refused}, nil
}

// observeReflectors registers the reflector metrics, read from states at
// each collection: a reflector that stopped leaves no series behind.
func observeReflectors(meter metric.Meter, states func() []ReflectorState) error {
	synced, err := meter.Int64ObservableGauge(MetricReflectorSynced,
		metric.WithDescription("Whether a reflector of context-aware policies holds a complete, current copy of its resource (1) or not (0)."))
	if err != nil {
		return fmt.Errorf("creating %s: %w", MetricReflectorSynced, err)
	}
	lists, err := meter.Int64ObservableCounter(MetricReflectorLists,
		metric.WithDescription("Number of lists of its resource a reflector made, by result."))
	if err != nil {
		return fmt.Errorf("creating %s: %w", MetricReflectorLists, err)
	}
	lastList, err := meter.Float64ObservableGauge(MetricReflectorLastList,
		metric.WithDescription("When a reflector's last complete list ended, in seconds since the Unix epoch."))
	if err != nil {
		return fmt.Errorf("creating %s: %w", MetricReflectorLastList, err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, s := range states() {
			kvs := make([]attribute.KeyValue, 0, 4)
			if s.Group != "" {
				kvs = append(kvs, attribute.String("group", s.Group))
			}
			kvs = append(kvs, attribute.String("version", s.Version), attribute.String("resource", s.Resource))
			set := attribute.NewSet(kvs...)
			o.ObserveInt64(synced, boolToInt(s.Synced), metric.WithAttributeSet(set))
			if !s.LastList.IsZero() {
				o.ObserveFloat64(lastList, float64(s.LastList.UnixMilli())/1000, metric.WithAttributeSet(set))
			}
			for _, l := range []struct {
				result string
				n      uint64
			}{{"success", s.Lists}, {"failure", s.ListFailures}} {
				o.ObserveInt64(lists, int64(l.n), metric.WithAttributes(append(slices.Clip(kvs), attribute.String("result", l.result))...))
			}
		}
		return nil
	}, synced, lists, lastList)
	if err != nil {
		return fmt.Errorf("registering the reflector metrics: %w", err)
	}
	return nil
}

func boolToInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// RecordTimeout counts an evaluation of policyName that its time limit
// ended.
func (m *Metrics) RecordTimeout(ctx context.Context, policyName string) {
	if m == nil {
		return
	}
	m.timeouts.Add(ctx, 1, metric.WithAttributes(attribute.String(attrPolicyName, policyName)))
}

// RecordRefused counts a request refused before any evaluation, for reason
// (RefusedBodyTooLarge, RefusedMemoryBudget, RefusedSlowBody).
func (m *Metrics) RecordRefused(ctx context.Context, reason string) {
	if m == nil {
		return
	}
	m.refused.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", reason)))
}

// RecordReload counts one change of a hot reload: action is add, update or
// remove for a policy, or read, with no policy name, for the policies file
// itself; failed says whether it failed (the previous state then serves).
func (m *Metrics) RecordReload(ctx context.Context, policyName, action string, failed bool) {
	if m == nil {
		return
	}
	result := "success"
	if failed {
		result = "failure"
	}
	kvs := []attribute.KeyValue{attribute.String("action", action), attribute.String("result", result)}
	if policyName != "" {
		kvs = append(kvs, attribute.String(attrPolicyName, policyName))
	}
	m.reloads.Add(ctx, 1, metric.WithAttributes(kvs...))
}

// RecordEvaluation counts one evaluation and records its latency, in buckets
// bounded at 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500,
// 5000 and 10000 ms.
//
// The values that come from the request are bounded, since any client can
// send any: a namespace, kind or operation that cannot be valid is recorded
// as [LabelValueInvalid], and a valid namespace or kind first seen past
// [MetricsOptions].LabelValueLimit distinct ones as [LabelValueOther].
//
// The latency is recorded in float64 milliseconds, so sub-millisecond
// evaluations keep their precision; Kubewarden records whole milliseconds (a
// u64, truncated), so its _sum is lower and its fastest evaluations all fall
// in the first bucket as 0.
func (m *Metrics) RecordEvaluation(ctx context.Context, e Evaluation, latency time.Duration) {
	if m == nil {
		return
	}
	// At most maxEvaluationAttributes: the array stays on the stack; one Set
	// (a sorted copy, 512 bytes) is built and shared by both instruments.
	e = m.boundLabels(e)
	var buf [maxEvaluationAttributes]attribute.KeyValue
	opt := metric.WithAttributeSet(attribute.NewSet(appendEvaluationAttributes(buf[:0], e)...))
	m.evaluations.Add(ctx, 1, opt)
	m.latency.Record(ctx, float64(latency)/float64(time.Millisecond), opt)
}

// maxEvaluationAttributes is the most attributes appendEvaluationAttributes
// appends.
const maxEvaluationAttributes = 9

// appendEvaluationAttributes appends the attributes of e's metric series
// (docs/compatibility.md#metrics) to kvs.
func appendEvaluationAttributes(kvs []attribute.KeyValue, e Evaluation) []attribute.KeyValue {
	kvs = append(kvs,
		attribute.String(attrPolicyName, e.PolicyName),
		attribute.String(attrPolicyMode, e.PolicyMode),
		attribute.Bool(attrAccepted, e.Accepted),
		attribute.Bool(attrMutated, e.Mutated),
	)
	if !e.Raw {
		kvs = append(kvs,
			attribute.String(attrResourceKind, e.ResourceKind),
			attribute.String(attrResourceOperation, e.Operation),
			attribute.String(attrRequestOrigin, e.Origin),
		)
		if e.Namespace != "" {
			kvs = append(kvs, attribute.String(attrResourceNamespace, e.Namespace))
		}
	}
	if e.ErrorCode != 0 {
		kvs = append(kvs, attribute.Int64(attrErrorCode, int64(e.ErrorCode)))
	}
	return kvs
}

// RecordInitializationError counts a policy that failed to initialize, as
// Kubewarden does: on the evaluations counter only, with the attributes
// policy_name and initialization_error (the error text).
func (m *Metrics) RecordInitializationError(ctx context.Context, policyName, err string) {
	if m == nil {
		return
	}
	m.evaluations.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(
		attribute.String(attrPolicyName, policyName),
		attribute.String(attrInitializationError, err),
	)))
}

// Handler serves the metrics in the Prometheus text format. On a nil
// *Metrics it answers 404.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Shutdown pushes what the OTLP reader has not sent yet and stops the
// readers; the Prometheus handler then serves no metrics. Later records are
// dropped. It returns when ctx is done at the latest.
func (m *Metrics) Shutdown(ctx context.Context) error {
	if m == nil {
		return nil
	}
	if err := m.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutting down metrics: %w", err)
	}
	return nil
}
