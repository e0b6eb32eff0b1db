//go:build cluster

package cluster_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	wgpolicyv1alpha2 "sigs.k8s.io/wg-policy-prototypes/policy-report/pkg/api/wgpolicyk8s.io/v1alpha2"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/policybuild"
)

// Policy Reporter (github.com/kyverno/policy-reporter) cannot be built
// here: the Go module proxy serves no version of it (docs/monitoring.md).
// TestPolicyReporterView checks instead that the reports the audit scanner
// writes are what Policy Reporter reads, as its source code reads them:
//
//   - it watches the reports' metadata only, then gets each report: the
//     four kinds must be listed as metadata (PartialObjectMetadata);
//   - it decodes them into the CRDs' Go types (its own copy of the
//     wgpolicyk8s.io types, the openreports.io types), and turns a
//     PolicyReport into an OpenReports Report: both kinds must say the
//     same;
//   - a report's source is its first result's: every result must say
//     kubewarden, the source Policy Reporter groups and filters by (an
//     OpenReports Report's own source, when set, must say it too);
//   - a result without resources gets the report's scope: the scope must
//     name the audited object (apiVersion, kind, namespace, name, uid);
//   - a result's identity is a hash of the scope's name and uid and the
//     result's policy, rule, result, category and message (unless the
//     property resultID is set): two results with the same identity in one
//     report would show as one, so each must differ;
//   - an empty category shows as "Other"; severities rank info, low,
//     medium, high, critical, and any other value is unknown to it; a
//     result is pass, fail, warn, error or skip;
//   - the summary is shown beside the results: it must count them.
func TestPolicyReporterView(t *testing.T) {
	cl := startAuditCluster(t)
	c := cl.Client
	kubeconfig := writeKubeconfig(t, cl.Config)

	shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"forbidden": "yes"}}}
	mustCreate(t, c, shop)
	good := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "good"}}
	bad := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "bad", Labels: map[string]string{"forbidden": "yes"}}}
	mustCreate(t, c, good)
	mustCreate(t, c, bad)

	// Four policies: one with a severity and a category, one in monitor
	// mode (its severity becomes info), one with neither annotation, and
	// one of a cluster-wide kind, Namespaces.
	active := policiesv1.PolicyStatusActive
	annotated := func(o client.Object, annotations map[string]string) client.Object {
		o.SetAnnotations(annotations)
		return o
	}
	createPolicy(t, c, annotated(auditPolicy("", "deny-forbidden", []string{"configmaps"}, nil),
		map[string]string{policiesv1.AnnotationSeverity: "high", policiesv1.AnnotationCategory: "Labels"}), active)
	createPolicy(t, c, annotated(auditPolicy("", "watch-forbidden", []string{"configmaps"}, func(s *policiesv1.PolicySpec) {
		s.Mode = policiesv1.PolicyModeMonitor
	}), map[string]string{policiesv1.AnnotationSeverity: "critical", policiesv1.AnnotationCategory: "Labels"}), active)
	createPolicy(t, c, auditPolicy("", "plain", []string{"configmaps"}, nil), active)
	createPolicy(t, c, annotated(auditPolicy("", "deny-ns", []string{"namespaces"}, nil),
		map[string]string{policiesv1.AnnotationSeverity: "medium", policiesv1.AnnotationCategory: "Namespaces"}), active)

	module := policybuild.ForTest(t, "labels")
	doc := ""
	for _, p := range []struct{ id, denied string }{
		{"clusterwide-deny-forbidden", "forbidden"}, {"clusterwide-watch-forbidden", "forbidden"},
		{"clusterwide-plain", "nothing"}, {"clusterwide-deny-ns", "forbidden"},
	} {
		doc += fmt.Sprintf("%s:\n  module: file://%s\n  settings:\n    denied_labels: [%q]\n", p.id, module, p.denied)
	}
	m := newAuditTLS(t)
	url := startAuditPolicyServer(t, doc, m)
	eventually(t, "the watch cache holds the namespaces", func() bool {
		var list corev1.NamespaceList
		err := c.List(t.Context(), &list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
		return err == nil && slices.ContainsFunc(list.Items, func(ns corev1.Namespace) bool { return ns.Name == "shop" })
	})
	base := []string{"-u", url, "-f", m.caFile, "--client-cert", m.clientCert, "--client-key", m.clientKey, "-i", "kube-system"}

	denied := "label forbidden is denied"
	want := map[client.Object][]reporterResult{
		good: {
			{policy: "clusterwide-deny-forbidden", result: "pass", severity: "high", category: "Labels"},
			{policy: "clusterwide-plain", result: "pass", category: "Other"},
			{policy: "clusterwide-watch-forbidden", result: "pass", severity: "info", category: "Labels"},
		},
		bad: {
			{policy: "clusterwide-deny-forbidden", result: "fail", severity: "high", category: "Labels", message: denied},
			{policy: "clusterwide-plain", result: "pass", category: "Other"},
			{policy: "clusterwide-watch-forbidden", result: "fail", severity: "info", category: "Labels", message: denied},
		},
		shop: {
			{policy: "clusterwide-deny-ns", result: "fail", severity: "medium", category: "Namespaces", message: denied},
		},
	}

	views := map[string]map[string]reporterReport{}
	for _, kind := range []struct {
		name string
		args []string
		list func(t *testing.T) map[string]reporterReport
	}{
		{"policyreports", base, func(t *testing.T) map[string]reporterReport { return policyReportsView(t, c) }},
		{"openreports", append([]string{"--report-kind", "openreports"}, base...), func(t *testing.T) map[string]reporterReport { return openReportsView(t, c) }},
	} {
		t.Run(kind.name, func(t *testing.T) {
			if s := runAudit(t, kubeconfig, kind.args...); s.code != 0 {
				t.Fatalf("audit scanner: exit %d\n%s", s.code, s.logs)
			}
			checkReportMetadata(t, c, kind.name)
			view := kind.list(t)
			views[kind.name] = view
			for obj, results := range want {
				key := string(obj.GetUID())
				if obj.GetNamespace() != "" {
					key = obj.GetNamespace() + "/" + key
				}
				checkReporterReport(t, view[key], obj, results)
			}
		})
	}
	if len(views) == 2 {
		pr, or := views["policyreports"], views["openreports"]
		for _, key := range slices.Sorted(maps.Keys(pr)) {
			if !pr[key].equal(or[key]) {
				t.Errorf("report %s: the PolicyReport and the OpenReports Report differ in what Policy Reporter reads:\n%+v\n%+v", key, pr[key], or[key])
			}
		}
		if len(pr) != len(or) {
			t.Errorf("%d PolicyReports, %d OpenReports Reports", len(pr), len(or))
		}
	}
}

