package observability

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/wardenhq/warden/internal/observability/otlptest"
)

// clearOTELEnv keeps the environment of the machine out of a test.
func clearOTELEnv(t *testing.T) {
	for _, k := range []string{"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"} {
		t.Setenv(k, "")
	}
}

// newTestTracing returns tracing that exports to a fresh collector.
func newTestTracing(t *testing.T, opts TracingOptions) (*Tracing, *otlptest.Collector) {
	t.Helper()
	collector := otlptest.Start(t)
	opts.Endpoint = collector.Endpoint
	tr, err := NewTracing(t.Context(), opts)
	if err != nil {
		t.Fatalf("NewTracing: %v", err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, collector
}

// shutdown flushes tr.
func shutdown(t *testing.T, tr *Tracing) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

var podRequest = SpanRequest{
	UID: "uid-1", Name: "nginx", Namespace: "default", Operation: "CREATE",
	KindVersion: "v1", Kind: "Pod", ResourceVersion: "v1", Resource: "pods",
}

// TestTracingExport sends spans of every shape through a real OTLP/gRPC
// exporter to an in-process collector and checks what arrives.
func TestTracingExport(t *testing.T) {
	clearOTELEnv(t)
	tr, collector := newTestTracing(t, TracingOptions{Host: "policy-server-0"})
	bg := context.Background()

	// A rejected validation, with its evaluation.
	ctx, span := tr.Start(bg, SpanValidation, "psp")
	span.SetRequest(podRequest)
	tr.RecordEvaluation(ctx, Evaluation{PolicyName: "psp", PolicyMode: ModeProtect, ResourceKind: "Pod",
		Operation: "CREATE", Namespace: "default", Origin: OriginValidate, ErrorCode: 400}, 1500*time.Microsecond)
	span.SetResponse(SpanResponse{Code: 400, Message: "no"})
	span.End()

	// A raw request, accepted with a patch.
	ctx, span = tr.Start(bg, SpanValidationRaw, "raw")
	tr.RecordEvaluation(ctx, Evaluation{PolicyName: "raw", PolicyMode: ModeMonitor, Accepted: true, Mutated: true, Raw: true}, time.Millisecond)
	span.SetResponse(SpanResponse{Allowed: true, Mutated: true})
	span.End()

	// An audit of a policy that failed to load.
	ctx, span = tr.Start(bg, SpanAudit, "broken")
	span.SetRequest(SpanRequest{UID: "uid-2", Operation: "DELETE", KindGroup: "apps", KindVersion: "v1", Kind: "Deployment",
		ResourceGroup: "apps", ResourceVersion: "v1", Resource: "deployments", SubResource: "scale"})
	tr.RecordInitializationError(ctx, "broken", "settings are invalid")
	span.SetResponse(SpanResponse{Code: 500, Message: "settings are invalid"})
	span.End()

	// A request that could not be evaluated.
	_, span = tr.Start(bg, SpanValidation, "failing")
	span.SetError(errors.New("boom"))
	span.End()

	// No request span in the context: no evaluation span.
	tr.RecordEvaluation(bg, Evaluation{PolicyName: "orphan"}, time.Millisecond)
	tr.RecordInitializationError(bg, "orphan", "x")

	shutdown(t, tr)

	type want struct {
		name, parent string // parent: the name of the parent span, "" for a root
		attrs        map[string]any
		errStatus    string // the status message of an error status
		duration     time.Duration
	}
	wants := []want{
		{name: "validation", attrs: map[string]any{
			"host": "policy-server-0", "policy_id": "psp", "request_uid": "uid-1", "name": "nginx",
			"namespace": "default", "operation": "CREATE", "subresource": "", "kind_group": "",
			"kind_version": "v1", "kind": "Pod", "resource_group": "", "resource_version": "v1",
			"resource": "pods", "allowed": false, "mutated": false, "response_code": int64(400),
			"response_message": "no",
		}},
		{name: "validate", parent: "validation", duration: 1500 * time.Microsecond, attrs: map[string]any{
			"policy_name": "psp", "policy_mode": "protect", "accepted": false, "mutated": false,
			"resource_kind": "Pod", "resource_request_operation": "CREATE", "request_origin": "validate",
			"resource_namespace": "default", "error_code": int64(400),
		}},
		{name: "validation_raw", attrs: map[string]any{
			"host": "policy-server-0", "policy_id": "raw", "allowed": true, "mutated": true,
		}},
		{name: "validate", parent: "validation_raw", duration: time.Millisecond, attrs: map[string]any{
			"policy_name": "raw", "policy_mode": "monitor", "accepted": true, "mutated": true,
		}},
		{name: "audit", attrs: map[string]any{
			"host": "policy-server-0", "policy_id": "broken", "request_uid": "uid-2", "name": "",
			"namespace": "", "operation": "DELETE", "subresource": "scale", "kind_group": "apps",
			"kind_version": "v1", "kind": "Deployment", "resource_group": "apps", "resource_version": "v1",
			"resource": "deployments", "allowed": false, "mutated": false, "response_code": int64(500),
			"response_message": "settings are invalid",
		}},
		{name: "validate", parent: "audit", errStatus: "settings are invalid", attrs: map[string]any{
			"policy_name": "broken", "initialization_error": "settings are invalid",
		}},
		{name: "validation", errStatus: "boom", attrs: map[string]any{
			"host": "policy-server-0", "policy_id": "failing",
		}},
	}

	spans := collector.Spans()
	if len(spans) != len(wants) {
		for _, s := range spans {
			t.Logf("span %s %v", s.GetName(), otlptest.Attributes(s.GetAttributes()))
		}
		t.Fatalf("received %d spans, want %d", len(spans), len(wants))
	}
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		byID[string(s.GetSpanId())] = s
	}
	// Spans arrive in the order they ended: a child before its parent.
	// Match each want with a received span by name and attributes.
	used := map[int]bool{}
	for _, w := range wants {
		found := false
		for i, s := range spans {
			if used[i] || s.GetName() != w.name || !maps.Equal(otlptest.Attributes(s.GetAttributes()), w.attrs) {
				continue
			}
			used[i], found = true, true
			parent, hasParent := byID[string(s.GetParentSpanId())]
			switch {
			case w.parent == "" && len(s.GetParentSpanId()) != 0:
				t.Errorf("%s %v: has a parent, want a root span", w.name, w.attrs)
			case w.parent != "" && (!hasParent || parent.GetName() != w.parent):
				t.Errorf("%s %v: parent %q, want %q", w.name, w.attrs, parent.GetName(), w.parent)
			case w.parent != "" && string(parent.GetTraceId()) != string(s.GetTraceId()):
				t.Errorf("%s %v: not in its parent's trace", w.name, w.attrs)
			}
			if w.duration != 0 {
				if got := time.Duration(s.GetEndTimeUnixNano() - s.GetStartTimeUnixNano()); got != w.duration {
					t.Errorf("%s %v: lasted %v, want the evaluation's latency %v", w.name, w.attrs, got, w.duration)
				}
			}
			wantCode := tracepb.Status_STATUS_CODE_UNSET
			if w.errStatus != "" {
				wantCode = tracepb.Status_STATUS_CODE_ERROR
			}
			if st := s.GetStatus(); st.GetCode() != wantCode || st.GetMessage() != w.errStatus {
				t.Errorf("%s %v: status %v %q, want %v %q", w.name, w.attrs, st.GetCode(), st.GetMessage(), wantCode, w.errStatus)
			}
			if got := otlptest.Attributes(s.Resource.GetAttributes())["service.name"]; got != DefaultServiceName {
				t.Errorf("%s: service.name = %v, want %q", w.name, got, DefaultServiceName)
			}
			if got := s.Scope.GetName(); got != TracerName {
				t.Errorf("%s: scope = %q, want %q", w.name, got, TracerName)
			}
			break
		}
		if !found {
			t.Errorf("no span %s with attributes %v", w.name, w.attrs)
		}
	}
	if t.Failed() {
		for _, s := range spans {
			t.Logf("received %s %v", s.GetName(), otlptest.Attributes(s.GetAttributes()))
		}
	}
}

func TestTracingResourceAndHost(t *testing.T) {
	tests := []struct {
		name                  string
		opts                  TracingOptions
		env                   map[string]string
		wantHost, wantService string
	}{
		{
			name:     "options",
			opts:     TracingOptions{ServiceName: "warden-policy-server", Host: "from-options"},
			env:      map[string]string{"HOSTNAME": "from-env"},
			wantHost: "from-options", wantService: "warden-policy-server",
		},
		{
			name:     "environment",
			opts:     TracingOptions{ServiceName: "warden-policy-server"},
			env:      map[string]string{"HOSTNAME": "policy-server-default-0", "OTEL_SERVICE_NAME": "custom"},
			wantHost: "policy-server-default-0", wantService: "custom",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearOTELEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			tr, collector := newTestTracing(t, tt.opts)
			_, span := tr.Start(context.Background(), SpanValidation, "p")
			span.End()
			shutdown(t, tr)
			spans := collector.Spans()
			if len(spans) != 1 {
				t.Fatalf("received %d spans, want 1", len(spans))
			}
			if got := otlptest.Attributes(spans[0].GetAttributes())["host"]; got != tt.wantHost {
				t.Errorf("host = %v, want %q", got, tt.wantHost)
			}
			if got := otlptest.Attributes(spans[0].Resource.GetAttributes())["service.name"]; got != tt.wantService {
				t.Errorf("service.name = %v, want %q", got, tt.wantService)
			}
		})
	}
}

