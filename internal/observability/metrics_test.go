package observability

import (
	"context"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/wardenhq/warden/internal/observability/otlptest"
)

func newTestMetrics(t *testing.T, opts MetricsOptions) *Metrics {
	t.Helper()
	m, err := NewMetrics(t.Context(), opts)
	if err != nil {
		t.Fatalf("NewMetrics: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return m
}

// scrape GETs the handler and returns the body.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	var out strings.Builder
	for line := range strings.Lines(scrapeAll(t, m)) {
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		if !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			out.WriteString(line)
		}
	}
	return out.String()
}

// scrapeAll is the whole of /metrics, the runtime's families (go_*,
// process_*) included; scrape leaves them out.
func scrapeAll(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", rec.Code)
	}
	return rec.Body.String()
}

// A policy server's memory, CPU and Go runtime are on /metrics under the
// usual names, for the dashboards.
func TestRuntimeMetrics(t *testing.T) {
	all := scrapeAll(t, newTestMetrics(t, MetricsOptions{}))
	for _, family := range []string{"process_resident_memory_bytes", "process_cpu_seconds_total", "go_memstats_heap_inuse_bytes", "go_goroutines"} {
		if !strings.Contains(all, "\n"+family+" ") {
			t.Errorf("/metrics has no %s", family)
		}
	}
}

// scrapeFamilies scrapes and parses the Prometheus text format.
func scrapeFamilies(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(scrape(t, m)))
	if err != nil {
		t.Fatalf("parsing scrape: %v", err)
	}
	return families
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestPrometheusExposition(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		record func(*Metrics)
		// wantLabels is the label set of every series; nil means the family is absent.
		wantCounter, wantHistogram map[string]string
	}{
		{
			name: "validate rejected with code in a namespace",
			record: func(m *Metrics) {
				m.RecordEvaluation(ctx, Evaluation{
					PolicyName: "psp-capabilities", PolicyMode: ModeProtect, ResourceKind: "Pod",
					Operation: "CREATE", Namespace: "default", Origin: OriginValidate, ErrorCode: 400,
				}, 1500*time.Microsecond)
			},
			wantCounter: map[string]string{
				"policy_name": "psp-capabilities", "policy_mode": "protect", "resource_kind": "Pod",
				"resource_request_operation": "CREATE", "accepted": "false", "mutated": "false",
				"request_origin": "validate", "resource_namespace": "default", "error_code": "400",
			},
		},
		{
			name: "audit accepted, cluster scoped, no code",
			record: func(m *Metrics) {
				m.RecordEvaluation(ctx, Evaluation{
					PolicyName: "group/member", PolicyMode: ModeMonitor, ResourceKind: "Namespace",
					Operation: "UPDATE", Origin: OriginAudit, Accepted: true, Mutated: true,
				}, time.Millisecond)
			},
			wantCounter: map[string]string{
				"policy_name": "group/member", "policy_mode": "monitor", "resource_kind": "Namespace",
				"resource_request_operation": "UPDATE", "accepted": "true", "mutated": "true",
				"request_origin": "audit",
			},
		},
		{
			name: "raw",
			record: func(m *Metrics) {
				m.RecordEvaluation(ctx, Evaluation{
					PolicyName: "raw-policy", PolicyMode: ModeProtect, Accepted: false, ErrorCode: 500, Raw: true,
					// Ignored for raw requests.
					ResourceKind: "Pod", Operation: "CREATE", Namespace: "ns", Origin: OriginValidate,
				}, time.Millisecond)
			},
			wantCounter: map[string]string{
				"policy_name": "raw-policy", "policy_mode": "protect", "accepted": "false",
				"mutated": "false", "error_code": "500",
			},
		},
		{
			name: "initialization error",
			record: func(m *Metrics) {
				m.RecordInitializationError(ctx, "broken", "settings are invalid: x")
			},
			wantCounter: map[string]string{
				"policy_name": "broken", "initialization_error": "settings are invalid: x",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestMetrics(t, MetricsOptions{})
			tt.record(m)
			families := scrapeFamilies(t, m)

			wantNames := []string{MetricEvaluationsTotal}
			initError := tt.wantCounter["initialization_error"] != ""
			if !initError {
				wantNames = append(wantNames, MetricEvaluationLatency)
			}
			slices.Sort(wantNames)
			if got := slices.Sorted(maps.Keys(families)); !slices.Equal(got, wantNames) {
				t.Fatalf("metric families = %v, want %v", got, wantNames)
			}

			counter := families[MetricEvaluationsTotal]
			if counter.GetType() != dto.MetricType_COUNTER || len(counter.GetMetric()) != 1 {
				t.Fatalf("%s: type %v with %d series, want one counter series", MetricEvaluationsTotal, counter.GetType(), len(counter.GetMetric()))
			}
			if got := labels(counter.GetMetric()[0]); !maps.Equal(got, tt.wantCounter) {
				t.Errorf("counter labels = %v, want %v", got, tt.wantCounter)
			}
			if got := counter.GetMetric()[0].GetCounter().GetValue(); got != 1 {
				t.Errorf("counter = %v, want 1", got)
			}
			if initError {
				return
			}
			hist := families[MetricEvaluationLatency]
			if hist.GetType() != dto.MetricType_HISTOGRAM || len(hist.GetMetric()) != 1 {
				t.Fatalf("%s: type %v with %d series, want one histogram series", MetricEvaluationLatency, hist.GetType(), len(hist.GetMetric()))
			}
			if got := labels(hist.GetMetric()[0]); !maps.Equal(got, tt.wantCounter) {
				t.Errorf("histogram labels = %v, want %v", got, tt.wantCounter)
			}
		})
	}
}

