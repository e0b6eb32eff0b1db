package policyconfig

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// What the controller means by a policy is what the policy server loads.
func TestConfig(t *testing.T) {
	cluster := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			Mode: policiesv1.PolicyModeMonitor, Module: "registry://ghcr.io/x/privileged:v1",
			Settings: runtime.RawExtension{Raw: []byte(`{"a":1}`)}, Mutating: true, Message: "custom",
		}},
	}
	namespaced := &policiesv1.AdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "cel"},
		Spec: policiesv1.AdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			Module: "builtin://cel", Settings: runtime.RawExtension{Raw: []byte(`{"validations":[{"expression":"true"}]}`)},
		}},
	}
	group := &policiesv1.AdmissionPolicyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "group"},
		Spec: policiesv1.AdmissionPolicyGroupSpec{PolicyGroupSpec: policiesv1.PolicyGroupSpec{
			GroupSpec: policiesv1.GroupSpec{Expression: "a() && b()", Message: "no"},
			Policies: policiesv1.PolicyGroupMembers{
				"a": {Module: "builtin://cel", Settings: runtime.RawExtension{Raw: []byte(`{"validations":[{"expression":"true"}]}`)}},
				"b": {Module: "builtin://cel"},
			},
		}},
	}
	caps := []string{"oci/*"}

	c, err := Config(cluster, caps)
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode() != "monitor" || !c.AllowedToMutate || c.Message != "custom" || string(c.Settings) != `{"a":1}` ||
		c.Module != "registry://ghcr.io/x/privileged:v1" {
		t.Errorf("cluster policy: %+v", c)
	}
	if got := NewEntry(cluster, caps).HostCapabilities; strings.Join(got, ",") != "*" {
		t.Errorf("cluster policy capabilities = %v, want everything", got)
	}
	if got := NewEntry(namespaced, caps).HostCapabilities; strings.Join(got, ",") != "oci/*" {
		t.Errorf("namespaced policy capabilities = %v, want the PolicyServer's", got)
	}
	if got := NewEntry(namespaced, nil).HostCapabilities; strings.Join(got, ",") != "*" {
		t.Errorf("namespaced policy capabilities without a PolicyServer limit = %v, want everything", got)
	}
	g, err := Config(group, caps)
	if err != nil {
		t.Fatal(err)
	}
	if !g.IsGroup() || g.Expression != "a() && b()" || len(g.Policies) != 2 || g.Message != "no" {
		t.Errorf("group: %+v", g)
	}
	if e := NewEntry(group, caps); e.Policies["b"].Settings != nil {
		t.Errorf("a member without settings has settings %s", e.Policies["b"].Settings)
	}
}
