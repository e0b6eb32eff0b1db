package observability

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRequestLabelValues checks which request values become labels as they
// are and which are replaced by LabelValueInvalid.
func TestRequestLabelValues(t *testing.T) {
	long := strings.Repeat("a", 64)
	tests := []struct {
		name                      string
		namespace, kind, op       string
		wantNS, wantKind, wantOp  string
		wantNamespaceLabelPresent bool
	}{
		{name: "valid", namespace: "kube-system", kind: "ClusterRoleBinding", op: "CONNECT",
			wantNS: "kube-system", wantKind: "ClusterRoleBinding", wantOp: "CONNECT", wantNamespaceLabelPresent: true},
		{name: "longest valid", namespace: long[:63], kind: "K" + long[:62], op: "DELETE",
			wantNS: long[:63], wantKind: "K" + long[:62], wantOp: "DELETE", wantNamespaceLabelPresent: true},
		{name: "cluster scoped, kind absent", op: "UPDATE", wantOp: "UPDATE"},
		{name: "too long", namespace: long, kind: "K" + long, op: "CREATE",
			wantNS: LabelValueInvalid, wantKind: LabelValueInvalid, wantOp: "CREATE", wantNamespaceLabelPresent: true},
		{name: "bad characters", namespace: "Default", kind: "Pod\n{x=\"y\"}", op: "create",
			wantNS: LabelValueInvalid, wantKind: LabelValueInvalid, wantOp: LabelValueInvalid, wantNamespaceLabelPresent: true},
		{name: "bad edges", namespace: "-ns", kind: "9Pod", op: "PATCH",
			wantNS: LabelValueInvalid, wantKind: LabelValueInvalid, wantOp: LabelValueInvalid, wantNamespaceLabelPresent: true},
		{name: "trailing dash", namespace: "ns-", kind: "Pod-", op: "CREATE",
			wantNS: LabelValueInvalid, wantKind: LabelValueInvalid, wantOp: "CREATE", wantNamespaceLabelPresent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestMetrics(t, MetricsOptions{})
			m.RecordEvaluation(context.Background(), Evaluation{
				PolicyName: "p", PolicyMode: ModeProtect, ResourceKind: tt.kind, Operation: tt.op,
				Namespace: tt.namespace, Origin: OriginValidate,
			}, time.Millisecond)
			series := scrapeFamilies(t, m)[MetricEvaluationsTotal].GetMetric()
			if len(series) != 1 {
				t.Fatalf("%d series, want 1", len(series))
			}
			got := labels(series[0])
			ns, present := got[attrResourceNamespace]
			if present != tt.wantNamespaceLabelPresent || ns != tt.wantNS {
				t.Errorf("resource_namespace = %q (present %v), want %q (present %v)", ns, present, tt.wantNS, tt.wantNamespaceLabelPresent)
			}
			if got[attrResourceKind] != tt.wantKind {
				t.Errorf("resource_kind = %q, want %q", got[attrResourceKind], tt.wantKind)
			}
			if got[attrResourceOperation] != tt.wantOp {
				t.Errorf("resource_request_operation = %q, want %q", got[attrResourceOperation], tt.wantOp)
			}
		})
	}
}