// reporterReport is what Policy Reporter reads of a report, whatever its
// kind.
type reporterReport struct {
	source  string // of the report itself (OpenReports only): "" defers to the results'
	labels  map[string]string
	scope   *corev1.ObjectReference
	summary map[string]int
	results []reporterResult
}

// reporterResult is what Policy Reporter reads of a result. category is
// "Other" when the result has none, as Policy Reporter shows it.
type reporterResult struct {
	source, policy, rule, result, severity, category, message string
	resources                                                 int
	timestamp                                                 int64
	properties                                                map[string]string
}

// equal compares two reports but for what each run of the scanner sets
// anew: the run's label and the results' timestamps.
func (r reporterReport) equal(o reporterReport) bool {
	labels := func(l map[string]string) map[string]string {
		out := maps.Clone(l)
		delete(out, "kubewarden.io/audit-scanner-run-uid")
		return out
	}
	strip := func(rs []reporterResult) []reporterResult {
		out := slices.Clone(rs)
		for i := range out {
			out[i].timestamp = 0
		}
		return out
	}
	return r.source == o.source && maps.Equal(labels(r.labels), labels(o.labels)) && reflect.DeepEqual(r.scope, o.scope) && maps.Equal(r.summary, o.summary) &&
		slices.EqualFunc(strip(r.results), strip(o.results), func(a, b reporterResult) bool {
			return a.source == b.source && a.policy == b.policy && a.rule == b.rule && a.result == b.result &&
				a.severity == b.severity && a.category == b.category && a.message == b.message &&
				a.resources == b.resources && maps.Equal(a.properties, b.properties)
		})
}

