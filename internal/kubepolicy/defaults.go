package kubepolicy

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The API server defaults some fields of these kinds when they are created
// (its defaulting functions live in k8s.io/kubernetes, which Warden does not
// import). Load applies the same defaults before it checks a policy, so a
// manifest that omits them is read as the API server stores it.

func defaultFailurePolicy(fp **admissionregistrationv1.FailurePolicyType) {
	if *fp == nil {
		f := admissionregistrationv1.Fail
		*fp = &f
	}
}

func defaultMatchResources(mr *admissionregistrationv1.MatchResources) {
	if mr == nil {
		return
	}
	if mr.MatchPolicy == nil {
		p := admissionregistrationv1.Equivalent
		mr.MatchPolicy = &p
	}
	if mr.NamespaceSelector == nil {
		mr.NamespaceSelector = &metav1.LabelSelector{}
	}
	if mr.ObjectSelector == nil {
		mr.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{mr.ResourceRules, mr.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				s := admissionregistrationv1.AllScopes
				rules[i].Scope = &s
			}
		}
	}
}

func (m *manifests) setDefaults() {
	if m.vap != nil {
		defaultFailurePolicy(&m.vap.Spec.FailurePolicy)
		defaultMatchResources(m.vap.Spec.MatchConstraints)
	}
	for _, b := range m.vapBindings {
		defaultMatchResources(b.Spec.MatchResources)
	}
	if m.mapPolicy != nil {
		defaultFailurePolicy(&m.mapPolicy.Spec.FailurePolicy)
		defaultMatchResources(m.mapPolicy.Spec.MatchConstraints)
	}
	for _, b := range m.mapBindings {
		defaultMatchResources(b.Spec.MatchResources)
	}
}
