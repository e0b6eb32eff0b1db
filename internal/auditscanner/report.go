package auditscanner

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	wgpolicyv1alpha2 "sigs.k8s.io/wg-policy-prototypes/policy-report/pkg/api/wgpolicyk8s.io/v1alpha2"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// Labels of every report (docs/compatibility.md#audit-scanner).
const (
	// LabelManagedBy is set to LabelManagedByValue on every report; the
	// cleanup deletes only reports labelled so.
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	LabelManagedByValue = "kubewarden"
	// LabelReportVersion is set to LabelReportVersionValue on every report.
	LabelReportVersion      = "kubewarden.io/policyreport-version"
	LabelReportVersionValue = "v2"
	// LabelRunUID is set to the UUID of the run that last wrote or checked
	// the report.
	LabelRunUID = "kubewarden.io/audit-scanner-run-uid"
)

// Values inside reports (docs/compatibility.md#audit-scanner).
const (
	resultSource            = "kubewarden"
	propertyMutating        = "mutating"
	propertyValidating      = "validating"
	propertyContextAware    = "context-aware"
	propertyPolicyRV        = "policy-resource-version"
	propertyPolicyUID       = "policy-uid"
	propertyPolicyName      = "policy-name"
	propertyPolicyNamespace = "policy-namespace"
	propertyTrue            = "true"
	severityInfo            = "info"
	resultPass              = "pass"
	resultFail              = "fail"
	resultWarn              = "warn"
	resultError             = "error"

	reportKindReport              = "Report"
	reportKindClusterReport       = "ClusterReport"
	reportKindPolicyReport        = "PolicyReport"
	reportKindClusterPolicyReport = "ClusterPolicyReport"
)

// report is the report of one object, in neither kind yet.
type report struct {
	// namespace is the object's namespace, empty for a cluster-wide one.
	namespace string
	// name is the object's UID.
	name    string
	labels  map[string]string
	owner   metav1.OwnerReference
	scope   corev1.ObjectReference
	summary summary
	// results are sorted by policy.
	results []result
}

type summary struct {
	pass, fail, warn, errors, skip int
}

type result struct {
	policy, category, severity, result, message string
	timestamp                                   int64
	properties                                  map[string]string
}

// evaluation is a policy's verdict about the object of a report.
type evaluation struct {
	policy *auditPolicy
	verdict
}

