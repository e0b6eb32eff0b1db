//go:build cluster

package cluster_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
)

// TestCELParams runs native cel-policies whose params are ConfigMaps of a
// real API server, read by the policy server through its reflector store
// and the policies' contextAwareResources, as the wasm cel-policy reads
// them through host calls.
func TestCELParams(t *testing.T) {
	cl := startCluster(t)
	c := cl.Client
	for _, ns := range []string{"team-a", "params"} {
		mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	limits := func(namespace, name, max string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": "limits"}},
			Data: map[string]string{"maxreplicas": max}}
	}
	mustCreate(t, c, limits("team-a", "limits", "2"))
	mustCreate(t, c, limits("params", "a", "5"))
	mustCreate(t, c, limits("params", "b", "4"))

	const validation = `"validations":[{"expression":"object.spec.replicas <= int(params.data.maxreplicas)",` +
		`"messageExpression":"'at most ' + params.data.maxreplicas + ' replicas'","reason":"Forbidden"}]`
	policy := func(id, paramRef, resources string) string {
		return fmt.Sprintf("%s:\n  module: builtin://cel\n  hostCapabilities: [\"kubernetes/*\"]\n  contextAwareResources: %s\n"+
			"  settings: {\"paramKind\":{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\"},\"paramRef\":{%s},%s}\n",
			id, resources, paramRef, validation)
	}
	configMaps := "[{apiVersion: v1, kind: ConfigMap}]"
	doc := policy("by-name", `"name":"limits","parameterNotFoundAction":"Deny"`, configMaps) +
		policy("by-selector", `"selector":{"matchLabels":{"app":"limits"}},"namespace":"params","parameterNotFoundAction":"Deny"`, configMaps) +
		policy("missing-allowed", `"name":"nope","parameterNotFoundAction":"Allow"`, configMaps) +
		policy("missing-denied", `"name":"nope","parameterNotFoundAction":"Deny"`, configMaps) +
		policy("not-granted", `"name":"limits","parameterNotFoundAction":"Deny"`, "[{apiVersion: v1, kind: Secret}]")
	port := startPolicyServer(t, doc, writeKubeconfig(t, cl.Config))

	// answer sends a Deployment of team-a with replicas to a policy and
	// returns "accept" or the rejection's code and message.
	answer := func(id string, replicas int) string {
		t.Helper()
		review := admissiontest.New(admissiontest.WithUID("u"), admissiontest.WithKind("apps", "v1", "Deployment"),
			admissiontest.WithResource("apps", "v1", "deployments"), admissiontest.WithName("web"), admissiontest.WithNamespace("team-a"),
			admissiontest.WithObject(fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"team-a"},"spec":{"replicas":%d}}`, replicas)))
		resp := validateReview(t, port, id, review.JSON())
		switch {
		case resp.Allowed:
			return "accept"
		case resp.Status == nil:
			return "reject"
		}
		return fmt.Sprintf("%d %s", resp.Status.Code, resp.Status.Message)
	}
	for _, tt := range []struct {
		id       string
		replicas int
		want     string
	}{
		{"by-name", 2, "accept"},
		{"by-name", 3, "403 at most 2 replicas"},
		{"by-selector", 4, "accept"},
		{"by-selector", 5, "403 at most 4 replicas"},
		{"missing-allowed", 100, "accept"},
		{"missing-denied", 1, `400 failed to get params for performing policy evaluation: cannot get Kubernetes resource: ` +
			`Callback evaluation failure: Cannot find v1/ConfigMap named 'nope' inside of namespace 'Some("team-a")'`},
		{"not-granted", 1, "400 failed to get params for performing policy evaluation: cannot get Kubernetes resource: " +
			"Policy has not been granted access to Kubernetes v1/ConfigMap resources. The violation has been reported."},
	} {
		if got := answer(tt.id, tt.replicas); got != tt.want {
			t.Errorf("%s, %d replicas: %s, want %s", tt.id, tt.replicas, got, tt.want)
		}
	}

	// The params are read from the reflector: a change shows as soon as
	// its watch sees it.
	var cm corev1.ConfigMap
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "team-a", Name: "limits"}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["maxreplicas"] = "3"
	if err := c.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new limit is read", func() bool { return answer("by-name", 3) == "accept" })
}
