package controller

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

func podRules() []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}
}

func clusterPolicy(mutate func(*policiesv1.PolicySpec)) *policiesv1.ClusterAdmissionPolicy {
	p := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{PolicyServer: "default", Module: "builtin://cel", Rules: podRules()}},
	}
	if mutate != nil {
		mutate(&p.Spec.PolicySpec)
	}
	return p
}

func namespacedPolicy(rules []admissionregistrationv1.RuleWithOperations) *policiesv1.AdmissionPolicy {
	return &policiesv1.AdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team"},
		Spec:       policiesv1.AdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{PolicyServer: "default", Module: "builtin://cel", Rules: rules}},
	}
}

func group(expression string, members policiesv1.PolicyGroupMembersWithContext) *policiesv1.ClusterAdmissionPolicyGroup {
	g := &policiesv1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	g.Spec.PolicyServer = "default"
	g.Spec.Rules = podRules()
	g.Spec.Expression = expression
	g.Spec.Message = "rejected"
	g.Spec.Policies = members
	return g
}

func member(timeout *int32) policiesv1.PolicyGroupMemberWithContext {
	return policiesv1.PolicyGroupMemberWithContext{PolicyGroupMember: policiesv1.PolicyGroupMember{Module: "builtin://cel", TimeoutEvalSeconds: timeout}}
}

func rule(groups, versions, resources []string) []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: groups, APIVersions: versions, Resources: resources},
	}}
}

func TestValidatePolicy(t *testing.T) {
	tests := []struct {
		name string
		p    policiesv1.Policy
		old  policiesv1.Policy
		want []string // substrings of the error; none: valid
	}{
		{name: "valid cluster policy", p: clusterPolicy(nil)},
		{name: "valid group", p: group("a() && !b()", policiesv1.PolicyGroupMembersWithContext{"a": member(nil), "b": member(nil)})},
		{name: "no rules", p: clusterPolicy(func(s *policiesv1.PolicySpec) { s.Rules = nil }), want: []string{"spec.rules: Required value: a value must be specified"}},
		{name: "empty resource", p: clusterPolicy(func(s *policiesv1.PolicySpec) { s.Rules = rule([]string{""}, []string{"v1"}, []string{"pods", ""}) }),
			want: []string{"spec.rules[0].resources[1]: Required value: must be non-empty"}},
		{name: "empty operation", p: clusterPolicy(func(s *policiesv1.PolicySpec) {
			s.Rules[0].Operations = []admissionregistrationv1.OperationType{""}
		}), want: []string{"spec.rules[0].operations[0]: Required value: must be non-empty"}},
		{name: "cluster policy may use wildcards", p: clusterPolicy(func(s *policiesv1.PolicySpec) { s.Rules = rule([]string{"*"}, []string{"*"}, []string{"*"}) })},
		{name: "namespaced wildcards", p: namespacedPolicy(rule([]string{"*"}, []string{"v1"}, []string{"*/*"})), want: []string{
			"spec.rules[0].apiGroups[0]: Forbidden: apiGroups cannot use wildcards when using AdmissionPolicy or AdmissionPolicyGroup",
			"spec.rules[0].resources[0]: Forbidden: resources cannot use wildcards",
		}},
		{name: "namespaced policy reports", p: namespacedPolicy(rule([]string{"wgpolicyk8s.io"}, []string{"v1beta1"}, []string{"policyreports/status"})), want: []string{
			"{APIGroup: wgpolicyk8s.io, Resource: policyreports} resources cannot be targeted by AdmissionPolicy or AdmissionPolicyGroup",
		}},
		{name: "namespaced, wildcard group and one resource", p: namespacedPolicy(rule([]string{"*"}, []string{"v1"}, []string{"pods"}))},
		{name: "match condition that does not compile", p: clusterPolicy(func(s *policiesv1.PolicySpec) {
			s.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "c", Expression: "object.metadata.name =="}}
		}), want: []string{"spec.matchConditions[0].expression: Invalid value"}},
		{name: "match condition of the wrong type", p: clusterPolicy(func(s *policiesv1.PolicySpec) {
			s.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "c", Expression: "'a string'"}}
		}), want: []string{"spec.matchConditions[0].expression"}},
		{name: "duplicate match conditions", p: clusterPolicy(func(s *policiesv1.PolicySpec) {
			s.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "c", Expression: "true"}, {Name: "c", Expression: "true"}}
		}), want: []string{`spec.matchConditions[1].name: Duplicate value: "c"`}},
		{name: "valid match condition", p: clusterPolicy(func(s *policiesv1.PolicySpec) {
			s.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-kube-system", Expression: "request.namespace != 'kube-system'"}}
		})},
		{name: "eval timeout above webhook timeout", p: clusterPolicy(func(s *policiesv1.PolicySpec) {
			s.TimeoutSeconds, s.TimeoutEvalSeconds = ptr.To[int32](5), ptr.To[int32](6)
		}), want: []string{"spec.timeoutEvalSeconds: Invalid value: 6: timeoutEvalSeconds cannot be greater than timeoutSeconds"}},
		{name: "protect to monitor", old: clusterPolicy(nil), p: clusterPolicy(func(s *policiesv1.PolicySpec) { s.Mode = policiesv1.PolicyModeMonitor }),
			want: []string{"spec.mode: Forbidden: field cannot transition from protect to monitor. Recreate instead."}},
		{name: "monitor to protect", old: clusterPolicy(func(s *policiesv1.PolicySpec) { s.Mode = policiesv1.PolicyModeMonitor }), p: clusterPolicy(nil)},
		{name: "another policy server", old: clusterPolicy(nil), p: clusterPolicy(func(s *policiesv1.PolicySpec) { s.PolicyServer = "other" }),
			want: []string{"spec.policyServer: Forbidden: the field is immutable"}},
		{name: "group expression that does not parse", p: group("a() &&", policiesv1.PolicyGroupMembersWithContext{"a": member(nil)}),
			want: []string{"spec.expression: Invalid value: \"a() &&\": compilation failed: ERROR: <input>:1:7"}},
		{name: "group expression naming an unknown member", p: group("a() || c()", policiesv1.PolicyGroupMembersWithContext{"a": member(nil)}),
			want: []string{"spec.expression: Invalid value", "compilation failed", "c"}},
		{name: "group expression that is not a bool", p: group("1 + 2", policiesv1.PolicyGroupMembersWithContext{"a": member(nil)}),
			want: []string{"must evaluate to a bool"}},
		{name: "invalid member names", p: group("ok()", policiesv1.PolicyGroupMembersWithContext{"ok": member(nil), "if": member(nil), "1a": member(nil)}),
			want: []string{`spec.policies: Invalid value: "1a": policy group member name is invalid`, `spec.policies: Invalid value: "if"`}},
		{name: "member timeouts", p: func() policiesv1.Policy {
			g := group("a() && b()", policiesv1.PolicyGroupMembersWithContext{"a": member(ptr.To[int32](8)), "b": member(ptr.To[int32](3))})
			g.Spec.TimeoutSeconds = ptr.To[int32](10)
			return g
		}(), want: []string{"the sum of all members' timeoutEvalSeconds cannot be greater than group timeoutSeconds (10)"}},
		{name: "group without message", p: func() policiesv1.Policy {
			g := group("a()", policiesv1.PolicyGroupMembersWithContext{"a": member(nil)})
			g.Spec.Message = ""
			return g
		}(), want: []string{"spec.message: Required value: must be non-empty"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assertFieldErrors(t, validatePolicy(tc.p, tc.old), tc.want)
		})
	}
}