// identity is what Policy Reporter hashes into a result's id.
func (r reporterResult) identity(scope *corev1.ObjectReference) string {
	if id, ok := r.properties["resultID"]; ok {
		return id
	}
	return strings.Join([]string{scope.Name, string(scope.UID), r.policy, r.rule, r.result, r.category, r.message}, "\x00")
}

// orOther is the category as Policy Reporter shows it.
func orOther(category string) string {
	if category == "" {
		return "Other"
	}
	return category
}

// policyReportsView reads the PolicyReports and ClusterPolicyReports with
// their Go types, by namespace/name (name for the cluster-wide ones), and
// turns their results into OpenReports results, as Policy Reporter turns a
// PolicyReport into an OpenReports Report (the two kinds' results have the
// same fields, under the same JSON names).
func policyReportsView(t *testing.T, c client.Client) map[string]reporterReport {
	t.Helper()
	out := map[string]reporterReport{}
	add := func(meta metav1.ObjectMeta, scope *corev1.ObjectReference, summary wgpolicyv1alpha2.PolicyReportSummary, results []*wgpolicyv1alpha2.PolicyReportResult) {
		var converted []openreportsv1alpha1.ReportResult
		raw, err := json.Marshal(results)
		if err == nil {
			err = json.Unmarshal(raw, &converted)
		}
		if err != nil {
			t.Fatalf("report %s: %v", keyOf(meta), err)
		}
		out[keyOf(meta)] = newReporterReport(meta, "", scope, openreportsv1alpha1.ReportSummary(summary), converted)
	}
	var namespaced wgpolicyv1alpha2.PolicyReportList
	if err := c.List(t.Context(), &namespaced); err != nil {
		t.Fatal(err)
	}
	for _, r := range namespaced.Items {
		add(r.ObjectMeta, r.Scope, r.Summary, r.Results)
	}
	var cluster wgpolicyv1alpha2.ClusterPolicyReportList
	if err := c.List(t.Context(), &cluster); err != nil {
		t.Fatal(err)
	}
	for _, r := range cluster.Items {
		add(r.ObjectMeta, r.Scope, r.Summary, r.Results)
	}
	return out
}

// openReportsView reads the Reports and ClusterReports with their Go
// types, as policyReportsView does.
func openReportsView(t *testing.T, c client.Client) map[string]reporterReport {
	t.Helper()
	out := map[string]reporterReport{}
	var namespaced openreportsv1alpha1.ReportList
	if err := c.List(t.Context(), &namespaced); err != nil {
		t.Fatal(err)
	}
	for _, r := range namespaced.Items {
		out[keyOf(r.ObjectMeta)] = newReporterReport(r.ObjectMeta, r.Source, r.Scope, r.Summary, r.Results)
	}
	var cluster openreportsv1alpha1.ClusterReportList
	if err := c.List(t.Context(), &cluster); err != nil {
		t.Fatal(err)
	}
	for _, r := range cluster.Items {
		out[keyOf(r.ObjectMeta)] = newReporterReport(r.ObjectMeta, r.Source, r.Scope, r.Summary, r.Results)
	}
	return out
}

// newReporterReport is what Policy Reporter reads of a report.
func newReporterReport(meta metav1.ObjectMeta, source string, scope *corev1.ObjectReference, summary openreportsv1alpha1.ReportSummary,
	results []openreportsv1alpha1.ReportResult) reporterReport {
	r := reporterReport{source: source, labels: meta.Labels, scope: scope, summary: map[string]int{
		"pass": summary.Pass, "fail": summary.Fail, "warn": summary.Warn, "error": summary.Error, "skip": summary.Skip,
	}}
	for _, res := range results {
		r.results = append(r.results, reporterResult{
			source: res.Source, policy: res.Policy, rule: res.Rule, result: string(res.Result), severity: string(res.Severity),
			category: orOther(res.Category), message: res.Description, resources: len(res.Subjects),
			timestamp: res.Timestamp.Seconds, properties: res.Properties,
		})
	}
	return r
}

func keyOf(meta metav1.ObjectMeta) string {
	if meta.Namespace == "" {
		return meta.Name
	}
	return meta.Namespace + "/" + meta.Name
}

