//go:build cluster

package cluster_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// TestVAPThroughTheController serves a ValidatingAdmissionPolicy as a
// ClusterAdmissionPolicy of module builtin://vap: the controller makes its
// revision and webhook as for any policy, the policy server loads it into
// kube-apiserver's plugin, and the API server denies with the VAP's own
// message. Issue 30, deliverable 4.
func TestVAPThroughTheController(t *testing.T) {
	cl, runner := startLifecycle(t, nil)
	c := cl.Client
	mustCreate(t, c, &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 1},
	})
	eventually(t, "the replica is ready", func() bool { return runner.readyReplicas() == 1 })

	const settings = `{
	  "policy": {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
	    "metadata": {"name": "no-privileged"},
	    "spec": {"failurePolicy": "Fail",
	      "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
	      "validations": [{"expression": "!object.spec.containers.exists(c, has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged)",
	        "message": "privileged containers are not allowed"}]}},
	  "bindings": [{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
	    "metadata": {"name": "no-privileged"},
	    "spec": {"policyName": "no-privileged", "validationActions": ["Deny"]}}]
	}`
	policy := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "vap-no-privileged"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default",
			Module:       "builtin://vap",
			Rules:        podCreateRules(),
			Settings:     runtime.RawExtension{Raw: []byte(settings)},
		}},
	}
	mustCreate(t, c, policy)
	waitActive(t, c, policy)

	err := c.Create(t.Context(), pod("default", "privileged", true), client.DryRunAll)
	const want = "ValidatingAdmissionPolicy 'no-privileged' with binding 'no-privileged' denied request: privileged containers are not allowed"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a privileged pod: %v, want it denied with %q", err, want)
	}
	if err := c.Create(t.Context(), pod("default", "plain", false), client.DryRunAll); err != nil {
		t.Fatalf("a plain pod: %v", err)
	}
}