// TestHostileLabelValuesKeepScrapeSmall records what a hostile client can
// send (huge, distinct namespaces, kinds and operations): the scrape stays a
// few series, however many requests there were.
func TestHostileLabelValuesKeepScrapeSmall(t *testing.T) {
	m := newTestMetrics(t, MetricsOptions{})
	ctx := context.Background()
	const requests = 60
	for i := range requests {
		huge := fmt.Sprintf("%d-%s", i, strings.Repeat("x", 10<<10))
		for _, e := range []Evaluation{
			{Namespace: huge, ResourceKind: "Pod", Operation: "CREATE"},
			{Namespace: "default", ResourceKind: "Pod" + huge, Operation: "CREATE"},
			{Namespace: "default", ResourceKind: "Pod", Operation: "CREATE" + huge},
		} {
			e.PolicyName, e.PolicyMode, e.Origin = "p", ModeProtect, OriginValidate
			m.RecordEvaluation(ctx, e, time.Millisecond)
		}
	}
	body := scrape(t, m)
	// Four label sets (the three invalid values and none), a counter and a
	// histogram each: about 25 KB. Before the bound, 180 series of 10 KB
	// labels, 20 lines each: 36 MB.
	if len(body) > 64<<10 {
		t.Errorf("scrape is %d bytes, want at most 64 KiB", len(body))
	}
	series := scrapeFamilies(t, m)[MetricEvaluationsTotal].GetMetric()
	if len(series) != 3 {
		t.Errorf("%s: %d series, want 3 (an invalid namespace, kind, operation)", MetricEvaluationsTotal, len(series))
	}
	var total float64
	for _, s := range series {
		total += s.GetCounter().GetValue()
	}
	if total != 3*requests {
		t.Errorf("total = %v, want %d: no evaluation may be lost", total, 3*requests)
	}
}

// TestLabelValueLimit records more distinct valid namespaces and kinds than
// the default limit: the values past it share the LabelValueOther series.
func TestLabelValueLimit(t *testing.T) {
	tests := []struct {
		name  string
		label string
		eval  func(i int) Evaluation
	}{
		{name: "namespace", label: attrResourceNamespace, eval: func(i int) Evaluation {
			return Evaluation{Namespace: fmt.Sprintf("ns-%d", i), ResourceKind: "Pod"}
		}},
		{name: "kind", label: attrResourceKind, eval: func(i int) Evaluation {
			return Evaluation{ResourceKind: fmt.Sprintf("Kind%d", i)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestMetrics(t, MetricsOptions{})
			ctx := context.Background()
			const distinct = DefaultLabelValueLimit + 500
			for range 2 { // the second round finds every value already seen
				for i := range distinct {
					e := tt.eval(i)
					e.PolicyName, e.PolicyMode, e.Operation, e.Origin = "p", ModeProtect, "CREATE", OriginValidate
					m.RecordEvaluation(ctx, e, time.Millisecond)
				}
			}
			values := map[string]float64{}
			for _, s := range scrapeFamilies(t, m)[MetricEvaluationsTotal].GetMetric() {
				values[labels(s)[tt.label]] += s.GetCounter().GetValue()
			}
			if got, want := len(values), DefaultLabelValueLimit+1; got != want {
				t.Errorf("%d distinct %s values, want %d (the limit and %q)", got, tt.label, want, LabelValueOther)
			}
			first := tt.eval(0)
			firstValue := first.Namespace
			if tt.label == attrResourceKind {
				firstValue = first.ResourceKind
			}
			if got := values[firstValue]; got != 2 {
				t.Errorf("%s=%q counted %v, want 2", tt.label, firstValue, got)
			}
			if got, want := values[LabelValueOther], float64(2*(distinct-DefaultLabelValueLimit)); got != want {
				t.Errorf("%s=%q counted %v, want %v", tt.label, LabelValueOther, got, want)
			}
		})
	}
}

// TestLabelValueLimitOption checks the option: a small limit, and no limit.
func TestLabelValueLimitOption(t *testing.T) {
	for _, tt := range []struct {
		limit, want int
	}{{limit: 3, want: 4}, {limit: -1, want: 10}} {
		t.Run(fmt.Sprint(tt.limit), func(t *testing.T) {
			m := newTestMetrics(t, MetricsOptions{LabelValueLimit: tt.limit})
			for i := range 10 {
				m.RecordEvaluation(context.Background(), Evaluation{
					PolicyName: "p", PolicyMode: ModeProtect, ResourceKind: "Pod", Operation: "CREATE",
					Namespace: fmt.Sprintf("ns-%d", i), Origin: OriginValidate,
				}, time.Millisecond)
			}
			if got := len(scrapeFamilies(t, m)[MetricEvaluationsTotal].GetMetric()); got != tt.want {
				t.Errorf("%d series, want %d", got, tt.want)
			}
		})
	}
}