// newReport returns the report of obj (docs/compatibility.md#audit-scanner):
// named after its UID, in its namespace, owned by it, with the run's labels,
// the summary's skip and error starting at the scope's skipped and errored
// policies, and one result per evaluation, at time now (seconds).
func newReport(obj *unstructured.Unstructured, runUID string, skipped, errored int, evals []evaluation, now int64) *report {
	r := &report{
		namespace: obj.GetNamespace(),
		name:      string(obj.GetUID()),
		labels: map[string]string{
			LabelManagedBy:     LabelManagedByValue,
			LabelReportVersion: LabelReportVersionValue,
			LabelRunUID:        runUID,
		},
		owner: metav1.OwnerReference{
			APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Name: obj.GetName(), UID: obj.GetUID(),
		},
		scope: corev1.ObjectReference{
			APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(),
			Name: obj.GetName(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
		},
		summary: summary{errors: errored, skip: skipped},
	}
	for _, e := range evals {
		res := newResult(e, now)
		switch res.result {
		case resultPass:
			r.summary.pass++
		case resultFail:
			r.summary.fail++
		case resultWarn:
			r.summary.warn++
		case resultError:
			r.summary.errors++
		}
		r.results = append(r.results, res)
	}
	// Stable: the results of one ValidatingAdmissionPolicy binding keep
	// the order of its validations.
	slices.SortStableFunc(r.results, func(a, b result) int { return strings.Compare(a.policy, b.policy) })
	return r
}

// newResult returns the result of one evaluation
// (docs/compatibility.md#audit-scanner).
func newResult(e evaluation, now int64) result {
	m := e.policy.meta
	res := result{policy: e.policy.name, category: m.category, severity: m.severity, message: e.message, timestamp: now, properties: m.properties}
	switch {
	case e.errored:
		res.result = resultError
	case e.warned:
		res.result = resultWarn
	case e.allowed:
		res.result = resultPass
	default:
		res.result = resultFail
	}
	return res
}

// properties are the properties of a policy's results
// (docs/compatibility.md#audit-scanner).
func properties(p policiesv1.Policy) map[string]string {
	props := map[string]string{
		propertyPolicyRV:   p.GetResourceVersion(),
		propertyPolicyUID:  string(p.GetUID()),
		propertyPolicyName: p.GetName(),
	}
	if p.IsMutating() {
		props[propertyMutating] = propertyTrue
	} else {
		props[propertyValidating] = propertyTrue
	}
	if p.IsContextAware() {
		props[propertyContextAware] = propertyTrue
	}
	if ns := p.GetNamespace(); ns != "" {
		props[propertyPolicyNamespace] = ns
	}
	return props
}

// reportKind is the kind of reports a run writes.
type reportKind struct {
	// openReports: openreports.io/v1alpha1 Report and ClusterReport;
	// otherwise wgpolicyk8s.io/v1alpha2 PolicyReport and ClusterPolicyReport.
	openReports bool
}

// String names the kind's namespaced report.
func (k reportKind) String() string {
	if k.openReports {
		return openreportsv1alpha1.SchemeGroupVersion.WithKind(reportKindReport).String()
	}
	return wgpolicyv1alpha2.SchemeGroupVersion.WithKind(reportKindPolicyReport).String()
}

// object returns r as an API object of the kind, TypeMeta included.
func (k reportKind) object(r *report) client.Object {
	meta := metav1.ObjectMeta{
		Name: r.name, Namespace: r.namespace, Labels: r.labels,
		OwnerReferences: []metav1.OwnerReference{r.owner},
	}
	scope := r.scope
	if k.openReports {
		sum := openreportsv1alpha1.ReportSummary{Pass: r.summary.pass, Fail: r.summary.fail, Warn: r.summary.warn, Error: r.summary.errors, Skip: r.summary.skip}
		var results []openreportsv1alpha1.ReportResult
		for _, res := range r.results {
			results = append(results, openreportsv1alpha1.ReportResult{
				Source: resultSource, Policy: res.policy, Category: res.category,
				Severity: openreportsv1alpha1.ResultSeverity(res.severity), Timestamp: metav1.Timestamp{Seconds: res.timestamp},
				Result: openreportsv1alpha1.Result(res.result), Scored: true, ResourceSelector: &metav1.LabelSelector{},
				Description: res.message, Properties: res.properties,
			})
		}
		if r.namespace == "" {
			return &openreportsv1alpha1.ClusterReport{
				TypeMeta:   metav1.TypeMeta{APIVersion: openreportsv1alpha1.SchemeGroupVersion.String(), Kind: reportKindClusterReport},
				ObjectMeta: meta, Scope: &scope, Summary: sum, Results: results,
			}
		}
		return &openreportsv1alpha1.Report{
			TypeMeta:   metav1.TypeMeta{APIVersion: openreportsv1alpha1.SchemeGroupVersion.String(), Kind: reportKindReport},
			ObjectMeta: meta, Scope: &scope, Summary: sum, Results: results,
		}
	}
	sum := wgpolicyv1alpha2.PolicyReportSummary{Pass: r.summary.pass, Fail: r.summary.fail, Warn: r.summary.warn, Error: r.summary.errors, Skip: r.summary.skip}
	var results []*wgpolicyv1alpha2.PolicyReportResult
	for _, res := range r.results {
		results = append(results, &wgpolicyv1alpha2.PolicyReportResult{
			Source: resultSource, Policy: res.policy, Category: res.category,
			Severity: wgpolicyv1alpha2.PolicyResultSeverity(res.severity), Timestamp: metav1.Timestamp{Seconds: res.timestamp},
			Result: wgpolicyv1alpha2.PolicyResult(res.result), Scored: true, SubjectSelector: &metav1.LabelSelector{},
			Description: res.message, Properties: res.properties,
		})
	}
	if r.namespace == "" {
		return &wgpolicyv1alpha2.ClusterPolicyReport{
			TypeMeta:   metav1.TypeMeta{APIVersion: wgpolicyv1alpha2.SchemeGroupVersion.String(), Kind: reportKindClusterPolicyReport},
			ObjectMeta: meta, Scope: &scope, Summary: sum, Results: results,
		}
	}
	return &wgpolicyv1alpha2.PolicyReport{
		TypeMeta:   metav1.TypeMeta{APIVersion: wgpolicyv1alpha2.SchemeGroupVersion.String(), Kind: reportKindPolicyReport},
		ObjectMeta: meta, Scope: &scope, Summary: sum, Results: results,
	}
}

// empty returns an empty report of the kind, cluster-wide or namespaced,
// for requests that need only its type.
func (k reportKind) empty(cluster bool) client.Object {
	switch {
	case k.openReports && cluster:
		return &openreportsv1alpha1.ClusterReport{}
	case k.openReports:
		return &openreportsv1alpha1.Report{}
	case cluster:
		return &wgpolicyv1alpha2.ClusterPolicyReport{}
	default:
		return &wgpolicyv1alpha2.PolicyReport{}
	}
}

// gvk returns the group, version and kind of the kind's reports,
// cluster-wide or namespaced.
func (k reportKind) gvk(cluster bool) schema.GroupVersionKind {
	switch {
	case k.openReports && cluster:
		return openreportsv1alpha1.SchemeGroupVersion.WithKind(reportKindClusterReport)
	case k.openReports:
		return openreportsv1alpha1.SchemeGroupVersion.WithKind(reportKindReport)
	case cluster:
		return wgpolicyv1alpha2.SchemeGroupVersion.WithKind(reportKindClusterPolicyReport)
	default:
		return wgpolicyv1alpha2.SchemeGroupVersion.WithKind(reportKindPolicyReport)
	}
}

// list returns an empty list of the kind's reports.
func (k reportKind) list(cluster bool) client.ObjectList {
	switch {
	case k.openReports && cluster:
		return &openreportsv1alpha1.ClusterReportList{}
	case k.openReports:
		return &openreportsv1alpha1.ReportList{}
	case cluster:
		return &wgpolicyv1alpha2.ClusterPolicyReportList{}
	default:
		return &wgpolicyv1alpha2.PolicyReportList{}
	}
}

// items returns the reports of a list made by list.
func (k reportKind) items(l client.ObjectList) []client.Object {
	objs, err := apimeta.ExtractList(l)
	if err != nil {
		return nil // not a list: list makes only the four report lists
	}
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		if co, ok := o.(client.Object); ok {
			out = append(out, co)
		}
	}
	return out
}

