package auditscanner

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// fakeResolver knows the resources of resources (true: namespaced) and
// fails to find a policy server for the policies of brokenServer.
type fakeResolver struct {
	resources    map[schema.GroupVersionResource]bool
	brokenServer string
}

func (f fakeResolver) isNamespaced(gvr schema.GroupVersionResource) (bool, error) {
	ns, ok := f.resources[gvr]
	if !ok {
		return false, errors.New("no matches for " + gvr.String())
	}
	return ns, nil
}

func (f fakeResolver) auditURL(_ context.Context, p policiesv1.Policy) (string, error) {
	if p.GetPolicyServer() == f.brokenServer {
		return "", errors.New("no Service")
	}
	return "https://ps/audit/" + p.GetUniqueName(), nil
}

var (
	podsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configmapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	resolver      = fakeResolver{
		resources:    map[schema.GroupVersionResource]bool{podsGVR: true, configmapsGVR: true, namespacesGVR: false},
		brokenServer: "broken",
	}
)

// policyOption changes a policy made by clusterPolicy or namespacedPolicy.
type policyOption func(policiesv1.Policy)

func rule(ops []admissionregistrationv1.OperationType, group, version string, resources ...string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
		APIGroups: []string{group}, APIVersions: []string{version}, Resources: resources,
	}}
}

var createOnly = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}

func withRules(rules ...admissionregistrationv1.RuleWithOperations) policyOption {
	return func(p policiesv1.Policy) {
		switch p := p.(type) {
		case *policiesv1.ClusterAdmissionPolicy:
			p.Spec.Rules = rules
		case *policiesv1.AdmissionPolicy:
			p.Spec.Rules = rules
		case *policiesv1.ClusterAdmissionPolicyGroup:
			p.Spec.Rules = rules
		}
	}
}

func withoutBackgroundAudit() policyOption {
	return func(p policiesv1.Policy) {
		switch p := p.(type) {
		case *policiesv1.ClusterAdmissionPolicy:
			p.Spec.BackgroundAudit = false
		case *policiesv1.AdmissionPolicy:
			p.Spec.BackgroundAudit = false
		}
	}
}

func withStatus(s policiesv1.PolicyStatusEnum) policyOption {
	return func(p policiesv1.Policy) { p.SetStatus(s) }
}

func withPolicyServer(name string) policyOption {
	return func(p policiesv1.Policy) { p.SetPolicyServer(name) }
}

func withNamespaceSelector(sel *metav1.LabelSelector) policyOption {
	return func(p policiesv1.Policy) { p.(*policiesv1.ClusterAdmissionPolicy).Spec.NamespaceSelector = sel }
}

func withObjectSelector(sel *metav1.LabelSelector) policyOption {
	return func(p policiesv1.Policy) {
		switch p := p.(type) {
		case *policiesv1.ClusterAdmissionPolicy:
			p.Spec.ObjectSelector = sel
		case *policiesv1.AdmissionPolicy:
			p.Spec.ObjectSelector = sel
		}
	}
}

// clusterPolicy is an active ClusterAdmissionPolicy auditing pods on
// CREATE, with backgroundAudit, on the default policy server.
func clusterPolicy(name string, opts ...policyOption) *policiesv1.ClusterAdmissionPolicy {
	p := &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.BackgroundAudit = true
	p.Spec.Rules = []admissionregistrationv1.RuleWithOperations{rule(createOnly, "", "v1", "pods")}
	p.SetPolicyServer("default")
	p.SetStatus(policiesv1.PolicyStatusActive)
	for _, o := range opts {
		o(p)
	}
	return p
}

// namespacedPolicy is clusterPolicy's AdmissionPolicy twin, in namespace.
func namespacedPolicy(namespace, name string, opts ...policyOption) *policiesv1.AdmissionPolicy {
	p := &policiesv1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	p.Spec.BackgroundAudit = true
	p.Spec.Rules = []admissionregistrationv1.RuleWithOperations{rule(createOnly, "", "v1", "pods")}
	p.SetPolicyServer("default")
	p.SetStatus(policiesv1.PolicyStatusActive)
	for _, o := range opts {
		o(p)
	}
	return p
}

func ignoreNotes(context.Context, slog.Level, string, string, error) {}

