package controller

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

func testPolicies() []policiesv1.Policy {
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}
	return []policiesv1.Policy{
		&policiesv1.ClusterAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "privileged"},
			Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
				PolicyServer: "default", Mode: policiesv1.PolicyModeMonitor, Module: "registry://ghcr.io/x/privileged:v1",
				Settings: runtime.RawExtension{Raw: []byte(`{"a":1}`)}, Rules: rules, Mutating: true, Message: "custom",
			}},
		},
		&policiesv1.AdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "cel"},
			Spec: policiesv1.AdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
				PolicyServer: "default", Module: "builtin://cel", Rules: rules,
				Settings: runtime.RawExtension{Raw: []byte(`{"validations":[{"expression":"true"}]}`)},
			}},
		},
		&policiesv1.AdmissionPolicyGroup{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "group"},
			Spec: policiesv1.AdmissionPolicyGroupSpec{PolicyGroupSpec: policiesv1.PolicyGroupSpec{
				GroupSpec: policiesv1.GroupSpec{PolicyServer: "default", Rules: rules, Expression: "a() && b()", Message: "no"},
				Policies: policiesv1.PolicyGroupMembers{
					"a": {Module: "builtin://cel", Settings: runtime.RawExtension{Raw: []byte(`{"validations":[{"expression":"true"}]}`)}},
					"b": {Module: "builtin://cel"},
				},
			}},
		},
	}
}

func TestWebhookShapes(t *testing.T) {
	policies := testPolicies()
	tests := []struct {
		name   string
		policy policiesv1.Policy
		target webhookTarget
		check  func(t *testing.T, w admissionregistrationv1.ValidatingWebhook)
	}{
		{
			name:   "service, cluster-wide",
			policy: policies[0],
			target: webhookTarget{namespace: "warden", service: "policy-server-default", caBundle: []byte("ca")},
			check: func(t *testing.T, w admissionregistrationv1.ValidatingWebhook) {
				svc := w.ClientConfig.Service
				if svc == nil || svc.Namespace != "warden" || svc.Name != "policy-server-default" ||
					*svc.Path != "/validate/clusterwide-privileged" || *svc.Port != 443 || w.ClientConfig.URL != nil {
					t.Errorf("client config %+v", w.ClientConfig)
				}
				sel := w.NamespaceSelector
				if sel == nil || len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].Values[0] != "warden" ||
					sel.MatchExpressions[0].Operator != metav1.LabelSelectorOpNotIn {
					t.Errorf("a cluster-wide policy must leave out the deployments namespace: %+v", sel)
				}
			},
		},
		{
			name:   "URL, namespaced",
			policy: policies[1],
			target: webhookTarget{namespace: "warden", service: "policy-server-default", caBundle: []byte("ca"), url: "https://127.0.0.1:8443/"},
			check: func(t *testing.T, w admissionregistrationv1.ValidatingWebhook) {
				if w.ClientConfig.Service != nil || w.ClientConfig.URL == nil ||
					*w.ClientConfig.URL != "https://127.0.0.1:8443/validate/namespaced-team-cel" {
					t.Errorf("client config %+v", w.ClientConfig)
				}
				if got := w.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]; got != "team" {
					t.Errorf("namespaced policy selector %+v, want its namespace", w.NamespaceSelector)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cfg admissionregistrationv1.ValidatingWebhookConfiguration
			desiredValidatingWebhook(&cfg, tc.policy, tc.target)
			if len(cfg.Webhooks) != 1 {
				t.Fatalf("%d webhooks", len(cfg.Webhooks))
			}
			w := cfg.Webhooks[0]
			if w.Name != tc.policy.GetUniqueName()+".kubewarden.admission" || string(w.ClientConfig.CABundle) != "ca" ||
				*w.SideEffects != admissionregistrationv1.SideEffectClassNone || w.AdmissionReviewVersions[0] != "v1" {
				t.Errorf("webhook %+v", w)
			}
			if cfg.Labels[partOfLabel] != partOf || cfg.Labels[policyServerLabel] != "default" ||
				cfg.Annotations[policyNameAnnotation] != tc.policy.GetName() {
				t.Errorf("metadata %+v", cfg.ObjectMeta)
			}
			tc.check(t, w)
		})
	}
}
