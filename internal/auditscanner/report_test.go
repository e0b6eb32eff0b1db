package auditscanner

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

func pod(namespace, name string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("Pod")
	obj.SetNamespace(namespace)
	obj.SetName(name)
	obj.SetUID(types.UID("uid-" + name))
	obj.SetResourceVersion("42")
	return obj
}

func namespaceObject(name string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("Namespace")
	obj.SetName(name)
	obj.SetUID(types.UID("uid-" + name))
	obj.SetResourceVersion("7")
	return obj
}

func audited(p policiesv1.Policy) *auditPolicy {
	return newWardenAuditPolicy(p, "", nil)
}

// TestNewReport checks every field of a report against Kubewarden's
// (docs/compatibility.md#audit-scanner).
func TestNewReport(t *testing.T) {
	monitor := clusterPolicy("monitored")
	monitor.Spec.Mode = policiesv1.PolicyModeMonitor
	monitor.Annotations = map[string]string{policiesv1.AnnotationSeverity: "high"}
	monitor.UID, monitor.ResourceVersion = "uid-monitored", "11"
	severe := clusterPolicy("severe")
	severe.Annotations = map[string]string{policiesv1.AnnotationSeverity: "critical", policiesv1.AnnotationCategory: "PSP"}
	severe.Spec.Mutating = true
	severe.Spec.ContextAwareResources = []policiesv1.ContextAwareResource{{APIVersion: "v1", Kind: "Namespace"}}
	severe.UID, severe.ResourceVersion = "uid-severe", "12"
	local := namespacedPolicy("team-a", "local")
	local.UID, local.ResourceVersion = "uid-local", "13"
	broken := clusterPolicy("broken")
	broken.UID, broken.ResourceVersion = "uid-broken", "14"

	evals := []evaluation{
		{policy: audited(severe), verdict: verdict{allowed: false, message: "no way"}},
		{policy: audited(monitor), verdict: verdict{allowed: true}},
		{policy: audited(local), verdict: verdict{allowed: true, message: "fine"}},
		{policy: audited(broken), verdict: verdict{errored: true, unavailable: true, message: "policy server unreachable: refused"}},
	}
	r := newReport(pod("team-a", "web"), "run-1", 2, 3, evals, 1700000000)

	if r.namespace != "team-a" || r.name != "uid-web" {
		t.Errorf("report %s/%s, want team-a/uid-web", r.namespace, r.name)
	}
	wantLabels := map[string]string{
		"app.kubernetes.io/managed-by":        "kubewarden",
		"kubewarden.io/policyreport-version":  "v2",
		"kubewarden.io/audit-scanner-run-uid": "run-1",
	}
	if !reflect.DeepEqual(r.labels, wantLabels) {
		t.Errorf("labels %v, want %v", r.labels, wantLabels)
	}
	if want := (metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "uid-web"}); !reflect.DeepEqual(r.owner, want) {
		t.Errorf("owner %+v, want %+v", r.owner, want)
	}
	if r.scope.APIVersion != "v1" || r.scope.Kind != "Pod" || r.scope.Namespace != "team-a" || r.scope.Name != "web" ||
		r.scope.UID != "uid-web" || r.scope.ResourceVersion != "42" || r.scope.FieldPath != "" {
		t.Errorf("scope %+v", r.scope)
	}
	// skip and error start at the skipped and errored policies.
	if want := (summary{pass: 2, fail: 1, warn: 0, errors: 3 + 1, skip: 2}); r.summary != want {
		t.Errorf("summary %+v, want %+v", r.summary, want)
	}
	want := []result{
		{policy: "clusterwide-broken", result: "error", message: "policy server unreachable: refused", timestamp: 1700000000,
			properties: map[string]string{"validating": "true", "policy-resource-version": "14", "policy-uid": "uid-broken", "policy-name": "broken"}},
		{policy: "clusterwide-monitored", severity: "info", result: "pass", timestamp: 1700000000,
			properties: map[string]string{"validating": "true", "policy-resource-version": "11", "policy-uid": "uid-monitored", "policy-name": "monitored"}},
		{policy: "clusterwide-severe", category: "PSP", severity: "critical", result: "fail", message: "no way", timestamp: 1700000000,
			properties: map[string]string{"mutating": "true", "context-aware": "true", "policy-resource-version": "12", "policy-uid": "uid-severe", "policy-name": "severe"}},
		{policy: "namespaced-team-a-local", result: "pass", message: "fine", timestamp: 1700000000,
			properties: map[string]string{"validating": "true", "policy-resource-version": "13", "policy-uid": "uid-local", "policy-name": "local", "policy-namespace": "team-a"}},
	}
	if !reflect.DeepEqual(r.results, want) {
		t.Errorf("results\n%+v\nwant\n%+v", r.results, want)
	}
}