func TestValidatePolicyServer(t *testing.T) {
	tests := []struct {
		name string
		spec policiesv1.PolicyServerSpec
		want []string
	}{
		{name: "valid", spec: policiesv1.PolicyServerSpec{Image: "x", Replicas: 1, NamespacedPoliciesCapabilities: []string{"oci/*", "kubernetes/can_i"}}},
		{name: "capabilities", spec: policiesv1.PolicyServerSpec{Image: "x", Replicas: 1, NamespacedPoliciesCapabilities: []string{"oci/v9/*", "net"}}, want: []string{
			`spec.namespacedPoliciesCapabilities[0]: Invalid value: "oci/v9/*": unknown segment "v9", valid options at this level are: v1, v2`,
			`spec.namespacedPoliciesCapabilities[1]: Invalid value: "net": "net" is not a complete capability path; use "net/*"`,
		}},
		{name: "request above limit", spec: policiesv1.PolicyServerSpec{Image: "x", Replicas: 1,
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")},
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("200Mi")},
		}, want: []string{`spec.requests[memory]: Invalid value: "200Mi": must be less than or equal to memory limit of 100Mi`}},
		{name: "negative limit", spec: policiesv1.PolicyServerSpec{Image: "x", Replicas: 1,
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")},
		}, want: []string{`spec.limits[cpu]: Invalid value: "-1": must be greater than or equal to 0`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps := &policiesv1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: tc.spec}
			// No image pull Secret nor trust ConfigMap: nothing is read.
			assertFieldErrors(t, validatePolicyServer(t.Context(), nil, "warden", ps), tc.want)
		})
	}
}

