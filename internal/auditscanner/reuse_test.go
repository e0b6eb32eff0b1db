package auditscanner

import (
	"testing"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	wgpolicyv1alpha2 "sigs.k8s.io/wg-policy-prototypes/policy-report/pkg/api/wgpolicyk8s.io/v1alpha2"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// TestInputsDigest checks that every input of a report's results changes
// its inputs digest, and that the order of the policies does not.
func TestInputsDigest(t *testing.T) {
	a, b := clusterPolicy("a"), clusterPolicy("b")
	a.UID, a.ResourceVersion = "uid-a", "1"
	b.UID, b.ResourceVersion = "uid-b", "2"
	pols := []*auditPolicy{audited(a), audited(b)}
	content := digest{1}
	base := inputsDigest(pod("team-a", "web"), pols, 1, 2, content)
	if got := inputsDigest(pod("team-a", "web"), []*auditPolicy{audited(b), audited(a)}, 1, 2, content); got != base {
		t.Errorf("the order of the policies changed the digest")
	}
	changed := func(name string, f func(*testing.T) string) {
		t.Run(name, func(t *testing.T) {
			if f(t) == base {
				t.Errorf("%s did not change the digest", name)
			}
		})
	}
	changed("the object's resourceVersion", func(*testing.T) string {
		o := pod("team-a", "web")
		o.SetResourceVersion("43")
		return inputsDigest(o, pols, 1, 2, content)
	})
	changed("the object's uid", func(*testing.T) string {
		o := pod("team-a", "web")
		o.SetUID("other")
		return inputsDigest(o, pols, 1, 2, content)
	})
	changed("the object's kind", func(*testing.T) string {
		o := pod("team-a", "web")
		o.SetKind("Service")
		return inputsDigest(o, pols, 1, 2, content)
	})
	changed("a policy's resourceVersion", func(*testing.T) string {
		a2 := a.DeepCopy()
		a2.ResourceVersion = "3"
		return inputsDigest(pod("team-a", "web"), []*auditPolicy{audited(a2), audited(b)}, 1, 2, content)
	})
	changed("a policy's uid", func(*testing.T) string {
		a2 := a.DeepCopy()
		a2.UID = "uid-a2"
		return inputsDigest(pod("team-a", "web"), []*auditPolicy{audited(a2), audited(b)}, 1, 2, content)
	})
	changed("a policy less", func(*testing.T) string {
		return inputsDigest(pod("team-a", "web"), pols[:1], 1, 2, content)
	})
	changed("the skipped policies", func(*testing.T) string {
		return inputsDigest(pod("team-a", "web"), pols, 2, 2, content)
	})
	changed("the errored policies", func(*testing.T) string {
		return inputsDigest(pod("team-a", "web"), pols, 1, 1, content)
	})
	changed("the report's content", func(*testing.T) string {
		return inputsDigest(pod("team-a", "web"), pols, 1, 2, digest{2})
	})
}

func TestReusable(t *testing.T) {
	plain := clusterPolicy("plain")
	aware := clusterPolicy("aware")
	aware.Spec.ContextAwareResources = []policiesv1.ContextAwareResource{{APIVersion: "v1", Kind: "Namespace"}}
	if !reusable([]*auditPolicy{audited(plain)}) || !reusable(nil) {
		t.Error("results of policies that are not context-aware are not reusable")
	}
	if reusable([]*auditPolicy{audited(plain), audited(aware)}) {
		t.Error("results of a context-aware policy are reusable: they depend on other objects")
	}
}

func TestStoredResults(t *testing.T) {
	want := [][2]string{{"p", "pass"}, {"q", "fail"}}
	for _, obj := range []client.Object{
		&openreportsv1alpha1.Report{Results: []openreportsv1alpha1.ReportResult{{Policy: "p", Result: "pass"}, {Policy: "q", Result: "fail"}}},
		&openreportsv1alpha1.ClusterReport{Results: []openreportsv1alpha1.ReportResult{{Policy: "p", Result: "pass"}, {Policy: "q", Result: "fail"}}},
		&wgpolicyv1alpha2.PolicyReport{Results: []*wgpolicyv1alpha2.PolicyReportResult{{Policy: "p", Result: "pass"}, {Policy: "q", Result: "fail"}}},
		&wgpolicyv1alpha2.ClusterPolicyReport{Results: []*wgpolicyv1alpha2.PolicyReportResult{{Policy: "p", Result: "pass"}, {Policy: "q", Result: "fail"}}},
	} {
		got := storedResults(obj)
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("%T: %v, want %v", obj, got, want)
		}
	}
}

var actionNames = map[reportAction]string{actionEvaluate: "evaluate", actionLeave: "leave", actionPatchRunUID: "patch run-uid",
	actionReplace: "replace", actionCreate: "create"}

func TestDecideReport(t *testing.T) {
	stored := existingReport{digest: digest{1}, inputs: "in-1"}
	plain := existingReport{digest: digest{1}} // written with an error, or by a context-aware policy
	for _, tc := range []struct {
		name  string
		facts reportFacts
		want  reportAction
	}{
		// Before the evaluation: is the object evaluated at all?
		{"no report found: evaluated", reportFacts{inputs: "in-1"}, actionEvaluate},
		{"a report without inputs: evaluated", reportFacts{found: true, stored: plain, inputs: "in-1"}, actionEvaluate},
		{"other inputs: evaluated", reportFacts{found: true, stored: stored, inputs: "in-2"}, actionEvaluate},
		{"results that cannot be reused: evaluated", reportFacts{found: true, stored: stored}, actionEvaluate},
		{"the same inputs: left alone", reportFacts{found: true, stored: stored, inputs: "in-1", keepUnchanged: true}, actionLeave},
		{"the same inputs, --keep-unchanged-reports=false: run-uid patched", reportFacts{found: true, stored: stored, inputs: "in-1"}, actionPatchRunUID},

		// After the evaluation: what is written?
		{"no report found: created", reportFacts{evaluated: true, content: digest{1}, keepUnchanged: true}, actionCreate},
		{"other content: rewritten", reportFacts{found: true, stored: stored, evaluated: true, content: digest{2}, inputs: "in-1", keepUnchanged: true}, actionReplace},
		{"other content, --keep-unchanged-reports=false: rewritten", reportFacts{found: true, stored: stored, evaluated: true, content: digest{2}, inputs: "in-1"}, actionReplace},
		{"the same content and inputs: left alone", reportFacts{found: true, stored: stored, evaluated: true, content: digest{1}, inputs: "in-1", keepUnchanged: true}, actionLeave},
		{"the same content, other inputs: patched for its inputs", reportFacts{found: true, stored: stored, evaluated: true, content: digest{1}, inputs: "in-2", keepUnchanged: true}, actionPatchRunUID},
		{"the same content, inputs no longer reusable: patched", reportFacts{found: true, stored: stored, evaluated: true, content: digest{1}, keepUnchanged: true}, actionPatchRunUID},
		{"the same content, --keep-unchanged-reports=false: run-uid patched", reportFacts{found: true, stored: stored, evaluated: true, content: digest{1}, inputs: "in-1"}, actionPatchRunUID},
		{"the same content without inputs: left alone", reportFacts{found: true, stored: plain, evaluated: true, content: digest{1}, keepUnchanged: true}, actionLeave},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideReport(tc.facts); got != tc.want {
				t.Errorf("decideReport = %s, want %s", actionNames[got], actionNames[tc.want])
			}
		})
	}
}