// digest is what a report says, timestamps, the run-uid and any metadata
// but the scanner's labels and the owner aside: two reports with the same
// digest differ only in when their results were computed and by which run.
type digest [sha256.Size]byte

// digestOf returns the digest of a report object of either kind, as built
// by reportKind.object or as read from the API server.
func digestOf(obj client.Object) (digest, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return digest{}, fmt.Errorf("encoding report %s: %w", obj.GetName(), err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return digest{}, fmt.Errorf("decoding report %s: %w", obj.GetName(), err)
	}
	delete(doc, "apiVersion")
	delete(doc, "kind")
	own := map[string]any{}
	for _, k := range []string{LabelManagedBy, LabelReportVersion} {
		if v, ok := obj.GetLabels()[k]; ok {
			own[k] = v
		}
	}
	doc["metadata"] = map[string]any{"labels": own, "ownerReferences": obj.GetOwnerReferences()}
	results, _ := doc["results"].([]any)
	for _, res := range results {
		if m, ok := res.(map[string]any); ok {
			delete(m, "timestamp")
		}
	}
	slices.SortStableFunc(results, func(a, b any) int { return strings.Compare(policyOf(a), policyOf(b)) })
	canonical, err := json.Marshal(doc)
	if err != nil {
		return digest{}, fmt.Errorf("encoding report %s: %w", obj.GetName(), err)
	}
	return sha256.Sum256(canonical), nil
}

// policyOf returns the policy of a decoded result.
func policyOf(res any) string {
	m, _ := res.(map[string]any)
	p, _ := m["policy"].(string)
	return p
}