func TestSelectPolicies(t *testing.T) {
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	update := []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
	tests := []struct {
		name       string
		policy     policiesv1.Policy
		namespaced bool
		// want: the GVRs the policy is audited for; skipped or errored
		// when it is counted so; neither when it is left out.
		want             []schema.GroupVersionResource
		skipped, errored bool
	}{
		{name: "audited", policy: clusterPolicy("p"), namespaced: true, want: []schema.GroupVersionResource{podsGVR}},
		{name: "every resource of every rule, each once", namespaced: true,
			policy: clusterPolicy("p", withRules(rule(createOnly, "", "v1", "pods", "configmaps"), rule(createOnly, "", "v1", "pods"))),
			want:   []schema.GroupVersionResource{configmapsGVR, podsGVR}},
		{name: "wildcard resource", policy: clusterPolicy("p", withRules(rule(createOnly, "", "v1", "*"))), namespaced: true, skipped: true},
		{name: "wildcard group", policy: clusterPolicy("p", withRules(rule(createOnly, "*", "v1", "pods"))), namespaced: true, skipped: true},
		{name: "wildcard version", policy: clusterPolicy("p", withRules(rule(createOnly, "", "*", "pods"))), namespaced: true, skipped: true},
		{name: "wildcard rules dropped, others kept", namespaced: true,
			policy: clusterPolicy("p", withRules(rule(createOnly, "", "v1", "*"), rule(createOnly, "", "v1", "pods"))),
			want:   []schema.GroupVersionResource{podsGVR}},
		{name: "no CREATE", policy: clusterPolicy("p", withRules(rule(update, "", "v1", "pods"))), namespaced: true, skipped: true},
		{name: "the * operation is not CREATE", policy: clusterPolicy("p", withRules(rule(all, "", "v1", "pods"))), namespaced: true, skipped: true},
		{name: "rules without CREATE dropped, others kept", namespaced: true,
			policy: clusterPolicy("p", withRules(rule(update, "", "v1", "configmaps"), rule(createOnly, "", "v1", "pods"))),
			want:   []schema.GroupVersionResource{podsGVR}},
		{name: "unknown resource", policy: clusterPolicy("p", withRules(rule(createOnly, "example.com", "v1", "widgets"))), namespaced: true, errored: true},
		{name: "cluster-wide resource in a namespace scan", policy: clusterPolicy("p", withRules(rule(createOnly, "", "v1", "namespaces"))), namespaced: true},
		{name: "cluster-wide resource in the cluster scan", policy: clusterPolicy("p", withRules(rule(createOnly, "", "v1", "namespaces"))),
			want: []schema.GroupVersionResource{namespacesGVR}},
		{name: "namespaced resource in the cluster scan", policy: clusterPolicy("p")},
		{name: "backgroundAudit false", policy: clusterPolicy("p", withoutBackgroundAudit()), namespaced: true, skipped: true},
		{name: "backgroundAudit false, out of scope", policy: clusterPolicy("p", withoutBackgroundAudit())},
		{name: "pending", policy: clusterPolicy("p", withStatus(policiesv1.PolicyStatusPending)), namespaced: true, skipped: true},
		{name: "unscheduled", policy: clusterPolicy("p", withStatus(policiesv1.PolicyStatusUnscheduled)), namespaced: true, skipped: true},
		{name: "no policy server", policy: clusterPolicy("p", withPolicyServer("broken")), namespaced: true, errored: true},
		{name: "invalid objectSelector", namespaced: true, errored: true, policy: clusterPolicy("p", withObjectSelector(&metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Sometimes"}}}))},
		{name: "namespaced policy", policy: namespacedPolicy("team-a", "p"), namespaced: true, want: []schema.GroupVersionResource{podsGVR}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel := selectPolicies(t.Context(), ignoreNotes, []policiesv1.Policy{tt.policy}, nil, tt.namespaced, resolver)
			wantAudited := 0
			if len(tt.want) > 0 {
				wantAudited = 1
			}
			if sel.audited != wantAudited || (sel.skipped == 1) != tt.skipped || (sel.errored == 1) != tt.errored {
				t.Errorf("audited %d skipped %d errored %d, want audited %d skipped %v errored %v",
					sel.audited, sel.skipped, sel.errored, wantAudited, tt.skipped, tt.errored)
			}
			if !reflect.DeepEqual(sel.gvrs, tt.want) {
				t.Errorf("GVRs %v, want %v", sel.gvrs, tt.want)
			}
			for _, gvr := range tt.want {
				ps := sel.byGVR[gvr]
				if len(ps) != 1 || ps[0].name != tt.policy.GetUniqueName() || ps[0].url != "https://ps/audit/"+tt.policy.GetUniqueName() {
					t.Errorf("policies of %s: %+v", gvr, ps)
				}
			}
		})
	}
}

// TestSelectPoliciesCounts checks that the counts are of distinct
// policies, with the invalid ones errored.
func TestSelectPoliciesCounts(t *testing.T) {
	pols := []policiesv1.Policy{
		clusterPolicy("a"), clusterPolicy("b"), namespacedPolicy("team-a", "a"),
		clusterPolicy("pending", withStatus(policiesv1.PolicyStatusPending)),
		clusterPolicy("broken", withPolicyServer("broken")),
	}
	sel := selectPolicies(t.Context(), ignoreNotes, pols, []string{"clusterwide-bad-selector"}, true, resolver)
	if sel.audited != 3 || sel.skipped != 1 || sel.errored != 2 {
		t.Errorf("audited %d skipped %d errored %d, want 3 1 2", sel.audited, sel.skipped, sel.errored)
	}
	var names []string
	for _, p := range sel.byGVR[podsGVR] {
		names = append(names, p.name)
	}
	if want := []string{"clusterwide-a", "clusterwide-b", "namespaced-team-a-a"}; !reflect.DeepEqual(names, want) {
		t.Errorf("policies %v, want %v", names, want)
	}
}

func TestPoliciesForNamespace(t *testing.T) {
	cat := &catalog{
		cluster: []policiesv1.Policy{
			clusterPolicy("everywhere"),
			clusterPolicy("prod-only", withNamespaceSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}})),
			clusterPolicy("not-dev", withNamespaceSelector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"dev"}}}})),
			clusterPolicy("bad", withNamespaceSelector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "env", Operator: "Maybe"}}})),
		},
		namespaced: map[string][]policiesv1.Policy{
			"prod": {namespacedPolicy("prod", "local")},
			"dev":  {namespacedPolicy("dev", "local")},
		},
	}
	tests := []struct {
		ns          *corev1.Namespace
		want        []string
		wantInvalid []string
	}{
		{ns: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}},
			want: []string{"clusterwide-everywhere", "clusterwide-prod-only", "clusterwide-not-dev", "namespaced-prod-local"}, wantInvalid: []string{"clusterwide-bad"}},
		{ns: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dev", Labels: map[string]string{"env": "dev"}}},
			want: []string{"clusterwide-everywhere", "namespaced-dev-local"}, wantInvalid: []string{"clusterwide-bad"}},
		{ns: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
			want: []string{"clusterwide-everywhere", "clusterwide-not-dev"}, wantInvalid: []string{"clusterwide-bad"}},
	}
	for _, tt := range tests {
		t.Run(tt.ns.Name, func(t *testing.T) {
			pols, invalid := cat.policiesForNamespace(tt.ns)
			var names []string
			for _, p := range pols {
				names = append(names, p.GetUniqueName())
			}
			if !reflect.DeepEqual(names, tt.want) || !reflect.DeepEqual(invalid, tt.wantInvalid) {
				t.Errorf("policies %v invalid %v, want %v %v", names, invalid, tt.want, tt.wantInvalid)
			}
		})
	}
}