// TestTracingSampledOut: with OTEL_TRACES_SAMPLER=always_off, spans are not
// recorded, so callers skip building their attributes, and none is sent.
func TestTracingSampledOut(t *testing.T) {
	clearOTELEnv(t)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	tr, collector := newTestTracing(t, TracingOptions{})
	ctx, span := tr.Start(context.Background(), SpanValidation, "p")
	if span.Recording() {
		t.Error("a sampled-out span is recording")
	}
	tr.RecordEvaluation(ctx, Evaluation{PolicyName: "p"}, time.Millisecond)
	span.End()
	shutdown(t, tr)
	if n := len(collector.Spans()); n != 0 {
		t.Errorf("received %d spans, want none", n)
	}
}

// TestNilTracingAllocatesNothing: tracing off costs an admission request no
// allocation (allocations are counted, not timed).
func TestNilTracingAllocatesNothing(t *testing.T) {
	var tr *Tracing
	ctx := context.Background()
	e := Evaluation{PolicyName: "p", PolicyMode: ModeProtect, Origin: OriginValidate, Accepted: true}
	errFailed := errors.New("could not evaluate")
	allocs := testing.AllocsPerRun(100, func() {
		ctx, span := tr.Start(ctx, SpanValidation, "p")
		defer span.End()
		if span.Recording() {
			span.SetRequest(podRequest)
		}
		tr.RecordEvaluation(ctx, e, time.Millisecond)
		tr.RecordInitializationError(ctx, "p", "boom")
		span.SetResponse(SpanResponse{Allowed: true})
		span.SetError(errFailed)
	})
	if allocs != 0 {
		t.Errorf("tracing off: %v allocations per request, want 0", allocs)
	}
	if err := tr.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestNewTracingInvalidEndpoint(t *testing.T) {
	_, err := NewTracing(t.Context(), TracingOptions{Endpoint: "http://"})
	if err == nil || !strings.Contains(err.Error(), "invalid otlp endpoint") {
		t.Errorf("err = %v, want invalid otlp endpoint", err)
	}
}

// BenchmarkRequestSpan measures what tracing adds to one admission request:
// nothing when it is off; with it on, the spans are built and queued (the
// batch exporter sends them to a collector in the background).
func BenchmarkRequestSpan(b *testing.B) {
	ctx := context.Background()
	e := Evaluation{PolicyName: "p", PolicyMode: ModeProtect, ResourceKind: "Pod", Operation: "CREATE",
		Namespace: "default", Origin: OriginValidate, Accepted: true}
	request := func(tr *Tracing) {
		ctx, span := tr.Start(ctx, SpanValidation, "p")
		if span.Recording() {
			span.SetRequest(podRequest)
		}
		tr.RecordEvaluation(ctx, e, time.Millisecond)
		span.SetResponse(SpanResponse{Allowed: true})
		span.End()
	}
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			request(nil)
		}
	})
	b.Run("on", func(b *testing.B) {
		collector := otlptest.Start(b)
		tr, err := NewTracing(b.Context(), TracingOptions{Endpoint: collector.Endpoint})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = tr.Shutdown(context.Background()) }()
		b.ReportAllocs()
		for b.Loop() {
			request(tr)
		}
	})
}