// assertFieldErrors checks that errs is empty when want is, and otherwise
// that its message contains every string of want.
func assertFieldErrors(t *testing.T, errs field.ErrorList, want []string) {
	t.Helper()
	if len(want) == 0 {
		if len(errs) != 0 {
			t.Fatalf("errors %v, want none", errs)
		}
		return
	}
	got := errs.ToAggregate()
	if got == nil {
		t.Fatalf("no error, want %q", want)
	}
	for _, w := range want {
		if !strings.Contains(got.Error(), w) {
			t.Errorf("errors %q, want them to contain %q", got, w)
		}
	}
}

func admissionRequest(t *testing.T, op admissionv1.Operation, obj, old runtime.Object) admission.Request {
	t.Helper()
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op}}
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	req.Object.Raw = raw
	if old != nil {
		if req.OldObject.Raw, err = json.Marshal(old); err != nil {
			t.Fatal(err)
		}
	}
	return req
}

func TestMutateDefaults(t *testing.T) {
	a := &kindAdmission{kind: policiesv1.KindClusterAdmissionPolicy}
	p := clusterPolicy(func(s *policiesv1.PolicySpec) { s.PolicyServer = "" })
	p.Finalizers = []string{"someone-else"}
	resp := a.mutate(t.Context(), admissionRequest(t, admissionv1.Create, p, nil))
	if !resp.Allowed {
		t.Fatalf("mutate denied: %v", resp.Result)
	}
	got, _ := json.Marshal(resp.Patches)
	want := `[{"op":"add","path":"/spec/policyServer","value":"default"},{"op":"add","path":"/metadata/finalizers/-","value":"kubewarden.io/finalizer"}]`
	if string(got) != want {
		t.Errorf("patches = %s, want %s", got, want)
	}

	done := clusterPolicy(nil)
	done.Finalizers = []string{policiesv1.Finalizer}
	if resp := a.mutate(t.Context(), admissionRequest(t, admissionv1.Update, done, done)); !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("mutate of a defaulted policy = %+v, want allowed with no patch", resp)
	}

	ps := &policiesv1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	resp = (&kindAdmission{kind: policiesv1.KindPolicyServer}).mutate(t.Context(), admissionRequest(t, admissionv1.Create, ps, nil))
	got, _ = json.Marshal(resp.Patches)
	if want := `[{"op":"add","path":"/metadata/finalizers","value":["kubewarden.io/finalizer"]}]`; string(got) != want {
		t.Errorf("PolicyServer patches = %s, want %s", got, want)
	}
}

func TestValidateAnswers422(t *testing.T) {
	a := &kindAdmission{kind: policiesv1.KindClusterAdmissionPolicy}
	old := clusterPolicy(nil)
	p := clusterPolicy(func(s *policiesv1.PolicySpec) { s.Mode = policiesv1.PolicyModeMonitor })
	resp := a.validate(t.Context(), admissionRequest(t, admissionv1.Update, p, old))
	if resp.Allowed {
		t.Fatal("protect to monitor was allowed")
	}
	if resp.Result.Code != http.StatusUnprocessableEntity || resp.Result.Reason != metav1.StatusReasonInvalid {
		t.Errorf("status = %d %s, want 422 Invalid", resp.Result.Code, resp.Result.Reason)
	}
	want := `ClusterAdmissionPolicy.policies.kubewarden.io "p" is invalid: spec.mode: Forbidden: field cannot transition from protect to monitor. Recreate instead.`
	if resp.Result.Message != want {
		t.Errorf("message = %q, want %q", resp.Result.Message, want)
	}

	// Metadata-only updates pass, even of a policy no longer valid.
	bad := clusterPolicy(func(s *policiesv1.PolicySpec) { s.Rules = nil })
	relabelled := bad.DeepCopy()
	relabelled.Labels = map[string]string{"team": "a"}
	if resp := a.validate(t.Context(), admissionRequest(t, admissionv1.Update, relabelled, bad)); !resp.Allowed {
		t.Errorf("a metadata-only update was denied: %v", resp.Result)
	}
	// A malformed object is a 400.
	req := admissionRequest(t, admissionv1.Create, p, nil)
	req.Object.Raw = []byte(`{"spec": 1}`)
	if resp := a.validate(t.Context(), req); resp.Allowed || resp.Result.Code != http.StatusBadRequest {
		t.Errorf("malformed object: %+v, want a 400", resp.Result)
	}
}