// TestPrometheusMixedLabelSets scrapes series of one family with different
// label names side by side (namespaced or not, raw, initialization error), as
// a running server exposes them.
func TestPrometheusMixedLabelSets(t *testing.T) {
	ctx := context.Background()
	m := newTestMetrics(t, MetricsOptions{})
	m.RecordEvaluation(ctx, Evaluation{PolicyName: "p", PolicyMode: ModeProtect, ResourceKind: "Pod", Operation: "CREATE", Namespace: "ns", Origin: OriginValidate, Accepted: true}, time.Millisecond)
	m.RecordEvaluation(ctx, Evaluation{PolicyName: "p", PolicyMode: ModeProtect, ResourceKind: "Namespace", Operation: "CREATE", Origin: OriginValidate, ErrorCode: 403}, time.Millisecond)
	m.RecordEvaluation(ctx, Evaluation{PolicyName: "raw", PolicyMode: ModeMonitor, Accepted: true, Raw: true}, time.Millisecond)
	m.RecordInitializationError(ctx, "broken", "boom")

	families := scrapeFamilies(t, m)
	if got := len(families[MetricEvaluationsTotal].GetMetric()); got != 4 {
		t.Errorf("%s: %d series, want 4", MetricEvaluationsTotal, got)
	}
	if got := len(families[MetricEvaluationLatency].GetMetric()); got != 3 {
		t.Errorf("%s: %d series, want 3", MetricEvaluationLatency, got)
	}
}

// TestPrometheusText pins the exact exposition, the names the Kubewarden
// Grafana dashboard queries included (_bucket, _sum, _count, _total).
func TestPrometheusText(t *testing.T) {
	m := newTestMetrics(t, MetricsOptions{})
	m.RecordEvaluation(context.Background(), Evaluation{
		PolicyName: "psp-capabilities", PolicyMode: ModeProtect, ResourceKind: "Pod",
		Operation: "CREATE", Namespace: "default", Origin: OriginValidate, Accepted: true,
	}, 1500*time.Microsecond)

	const lbl = `accepted="true",mutated="false",policy_mode="protect",policy_name="psp-capabilities",request_origin="validate",resource_kind="Pod",resource_namespace="default",resource_request_operation="CREATE"`
	var want strings.Builder
	want.WriteString("# HELP kubewarden_policy_evaluation_latency_milliseconds Policy evaluation latency in milliseconds.\n")
	want.WriteString("# TYPE kubewarden_policy_evaluation_latency_milliseconds histogram\n")
	for _, le := range []string{"0.1", "0.25", "0.5", "1", "2.5", "5", "10", "25", "50", "100", "250", "500", "1000", "2500", "5000", "10000", "+Inf"} {
		n := "1"
		if slices.Contains([]string{"0.1", "0.25", "0.5", "1"}, le) {
			n = "0"
		}
		want.WriteString("kubewarden_policy_evaluation_latency_milliseconds_bucket{" + lbl + `,le="` + le + `"} ` + n + "\n")
	}
	want.WriteString("kubewarden_policy_evaluation_latency_milliseconds_sum{" + lbl + "} 1.5\n")
	want.WriteString("kubewarden_policy_evaluation_latency_milliseconds_count{" + lbl + "} 1\n")
	want.WriteString("# HELP kubewarden_policy_evaluations_total Number of policy evaluations.\n")
	want.WriteString("# TYPE kubewarden_policy_evaluations_total counter\n")
	want.WriteString("kubewarden_policy_evaluations_total{" + lbl + "} 1\n")

	if got := scrape(t, m); got != want.String() {
		t.Errorf("scrape:\n%s\nwant:\n%s", got, want.String())
	}
}

