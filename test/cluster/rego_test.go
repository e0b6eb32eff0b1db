//go:build cluster

package cluster_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/rego/regotest"
)

// regoModule builds a Rego policy of testdata/rego for mode and returns
// the file:// URL of the annotated module.
func regoModule(t *testing.T, file, entrypoint, mode string) string {
	t.Helper()
	return regotest.ModuleFile(t, filepath.Join("..", "..", "testdata", "rego", file), entrypoint, mode)
}

// TestRegoContextAware runs Rego policies granted Kubernetes resources
// against a real API server: their data holds the cluster's objects as
// they are at each request.
func TestRegoContextAware(t *testing.T) {
	cl := startCluster(t)
	c := cl.Client
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ice", Labels: map[string]string{"frozen": "true"}}},
	} {
		mustCreate(t, c, ns)
	}
	web := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "shop.example.com"}}},
	}
	mustCreate(t, c, web)
	mustCreate(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings"}})

	unique := regoModule(t, "gatekeeper/unique_ingress_host.rego", "uniqueingresshost/violation", metadata.ModeGatekeeper)
	frozen := regoModule(t, "opa/frozen_namespaces.rego", "policy/main", metadata.ModeOPA)
	port := startPolicyServer(t, fmt.Sprintf(`
unique-hosts:
  module: %s
  contextAwareResources: [{apiVersion: networking.k8s.io/v1, kind: Ingress}]
frozen-namespaces:
  module: %s
  settings: {max_configmaps: 1}
  contextAwareResources: [{apiVersion: v1, kind: Namespace}, {apiVersion: v1, kind: ConfigMap}]
`, unique, frozen), writeKubeconfig(t, cl.Config))

	validate := func(policy, kind, namespace, object string) (bool, string) {
		t.Helper()
		group := ""
		if kind == "Ingress" {
			group = "networking.k8s.io"
		}
		resp := validateReview(t, port, policy, admissiontest.New(admissiontest.WithUID("u-1"),
			admissiontest.WithKind(group, "v1", kind), admissiontest.WithResource(group, "v1", strings.ToLower(kind)+"s"),
			admissiontest.WithNamespace(namespace), admissiontest.WithObject(object)).JSON())
		if resp.Status == nil {
			return resp.Allowed, ""
		}
		return resp.Allowed, resp.Status.Message
	}
	blog := `{"metadata":{"name":"blog","namespace":"news"},"spec":{"rules":[{"host":"shop.example.com"}]}}`

	if allowed, msg := validate("unique-hosts", "Ingress", "news", blog); allowed || msg != "host <shop.example.com> is taken by ingress shop/web" {
		t.Errorf("an Ingress for a host taken: allowed %v %q", allowed, msg)
	}
	if err := c.Delete(t.Context(), web); err != nil {
		t.Fatal(err)
	}
	// The policy server's reflector sees the deletion through its watch,
	// and the inventory kept since the last evaluation is built again.
	eventually(t, "an Ingress for a host freed is accepted", func() bool {
		allowed, _ := validate("unique-hosts", "Ingress", "news", blog)
		return allowed
	})
	mustCreate(t, c, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-again"},
		Spec:       networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "shop.example.com"}}},
	})
	eventually(t, "an Ingress for a host taken again is rejected", func() bool {
		allowed, msg := validate("unique-hosts", "Ingress", "news", blog)
		return !allowed && msg == "host <shop.example.com> is taken by ingress shop/web-again"
	})
	if allowed, msg := validate("frozen-namespaces", "Pod", "ice", `{"metadata":{"name":"p"}}`); allowed || msg != "namespace ice is frozen" {
		t.Errorf("a Pod in a frozen namespace: allowed %v %q", allowed, msg)
	}
	if allowed, msg := validate("frozen-namespaces", "ConfigMap", "shop", `{"metadata":{"name":"more"}}`); allowed || msg != "namespace shop has 1 ConfigMaps already" {
		t.Errorf("a ConfigMap over the limit: allowed %v %q", allowed, msg)
	}
	if allowed, msg := validate("frozen-namespaces", "Pod", "shop", `{"metadata":{"name":"p"}}`); !allowed {
		t.Errorf("a Pod in an open namespace: allowed %v %q", allowed, msg)
	}
}
