// Package otlptest is an OTLP/gRPC collector for tests: it serves the
// metrics and trace services on 127.0.0.1, keeps every export request it
// receives, and answers success. Only tests import it.
package otlptest

import (
	"context"
	"net"
	"sync"
	"testing"

	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Collector receives OTLP metrics and traces over plain gRPC. Its methods
// are safe for concurrent use.
type Collector struct {
	// Endpoint is http://127.0.0.1:port: an OTLP endpoint URL without TLS,
	// for an exporter option or OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint string

	mu      sync.Mutex
	metrics []*collectormetrics.ExportMetricsServiceRequest
	traces  []*collectortrace.ExportTraceServiceRequest
}

// Start starts a collector that stops with the test.
func Start(t testing.TB) *Collector {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{Endpoint: "http://" + lis.Addr().String()}
	srv := grpc.NewServer()
	collectormetrics.RegisterMetricsServiceServer(srv, metricsService{c: c})
	collectortrace.RegisterTraceServiceServer(srv, traceService{c: c})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return c
}

// MetricRequests returns the metrics export requests received so far.
func (c *Collector) MetricRequests() []*collectormetrics.ExportMetricsServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*collectormetrics.ExportMetricsServiceRequest(nil), c.metrics...)
}

// TraceRequests returns the trace export requests received so far.
func (c *Collector) TraceRequests() []*collectortrace.ExportTraceServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*collectortrace.ExportTraceServiceRequest(nil), c.traces...)
}

// Span is one received span with the resource and scope it came with.
type Span struct {
	*tracepb.Span
	Resource *resourcepb.Resource
	Scope    *commonpb.InstrumentationScope
}

// Spans returns the spans received so far, in the order received.
func (c *Collector) Spans() []Span {
	var out []Span
	for _, req := range c.TraceRequests() {
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, Span{Span: s, Resource: rs.GetResource(), Scope: ss.GetScope()})
				}
			}
		}
	}
	return out
}

// Attributes returns OTLP attributes as a map of Go values: string, bool,
// int64, float64, or the string form of any other kind of value.
func Attributes(kvs []*commonpb.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = x.BoolValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = x.IntValue
		case *commonpb.AnyValue_DoubleValue:
			out[kv.GetKey()] = x.DoubleValue
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}

type metricsService struct {
	collectormetrics.UnimplementedMetricsServiceServer
	c *Collector
}

func (s metricsService) Export(_ context.Context, req *collectormetrics.ExportMetricsServiceRequest) (*collectormetrics.ExportMetricsServiceResponse, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.metrics = append(s.c.metrics, req)
	return &collectormetrics.ExportMetricsServiceResponse{}, nil
}

type traceService struct {
	collectortrace.UnimplementedTraceServiceServer
	c *Collector
}

func (s traceService) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.traces = append(s.c.traces, req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}