func TestHistogramCountSumBuckets(t *testing.T) {
	m := newTestMetrics(t, MetricsOptions{})
	e := Evaluation{PolicyName: "p", PolicyMode: ModeProtect, ResourceKind: "Pod", Operation: "CREATE", Origin: OriginValidate, Accepted: true}
	for _, d := range []time.Duration{250 * time.Microsecond, 1500 * time.Microsecond, 3 * time.Second} {
		m.RecordEvaluation(context.Background(), e, d)
	}
	h := scrapeFamilies(t, m)[MetricEvaluationLatency].GetMetric()[0].GetHistogram()
	if got := h.GetSampleCount(); got != 3 {
		t.Errorf("count = %d, want 3", got)
	}
	if got, want := h.GetSampleSum(), 3001.75; got != want {
		t.Errorf("sum = %v, want %v", got, want)
	}
	wantCumulative := map[float64]uint64{0.1: 0, 0.25: 1, 1: 1, 2.5: 2, 2500: 2, 5000: 3, 10000: 3}
	gotBounds := make([]float64, 0, len(h.GetBucket()))
	for _, b := range h.GetBucket() {
		gotBounds = append(gotBounds, b.GetUpperBound())
		if want, ok := wantCumulative[b.GetUpperBound()]; ok && b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if want := append(slices.Clone(latencyBuckets), math.Inf(1)); !slices.Equal(gotBounds, want) {
		t.Errorf("bucket bounds = %v, want %v", gotBounds, want)
	}
}

func TestRecordConcurrently(t *testing.T) {
	m := newTestMetrics(t, MetricsOptions{})
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			e := Evaluation{PolicyName: "p", PolicyMode: ModeProtect, Origin: OriginValidate, Accepted: g%2 == 0}
			for range each {
				m.RecordEvaluation(context.Background(), e, time.Millisecond)
			}
		})
	}
	wg.Go(func() { _ = scrape(t, m) }) // scraping while recording
	wg.Wait()
	var total float64
	for _, s := range scrapeFamilies(t, m)[MetricEvaluationsTotal].GetMetric() {
		total += s.GetCounter().GetValue()
	}
	if total != goroutines*each {
		t.Errorf("total = %v, want %d", total, goroutines*each)
	}
}

func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.RecordEvaluation(context.Background(), Evaluation{PolicyName: "p"}, time.Millisecond)
	m.RecordInitializationError(context.Background(), "p", "boom")
	if err := m.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("status = %d, want 404", rec.Code)
	}
}

