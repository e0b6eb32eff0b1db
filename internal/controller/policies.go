package controller

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// policyKinds are the four policy kinds, each with a reconciler of its own.
var policyKinds = []string{
	policiesv1.KindClusterAdmissionPolicy,
	policiesv1.KindAdmissionPolicy,
	policiesv1.KindClusterAdmissionPolicyGroup,
	policiesv1.KindAdmissionPolicyGroup,
}

// policyServerIndex is the field index of the policies by
// spec.policyServer.
const policyServerIndex = "spec.policyServer"

// newPolicyList returns an empty list of the given policy kind.
func newPolicyList(kind string) client.ObjectList {
	switch kind {
	case policiesv1.KindClusterAdmissionPolicy:
		return &policiesv1.ClusterAdmissionPolicyList{}
	case policiesv1.KindAdmissionPolicy:
		return &policiesv1.AdmissionPolicyList{}
	case policiesv1.KindClusterAdmissionPolicyGroup:
		return &policiesv1.ClusterAdmissionPolicyGroupList{}
	case policiesv1.KindAdmissionPolicyGroup:
		return &policiesv1.AdmissionPolicyGroupList{}
	}
	return nil
}

// policiesOf returns the items of a policy list.
func policiesOf(list client.ObjectList) []policiesv1.Policy {
	var out []policiesv1.Policy
	switch l := list.(type) {
	case *policiesv1.ClusterAdmissionPolicyList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *policiesv1.AdmissionPolicyList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *policiesv1.ClusterAdmissionPolicyGroupList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *policiesv1.AdmissionPolicyGroupList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}

// indexPolicyServer is the indexer of policyServerIndex.
func indexPolicyServer(o client.Object) []string {
	p, ok := o.(policiesv1.Policy)
	if !ok || p.GetPolicyServer() == "" {
		return nil
	}
	return []string{p.GetPolicyServer()}
}

// countWebhooks counts the webhook configurations of the policies of the
// PolicyServer called name.
func countWebhooks(ctx context.Context, c client.Client, name string) (int, error) {
	sel := client.MatchingLabels{policyServerLabel: name}
	var v admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := c.List(ctx, &v, sel); err != nil {
		return 0, fmt.Errorf("listing validating webhook configurations: %w", err)
	}
	var m admissionregistrationv1.MutatingWebhookConfigurationList
	if err := c.List(ctx, &m, sel); err != nil {
		return 0, fmt.Errorf("listing mutating webhook configurations: %w", err)
	}
	return len(v.Items) + len(m.Items), nil
}
