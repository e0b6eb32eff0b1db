//go:build cluster

package cluster_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/reflector"
)

// TestReflectedLists answers the list host capabilities from reflectors
// (RFC 004) kept by a real API server's watches: the answers are those of
// direct lists, follow the cluster's changes, and keep coming while the API
// server cannot be reached.
func TestReflectedLists(t *testing.T) {
	cl := startCluster(t)
	c := cl.Client
	for _, ns := range []string{"team-a", "team-b"} {
		mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": ns}}})
	}
	for _, cm := range []struct{ ns, name, app string }{{"team-a", "web", "web"}, {"team-a", "db", "db"}, {"team-b", "web", "web"}} {
		mustCreate(t, c, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: cm.ns, Name: cm.name, Labels: map[string]string{"app": cm.app},
				Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
			Data: map[string]string{"k1": "v1", "k2": "v2"},
		})
	}

	direct, err := hostcap.NewKubernetes(cl.Config, hostcap.KubernetesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, cl.Config.Host)
	viaProxy := rest.CopyConfig(cl.Config)
	viaProxy.Host = "https://" + proxy.addr
	store, err := reflector.Open(filepath.Join(t.TempDir(), "reflectors.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	reflected, err := hostcap.NewKubernetes(viaProxy, hostcap.KubernetesOptions{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reflected.Close)
	for _, kind := range []string{"ConfigMap", "Namespace"} {
		if err := reflected.Reflect("v1", kind); err != nil {
			t.Fatal(err)
		}
	}
	if err := reflected.Reflect("v1", "Frobnicator"); err == nil || !strings.Contains(err.Error(), "Cannot find resource v1/Frobnicator") {
		t.Errorf("reflecting an unknown kind: %v", err)
	}

	list := func(k *hostcap.Kubernetes, op string, payload map[string]any) string {
		t.Helper()
		b, _ := json.Marshal(payload)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		out, err := hostcap.NewHost(hostcap.NewDirect(hostcap.Options{Kubernetes: k})).HostCall(ctx, "kubernetes", op, b)
		if err != nil {
			return "error: " + err.Error()
		}
		// Objects read at different times differ in nothing else.
		return string(out)
	}
	queries := []struct {
		op      string
		payload map[string]any
	}{
		{"list_resources_all", map[string]any{"api_version": "v1", "kind": "ConfigMap"}},
		{"list_resources_by_namespace", map[string]any{"api_version": "v1", "kind": "ConfigMap", "namespace": "team-a"}},
		{"list_resources_all", map[string]any{"api_version": "v1", "kind": "ConfigMap", "label_selector": "app in (web),app!=db"}},
		{"list_resources_all", map[string]any{"api_version": "v1", "kind": "ConfigMap", "field_selector": "metadata.namespace=team-b"}},
		{"list_resources_by_namespace", map[string]any{"api_version": "v1", "kind": "ConfigMap", "namespace": "team-a",
			"field_selector": "metadata.name!=web", "field_masks": []string{"data.k2"}}},
		{"list_resources_all", map[string]any{"api_version": "v1", "kind": "Namespace", "label_selector": "team"}},
		{"list_resources_by_namespace", map[string]any{"api_version": "v1", "kind": "Namespace", "namespace": "team-a"}},
		// No Reflect for Services: the first list starts their reflector.
		{"list_resources_all", map[string]any{"api_version": "v1", "kind": "Service"}},
	}
	for _, q := range queries {
		want, got := list(direct, q.op, q.payload), list(reflected, q.op, q.payload)
		if got != want {
			t.Errorf("%s %v:\nreflected %s\ndirect    %s", q.op, q.payload, got, want)
		}
	}
	if got := list(reflected, "list_resources_all", map[string]any{"api_version": "v1", "kind": "ConfigMap", "label_selector": "app in ("}); !strings.HasPrefix(got, "error: Callback evaluation failure: invalid label selector") {
		t.Errorf("a bad label selector: %s", got)
	}

	mustCreate(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "cache"}})
	teamB := map[string]any{"api_version": "v1", "kind": "ConfigMap", "namespace": "team-b"}
	eventually(t, "the new ConfigMap is reflected", func() bool {
		return strings.Contains(list(reflected, "list_resources_by_namespace", teamB), `"name":"cache"`)
	})
	before := list(reflected, "list_resources_by_namespace", teamB)
	proxy.cut()
	if got := list(reflected, "list_resources_by_namespace", teamB); got != before {
		t.Errorf("while the API server is away:\n%s\nwant\n%s", got, before)
	}
	if got := list(reflected, "list_resources_all", map[string]any{"api_version": "v1", "kind": "Secret"}); !strings.Contains(got, "waiting for the reflector of v1_secrets") {
		t.Errorf("a kind first listed while the API server is away: %s", got)
	}
}