func TestOTLPExport(t *testing.T) {
	for _, k := range []string{"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		t.Setenv(k, "")
	}
	collector := otlptest.Start(t)

	m, err := NewMetrics(t.Context(), MetricsOptions{
		OTLPEndpoint: collector.Endpoint,
		OTLPInterval: time.Hour, // only Shutdown pushes
	})
	if err != nil {
		t.Fatalf("NewMetrics: %v", err)
	}
	m.RecordEvaluation(context.Background(), Evaluation{PolicyName: "p", PolicyMode: ModeProtect, ResourceKind: "Pod", Operation: "CREATE", Origin: OriginValidate, Accepted: true}, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil { // flushes
		t.Fatalf("Shutdown: %v", err)
	}

	requests := collector.MetricRequests()
	if len(requests) == 0 {
		t.Fatal("collector received nothing")
	}
	rm := requests[0].GetResourceMetrics()[0]
	if service := otlptest.Attributes(rm.GetResource().GetAttributes())["service.name"]; service != DefaultServiceName {
		t.Errorf("service.name = %q, want %q", service, DefaultServiceName)
	}
	sm := rm.GetScopeMetrics()[0]
	if sm.GetScope().GetName() != MeterName {
		t.Errorf("scope = %q, want %q", sm.GetScope().GetName(), MeterName)
	}
	got := map[string]string{}
	for _, metric := range sm.GetMetrics() {
		got[metric.GetName()] = metric.GetUnit()
	}
	want := map[string]string{MetricEvaluationsTotal: "", MetricEvaluationLatency: "ms"}
	if !maps.Equal(got, want) {
		t.Errorf("metrics (name: unit) = %v, want %v", got, want)
	}
}

func TestNewMetricsInvalidEndpoint(t *testing.T) {
	_, err := NewMetrics(t.Context(), MetricsOptions{OTLPEndpoint: "http://"})
	if err == nil || !strings.Contains(err.Error(), "invalid otlp endpoint") {
		t.Errorf("err = %v, want invalid otlp endpoint", err)
	}
}

// BenchmarkRecordEvaluation measures the hot path: one admission evaluation
// on a series that already exists (the steady state of a running server),
// from one goroutine and from GOMAXPROCS goroutines.
func BenchmarkRecordEvaluation(b *testing.B) {
	m, err := NewMetrics(b.Context(), MetricsOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.Shutdown(context.Background()) }()
	ctx := context.Background()
	e := Evaluation{
		PolicyName: "psp-capabilities", PolicyMode: ModeProtect, ResourceKind: "Pod",
		Operation: "CREATE", Namespace: "default", Origin: OriginValidate, Accepted: true,
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.RecordEvaluation(ctx, e, 1500*time.Microsecond)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.RecordEvaluation(ctx, e, 1500*time.Microsecond)
			}
		})
	})
}

// Timeouts and refusals have counters of their own, besides Kubewarden's.
func TestTimeoutAndRefusalCounters(t *testing.T) {
	m := newTestMetrics(t, MetricsOptions{})
	m.RecordTimeout(context.Background(), "loop")
	m.RecordTimeout(context.Background(), "loop")
	m.RecordRefused(context.Background(), RefusedSlowBody)
	got := scrape(t, m)
	for _, want := range []string{
		`warden_policy_evaluation_timeouts_total{policy_name="loop"} 2`,
		`warden_policy_server_refused_requests_total{reason="slow_body"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, got)
		}
	}
}

// The reflector metrics show the reflectors that run at each scrape, one
// series per resource (no group label for the core group), and nothing of
// a reflector that stopped.
func TestReflectorMetrics(t *testing.T) {
	var mu sync.Mutex
	states := []ReflectorState{
		{Version: "v1", Resource: "namespaces", Synced: true, Lists: 2, LastList: time.UnixMilli(1_800_000_000_500)},
		{Group: "apps", Version: "v1", Resource: "deployments", ListFailures: 3},
	}
	m := newTestMetrics(t, MetricsOptions{Reflectors: func() []ReflectorState {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(states)
	}})
	got := scrape(t, m)
	for _, want := range []string{
		`warden_reflector_synced{resource="namespaces",version="v1"} 1`,
		`warden_reflector_synced{group="apps",resource="deployments",version="v1"} 0`,
		`warden_reflector_lists_total{resource="namespaces",result="success",version="v1"} 2`,
		`warden_reflector_lists_total{resource="namespaces",result="failure",version="v1"} 0`,
		`warden_reflector_lists_total{group="apps",resource="deployments",result="failure",version="v1"} 3`,
		`warden_reflector_last_list_timestamp_seconds{resource="namespaces",version="v1"} 1.8000000005e+09`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, `warden_reflector_last_list_timestamp_seconds{group="apps"`) {
		t.Errorf("a reflector that never listed has a last list:\n%s", got)
	}

	mu.Lock()
	states = states[:1]
	mu.Unlock()
	if got := scrape(t, m); strings.Contains(got, "deployments") {
		t.Errorf("a stopped reflector is still on /metrics:\n%s", got)
	}
	if got := scrape(t, newTestMetrics(t, MetricsOptions{})); strings.Contains(got, "warden_reflector") {
		t.Errorf("reflector metrics without Reflectors:\n%s", got)
	}
}
