package observability

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Span names. The request spans are those of Kubewarden's policy-server, one
// per route (docs/compatibility.md#tracing); SpanEvaluation is the policy
// evaluation inside a request span, named as Kubewarden's policy evaluator
// names its own.
const (
	SpanValidation    = "validation"     // POST /validate/{id}
	SpanAudit         = "audit"          // POST /audit/{id}
	SpanValidationRaw = "validation_raw" // POST /validate_raw/{id}
	SpanEvaluation    = "validate"       // one evaluation, a child of the request span
)

// TracerName is the instrumentation scope of the spans: Kubewarden names its
// tracer after its service.
const TracerName = "kubewarden-policy-server"

// Span attribute keys that are not log keys too (the others are in
// logkeys.go), Kubewarden's (docs/compatibility.md#tracing).
const (
	spanKeyHost            = "host"
	spanKeySubResource     = "subresource"
	spanKeyKindGroup       = "kind_group"
	spanKeyKindVersion     = "kind_version"
	spanKeyResourceGroup   = "resource_group"
	spanKeyResourceVersion = "resource_version"
)

// TracingOptions configures [NewTracing]. The zero value exports to the
// endpoint of the environment.
type TracingOptions struct {
	// Endpoint, when not empty, overrides the endpoint from the environment:
	// host:port (TLS unless OTEL_EXPORTER_OTLP_INSECURE=true) or a URL
	// (http:// means no TLS).
	Endpoint string
	// ServiceName is the OTLP resource's service.name; "" means
	// [DefaultServiceName]. OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override it.
	ServiceName string
	// Host is the value of the spans' host attribute; "" means $HOSTNAME (the
	// pod name in Kubernetes, as in Kubewarden), else the host name, else
	// "unknown".
	Host string
}

// Tracing exports trace spans over OTLP/gRPC, as Kubewarden's policy-server
// does with --log-fmt otlp (docs/compatibility.md#tracing): one span per
// admission request, started by [Tracing.Start], and one child span per policy
// evaluation, recorded by [Tracing.RecordEvaluation]. The exporter is
// configured by the standard OTEL_EXPORTER_OTLP_* environment variables
// (endpoint, TLS certificates, headers, timeout; default endpoint
// localhost:4317), spans are batched as OTEL_BSP_* say and sampled as
// OTEL_TRACES_SAMPLER says (default: every span).
//
// Its methods are safe for concurrent use. A nil *Tracing traces nothing and
// allocates nothing, so callers need no check when tracing is off.
type Tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	host     attribute.KeyValue
}

// NewTracing builds the tracer provider and its OTLP/gRPC exporter. No
// connection is made before the first batch is sent; export failures go to
// OpenTelemetry's global error handler. Call [Tracing.Shutdown] to send the
// spans not sent yet.
func NewTracing(ctx context.Context, opts TracingOptions) (*Tracing, error) {
	var exporterOpts []otlptracegrpc.Option
	isURL, err := parseEndpoint(opts.Endpoint)
	switch {
	case err != nil:
		return nil, err
	case isURL:
		exporterOpts = append(exporterOpts, otlptracegrpc.WithEndpointURL(opts.Endpoint))
	case opts.Endpoint != "":
		exporterOpts = append(exporterOpts, otlptracegrpc.WithEndpoint(opts.Endpoint))
	}
	res, err := newResource(ctx, opts.ServiceName)
	if err != nil {
		return nil, fmt.Errorf("creating tracing resource: %w", err)
	}
	exporter, err := otlptracegrpc.New(ctx, exporterOpts...)
	if err != nil {
		return nil, fmt.Errorf("creating otlp trace exporter: %w", err)
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithBatcher(exporter),
	)
	return &Tracing{
		provider: provider,
		tracer:   provider.Tracer(TracerName),
		host:     attribute.String(spanKeyHost, hostName(opts.Host)),
	}, nil
}

func hostName(host string) string {
	if host != "" {
		return host
	}
	if host = os.Getenv("HOSTNAME"); host != "" {
		return host
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		return host
	}
	return "unknown"
}

// Shutdown sends the spans not sent yet and stops the exporter; later spans
// are dropped. It returns when ctx is done at the latest.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutting down tracing: %w", err)
	}
	return nil
}

// Start starts the span of one admission request, named name
// ([SpanValidation], [SpanAudit] or [SpanValidationRaw]), with the host and
// policy_id attributes, and returns ctx carrying it: pass that context to the
// evaluation, so that [Tracing.RecordEvaluation] records its child span. The
// caller must call [RequestSpan.End].
//
// On a nil *Tracing it returns ctx and the zero RequestSpan, without
// allocating.
func (t *Tracing) Start(ctx context.Context, name, policyID string) (context.Context, RequestSpan) {
	if t == nil {
		return ctx, RequestSpan{}
	}
	ctx, span := t.tracer.Start(ctx, name)
	if !span.IsRecording() { // sampled out: End would do nothing
		return ctx, RequestSpan{}
	}
	span.SetAttributes(t.host, attribute.String(KeyPolicyID, policyID))
	return ctx, RequestSpan{span: span}
}

