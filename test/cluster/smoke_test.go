//go:build cluster

package cluster_test

import (
	"net"
	"net/url"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wardenhq/warden/internal/clustertest"
)

// wantVersion is the Kubernetes version pinned in hack/cluster-bins/go.mod.
const wantVersion = "v1.36.3"

// TestSmoke checks that the control plane the cluster tests run on works:
// the pinned kube-apiserver answers on loopback, stores objects, and accepts
// the webhook configurations the controller tests create.
func TestSmoke(t *testing.T) {
	c := clustertest.Start(t)

	t.Run("listens on loopback", func(t *testing.T) {
		u, err := url.Parse(c.Config.Host)
		if err != nil {
			t.Fatalf("parsing the API server address %q: %v", c.Config.Host, err)
		}
		if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
			t.Errorf("API server address = %q, want a loopback address", c.Config.Host)
		}
	})

	t.Run("server version", func(t *testing.T) {
		dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
		if err != nil {
			t.Fatalf("making a discovery client: %v", err)
		}
		v, err := dc.ServerVersion()
		if err != nil {
			t.Fatalf("reading the server version: %v", err)
		}
		t.Logf("server version %s: major %q, minor %q, tree %s, built %s with %s",
			v.GitVersion, v.Major, v.Minor, v.GitTreeState, v.BuildDate, v.GoVersion)
		if v.GitVersion != wantVersion {
			t.Errorf("server version = %q, want %q", v.GitVersion, wantVersion)
		}
	})

	t.Run("namespace and configmap", func(t *testing.T) {
		ctx := t.Context()
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "smoke-"}}
		if err := c.Client.Create(ctx, ns); err != nil {
			t.Fatalf("creating a namespace: %v", err)
		}
		var gotNS corev1.Namespace
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(ns), &gotNS); err != nil {
			t.Fatalf("reading namespace %s back: %v", ns.Name, err)
		}
		if gotNS.UID != ns.UID {
			t.Errorf("namespace %s read back has UID %s, want %s", ns.Name, gotNS.UID, ns.UID)
		}

		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: ns.Name},
			Data:       map[string]string{"policy": "deny-latest"},
		}
		if err := c.Client.Create(ctx, cm); err != nil {
			t.Fatalf("creating a configmap: %v", err)
		}
		var gotCM corev1.ConfigMap
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(cm), &gotCM); err != nil {
			t.Fatalf("reading configmap %s/%s back: %v", cm.Namespace, cm.Name, err)
		}
		if got := gotCM.Data["policy"]; got != "deny-latest" || len(gotCM.Data) != 1 {
			t.Errorf("configmap data read back = %v, want map[policy:deny-latest]", gotCM.Data)
		}
	})

	t.Run("validating webhook configuration", func(t *testing.T) {
		ctx := t.Context()
		// Nothing listens at the URL and no namespace has the label, so
		// the webhook never takes part in the other subtests' requests.
		endpoint := "https://127.0.0.1:1/validate"
		fail := admissionregistrationv1.Ignore
		none := admissionregistrationv1.SideEffectClassNone
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "smoke.warden.test"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name:                    "smoke.warden.test",
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &endpoint},
				AdmissionReviewVersions: []string{"v1"},
				SideEffects:             &none,
				FailurePolicy:           &fail,
				NamespaceSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{"warden.test/smoke": "never"},
				},
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{
						APIGroups:   []string{""},
						APIVersions: []string{"v1"},
						Resources:   []string{"configmaps"},
					},
				}},
			}},
		}
		if err := c.Client.Create(ctx, vwc); err != nil {
			t.Fatalf("creating a validating webhook configuration: %v", err)
		}
		var got admissionregistrationv1.ValidatingWebhookConfiguration
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(vwc), &got); err != nil {
			t.Fatalf("reading validating webhook configuration %s back: %v", vwc.Name, err)
		}
		if len(got.Webhooks) != 1 || got.Webhooks[0].ClientConfig.URL == nil || *got.Webhooks[0].ClientConfig.URL != endpoint {
			t.Errorf("validating webhook configuration read back has webhooks %+v, want one calling %s", got.Webhooks, endpoint)
		}
	})
}