// checkReportMetadata checks that the reports of kind (policyreports or
// openreports) are listed as metadata only, as Policy Reporter's informers
// list them, and carry Kubewarden's label.
func checkReportMetadata(t *testing.T, c client.Client, kind string) {
	t.Helper()
	gvks := map[string][]schema.GroupVersionKind{
		"policyreports": {
			wgpolicyv1alpha2.SchemeGroupVersion.WithKind("PolicyReportList"),
			wgpolicyv1alpha2.SchemeGroupVersion.WithKind("ClusterPolicyReportList"),
		},
		"openreports": {
			openreportsv1alpha1.SchemeGroupVersion.WithKind("ReportList"),
			openreportsv1alpha1.SchemeGroupVersion.WithKind("ClusterReportList"),
		},
	}[kind]
	for _, gvk := range gvks {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk)
		if err := c.List(t.Context(), list); err != nil {
			t.Errorf("listing %s as metadata: %v", gvk.Kind, err)
			continue
		}
		if len(list.Items) == 0 {
			t.Errorf("no %s", gvk.Kind)
		}
		for _, item := range list.Items {
			if got := item.Labels["app.kubernetes.io/managed-by"]; got != "kubewarden" {
				t.Errorf("%s %s/%s: app.kubernetes.io/managed-by %q, want kubewarden", gvk.Kind, item.Namespace, item.Name, got)
			}
		}
	}
}

// checkReporterReport checks the report of obj as Policy Reporter reads
// it: source, scope, identities, severities, results and summary, and the
// results want (category as Policy Reporter shows it).
func checkReporterReport(t *testing.T, r reporterReport, obj client.Object, want []reporterResult) {
	t.Helper()
	where := fmt.Sprintf("report of %s/%s", obj.GetNamespace(), obj.GetName())
	if r.scope == nil {
		t.Errorf("%s: missing, or no scope", where)
		return
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Empty() {
		switch obj.(type) {
		case *corev1.Namespace:
			gvk = corev1.SchemeGroupVersion.WithKind("Namespace")
		case *corev1.ConfigMap:
			gvk = corev1.SchemeGroupVersion.WithKind("ConfigMap")
		}
	}
	if s := r.scope; s.APIVersion != gvk.GroupVersion().String() || s.Kind != gvk.Kind || s.Namespace != obj.GetNamespace() ||
		s.Name != obj.GetName() || s.UID != obj.GetUID() {
		t.Errorf("%s: scope %+v, want the object (%s %s)", where, *s, gvk, obj.GetUID())
	}
	if r.source != "" && r.source != "kubewarden" {
		t.Errorf("%s: source %q, want kubewarden or none (the results')", where, r.source)
	}
	severities := []string{"", "info", "low", "medium", "high", "critical"}
	statuses := []string{"pass", "fail", "warn", "error", "skip"}
	ids := map[string]string{}
	counted := map[string]int{}
	for _, res := range r.results {
		if res.source != "kubewarden" {
			t.Errorf("%s: result of %s has source %q, want kubewarden", where, res.policy, res.source)
		}
		if !slices.Contains(severities, res.severity) {
			t.Errorf("%s: result of %s has severity %q, which Policy Reporter does not rank", where, res.policy, res.severity)
		}
		if !slices.Contains(statuses, res.result) {
			t.Errorf("%s: result of %s is %q, not a result Policy Reporter knows", where, res.policy, res.result)
		}
		if res.resources != 0 {
			t.Errorf("%s: result of %s names %d resources: Policy Reporter would show them instead of the scope", where, res.policy, res.resources)
		}
		if res.timestamp <= 0 {
			t.Errorf("%s: result of %s has no timestamp", where, res.policy)
		}
		id := res.identity(r.scope)
		if other, dup := ids[id]; dup {
			t.Errorf("%s: the results of %s and %s have the same identity: Policy Reporter would show one", where, other, res.policy)
		}
		ids[id] = res.policy
		counted[res.result]++
	}
	for _, status := range statuses {
		if r.summary[status] != counted[status] {
			t.Errorf("%s: summary %v, but the results count %v", where, r.summary, counted)
			break
		}
	}
	var got []reporterResult
	for _, res := range r.results {
		got = append(got, reporterResult{policy: res.policy, result: res.result, severity: res.severity, category: res.category, message: res.message})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: results\n%+v\nwant\n%+v", where, got, want)
	}
}