// RecordEvaluation records one policy evaluation that ended now and lasted
// latency as a span named [SpanEvaluation], a child of the request span in ctx,
// with the attributes of the evaluation's metric series
// (docs/compatibility.md#metrics): policy_name, policy_mode, accepted, mutated
// and error_code describe the policy's own answer, before the monitor mode and
// the other post-processing that the request span's allowed and mutated show.
// Without a recording span in ctx it records nothing.
func (t *Tracing) RecordEvaluation(ctx context.Context, e Evaluation, latency time.Duration) {
	if t == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	end := time.Now()
	var buf [maxEvaluationAttributes]attribute.KeyValue
	_, span := t.tracer.Start(ctx, SpanEvaluation,
		trace.WithTimestamp(end.Add(-latency)),
		trace.WithAttributes(appendEvaluationAttributes(buf[:0], e)...))
	span.End(trace.WithTimestamp(end))
}

// RecordInitializationError records a request answered with the load error
// of its policy as a [SpanEvaluation] child span of the request span in ctx,
// with policy_name and initialization_error (the error text) and an error
// status. Without a recording span in ctx it records nothing.
func (t *Tracing) RecordInitializationError(ctx context.Context, policyName, err string) {
	if t == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	_, span := t.tracer.Start(ctx, SpanEvaluation, trace.WithAttributes(
		attribute.String(attrPolicyName, policyName),
		attribute.String(attrInitializationError, err),
	))
	span.SetStatus(codes.Error, err)
	span.End()
}

// SpanRequest is what a request span records of an AdmissionRequest; every
// field is recorded, empty or not, as Kubewarden does.
type SpanRequest struct {
	UID         string // request_uid
	Name        string // name
	Namespace   string // namespace
	Operation   string // operation
	SubResource string // subresource
	// Kind: kind_group, kind_version, kind.
	KindGroup, KindVersion, Kind string
	// Resource: resource_group, resource_version, resource.
	ResourceGroup, ResourceVersion, Resource string
}

// SpanResponse is what a request span records of an AdmissionResponse.
type SpanResponse struct {
	Allowed bool   // allowed
	Mutated bool   // mutated: the response carries a patch
	Code    int32  // response_code, recorded when not 0
	Message string // response_message, recorded when not empty
}

// RequestSpan is the span of one admission request, from [Tracing.Start].
// The zero value (tracing off, or the span sampled out) records nothing and
// its methods return at once. A RequestSpan is used by the goroutine serving
// its request.
type RequestSpan struct {
	span trace.Span
}

// Recording reports whether the span records what it is given: callers can
// skip building a [SpanRequest] when it does not.
func (s RequestSpan) Recording() bool { return s.span != nil }

// SetRequest records the admission request's attributes (not for raw
// requests, as in Kubewarden).
func (s RequestSpan) SetRequest(r SpanRequest) {
	if s.span == nil {
		return
	}
	s.span.SetAttributes(
		attribute.String(KeyRequestUID, r.UID),
		attribute.String(KeyName, r.Name),
		attribute.String(KeyNamespace, r.Namespace),
		attribute.String(KeyOperation, r.Operation),
		attribute.String(spanKeySubResource, r.SubResource),
		attribute.String(spanKeyKindGroup, r.KindGroup),
		attribute.String(spanKeyKindVersion, r.KindVersion),
		attribute.String(KeyKind, r.Kind),
		attribute.String(spanKeyResourceGroup, r.ResourceGroup),
		attribute.String(spanKeyResourceVersion, r.ResourceVersion),
		attribute.String(KeyResource, r.Resource),
	)
}

// SetResponse records the response sent back: allowed, mutated and, when
// set, response_code and response_message.
func (s RequestSpan) SetResponse(r SpanResponse) {
	if s.span == nil {
		return
	}
	var buf [4]attribute.KeyValue
	kvs := append(buf[:0], attribute.Bool(KeyAllowed, r.Allowed), attribute.Bool(KeyMutated, r.Mutated))
	if r.Code != 0 {
		kvs = append(kvs, attribute.Int64(KeyCode, int64(r.Code)))
	}
	if r.Message != "" {
		kvs = append(kvs, attribute.String(KeyMessage, r.Message))
	}
	s.span.SetAttributes(kvs...)
}

// SetError marks the span failed: the request could not be evaluated.
func (s RequestSpan) SetError(err error) {
	if s.span == nil {
		return
	}
	s.span.SetStatus(codes.Error, err.Error())
}

// End ends the span.
func (s RequestSpan) End() {
	if s.span == nil {
		return
	}
	s.span.End()
}