func TestObjectSelector(t *testing.T) {
	p := clusterPolicy("p", withObjectSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"audit": "yes"}}))
	sel := selectPolicies(t.Context(), ignoreNotes, []policiesv1.Policy{p}, nil, true, resolver)
	ap := sel.byGVR[podsGVR][0]
	if !ap.matches(map[string]string{"audit": "yes", "x": "y"}) || ap.matches(map[string]string{"audit": "no"}) || ap.matches(nil) {
		t.Error("objectSelector audit=yes misapplied")
	}
	everything := selectPolicies(t.Context(), ignoreNotes, []policiesv1.Policy{clusterPolicy("q")}, nil, true, resolver)
	if !everything.byGVR[podsGVR][0].matches(nil) {
		t.Error("a policy without objectSelector does not select an object without labels")
	}
}

// TestAuditURLWithPolicyServerURL checks that --policy-server-url needs no
// PolicyServer nor Service: the resolver has no client to find them with.
func TestAuditURLWithPolicyServerURL(t *testing.T) {
	r := newClusterResolver(nil, nil, "kubewarden", "https://localhost:3000/")
	for _, p := range []policiesv1.Policy{clusterPolicy("p", withPolicyServer("")), namespacedPolicy("team-a", "q")} {
		got, err := r.auditURL(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if want := "https://localhost:3000/audit/" + p.GetUniqueName(); got != want {
			t.Errorf("URL %q, want %q", got, want)
		}
	}
}