// TestReportObjects checks the JSON of each of the four report kinds.
func TestReportObjects(t *testing.T) {
	p := clusterPolicy("p")
	p.UID, p.ResourceVersion = "uid-p", "5"
	evals := []evaluation{{policy: audited(p), verdict: verdict{allowed: false, message: "denied"}}}
	tests := []struct {
		name        string
		openReports bool
		obj         *unstructured.Unstructured
		apiVersion  string
		kind        string
	}{
		{"Report", true, pod("team-a", "web"), "openreports.io/v1alpha1", "Report"},
		{"ClusterReport", true, namespaceObject("team-a"), "openreports.io/v1alpha1", "ClusterReport"},
		{"PolicyReport", false, pod("team-a", "web"), "wgpolicyk8s.io/v1alpha2", "PolicyReport"},
		{"ClusterPolicyReport", false, namespaceObject("team-a"), "wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReport(tt.obj, "run-1", 0, 0, evals, 1700000000)
			b, err := json.Marshal(reportKind{openReports: tt.openReports}.object(r))
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			if doc["apiVersion"] != tt.apiVersion || doc["kind"] != tt.kind {
				t.Errorf("%v %v, want %s %s", doc["apiVersion"], doc["kind"], tt.apiVersion, tt.kind)
			}
			md := doc["metadata"].(map[string]any)
			if md["name"] != string(tt.obj.GetUID()) || md["namespace"] != nilIfEmpty(tt.obj.GetNamespace()) {
				t.Errorf("metadata %v", md)
			}
			wantResult := map[string]any{
				"source": "kubewarden", "policy": "clusterwide-p", "result": "fail", "scored": true, "message": "denied",
				"timestamp": map[string]any{"seconds": float64(1700000000), "nanos": float64(0)}, "resourceSelector": map[string]any{},
				"properties": map[string]any{"validating": "true", "policy-resource-version": "5", "policy-uid": "uid-p", "policy-name": "p"},
			}
			results := doc["results"].([]any)
			if len(results) != 1 || !reflect.DeepEqual(results[0], wantResult) {
				t.Errorf("results %v\nwant [%v]", results, wantResult)
			}
			wantSummary := map[string]any{"pass": float64(0), "fail": float64(1), "warn": float64(0), "error": float64(0), "skip": float64(0)}
			if !reflect.DeepEqual(doc["summary"], wantSummary) {
				t.Errorf("summary %v, want %v", doc["summary"], wantSummary)
			}
		})
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func TestDigest(t *testing.T) {
	p := clusterPolicy("p")
	kind := reportKind{openReports: true}
	base := func(runUID string, now int64, allowed bool) *report {
		return newReport(pod("team-a", "web"), runUID, 0, 0, []evaluation{{policy: audited(p), verdict: verdict{allowed: allowed}}}, now)
	}
	d := func(r *report) digest {
		t.Helper()
		got, err := digestOf(kind.object(r))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	ref := d(base("run-1", 1, true))
	if d(base("run-2", 2, true)) != ref {
		t.Error("the run-uid and the timestamps change the digest")
	}
	foreign := base("run-1", 1, true)
	foreign.labels["someone.else/label"] = "x"
	if d(foreign) != ref {
		t.Error("a label of someone else changes the digest")
	}
	if d(base("run-1", 1, false)) == ref {
		t.Error("a result that changed does not change the digest")
	}
	moved := base("run-1", 1, true)
	moved.scope.ResourceVersion = "43"
	if d(moved) == ref {
		t.Error("a new resourceVersion of the object does not change the digest")
	}
	if d(newReport(pod("team-a", "web"), "run-1", 0, 0, nil, 1)) == ref {
		t.Error("a report without results has the digest of one with")
	}
}

func TestFullPatch(t *testing.T) {
	for _, openReports := range []bool{true, false} {
		obj := reportKind{openReports: openReports}.object(newReport(pod("team-a", "web"), "run-1", 1, 0, nil, 1))
		b, err := fullPatch(obj)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		// Only what the scanner writes: no name, namespace, apiVersion or
		// kind, results removed when there are none, and the inputs
		// annotation removed when the report has none.
		md, _ := doc["metadata"].(map[string]any)
		annotations, _ := md["annotations"].(map[string]any)
		if len(md) != 3 || md["labels"] == nil || md["ownerReferences"] == nil ||
			len(annotations) != 1 || annotations[AnnotationInputs] != nil {
			t.Errorf("metadata of the patch %v", md)
		}
		obj.SetAnnotations(map[string]string{AnnotationInputs: "abc"})
		if b, err = fullPatch(obj); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"annotations":{"`+AnnotationInputs+`":"abc"}`) {
			t.Errorf("patch of a report with inputs %s", b)
		}
		if r, ok := doc["results"]; !ok || r != nil {
			t.Errorf("results of the patch %v, want null", r)
		}
		if doc["apiVersion"] != nil || doc["kind"] != nil || doc["summary"] == nil || doc["scope"] == nil {
			t.Errorf("patch %s", b)
		}
	}
}

// A severity the reports' schemas do not allow is left out, so that the
// API server still takes the report.
func TestReportSeverity(t *testing.T) {
	for in, want := range map[string]string{
		"critical": "critical", "high": "high", "medium": "medium", "low": "low", "info": "info",
		"": "", "Critical": "", "severe": "", "5": "",
	} {
		if got := reportSeverity(in); got != want {
			t.Errorf("reportSeverity(%q) = %q, want %q", in, got, want)
		}
	}
}
