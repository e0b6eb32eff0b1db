//go:build cluster

package cluster_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/reflector"
)

// TestReflectedLists answers the list host capabilities from reflectors
// (RFC 004) kept by a real API server's watches: the answers are those of
// direct lists, written from lists read a page at a time; they follow the
// cluster's changes, kept answers included, and keep coming while the API
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
	dbPath := filepath.Join(t.TempDir(), "reflectors.db")
	store, err := reflector.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	// Pages of two objects: every list of the test takes several.
	var pagesMu sync.Mutex
	pages := map[string][]int{} // resource: the sizes of its pages
	reflected, err := hostcap.NewKubernetes(viaProxy, hostcap.KubernetesOptions{Store: store, Logger: slog.New(slog.DiscardHandler),
		Reflectors: reflector.Options{PageSize: 2, OnPage: func(gvr schema.GroupVersionResource, objects []reflector.Object) {
			pagesMu.Lock()
			pages[gvr.Resource] = append(pages[gvr.Resource], len(objects))
			pagesMu.Unlock()
		}}})
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
	// The reflector never held more than a page: pages of 2, several per
	// list.
	pagesMu.Lock()
	for _, resource := range []string{"configmaps", "namespaces"} {
		if sizes := pages[resource]; len(sizes) < 2 || slices.Max(sizes) > 2 {
			t.Errorf("pages of %s: %v, want several of at most 2", resource, sizes)
		}
	}
	pagesMu.Unlock()

	// get_resource reads the reflector of a kind it has, with the errors
	// of the API server.
	get := func(k *hostcap.Kubernetes, payload map[string]any) string { return list(k, "get_resource", payload) }
	web := map[string]any{"api_version": "v1", "kind": "ConfigMap", "namespace": "team-a", "name": "web"}
	if got := get(reflected, web); !strings.Contains(got, `"k1":"v1"`) || strings.Contains(got, "managedFields") || strings.Contains(got, "last-applied") {
		t.Errorf("get_resource from the reflector: %s", got)
	}
	for _, payload := range []map[string]any{
		{"api_version": "v1", "kind": "ConfigMap", "namespace": "team-a", "name": "nope"},
		{"api_version": "v1", "kind": "ConfigMap", "name": "web"},
	} {
		if got, want := get(reflected, payload), get(direct, payload); got != want {
			t.Errorf("get_resource %v:\nreflected %s\ndirect    %s", payload, got, want)
		}
	}

	// A kept answer changes when the watch writes a change: an added
	// object, a changed one, a deleted one.
	teamB := map[string]any{"api_version": "v1", "kind": "ConfigMap", "namespace": "team-b"}
	if got := list(reflected, "list_resources_by_namespace", teamB); strings.Contains(got, `"name":"cache"`) {
		t.Fatalf("before the new ConfigMap: %s", got)
	}
	mustCreate(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "cache"}})
	eventually(t, "the new ConfigMap is reflected", func() bool {
		return strings.Contains(list(reflected, "list_resources_by_namespace", teamB), `"name":"cache"`)
	})
	var cm corev1.ConfigMap
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "team-b", Name: "web"}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"k1": "changed"}
	if err := c.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the changed ConfigMap is reflected", func() bool {
		return strings.Contains(list(reflected, "list_resources_by_namespace", teamB), `"k1":"changed"`)
	})
	if err := c.Delete(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted ConfigMap is gone", func() bool {
		return !strings.Contains(list(reflected, "list_resources_by_namespace", teamB), `"name":"web"`)
	})
	if got, want := list(reflected, "list_resources_by_namespace", teamB), list(direct, "list_resources_by_namespace", teamB); got != want {
		t.Errorf("after the changes:\nreflected %s\ndirect    %s", got, want)
	}
	// The kinds no policy reads any more are no longer kept: ConfigMaps
	// and Services go, Namespaces stay. A ConfigMap list afterwards (a
	// policy reading them is back) lists them anew, with what changed
	// while nothing watched them.
	reflected.RetainReflectors(t.Context(), []schema.GroupVersionKind{{Version: "v1", Kind: "Namespace"}})
	if _, tracked := reflected.ListsChangedSince("v1", "ConfigMap", time.Time{}); tracked {
		t.Error("ConfigMaps are still kept after RetainReflectors left them out")
	}
	if _, tracked := reflected.ListsChangedSince("v1", "Namespace", time.Time{}); !tracked {
		t.Error("Namespaces are no longer kept")
	}
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	rows, err := db.QueryContext(t.Context(), `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	for err == nil && rows.Next() {
		var name string
		err = rows.Scan(&name)
		tables = append(tables, name)
	}
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	db.Close()
	if !slices.Equal(tables, []string{"v1_namespaces"}) {
		t.Errorf("tables %v, want those of the kinds left out dropped", tables)
	}
	mustCreate(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "while-unwatched"}})
	if got, want := list(reflected, "list_resources_by_namespace", teamB), list(direct, "list_resources_by_namespace", teamB); got != want || !strings.Contains(got, "while-unwatched") {
		t.Errorf("ConfigMaps kept again:\nreflected %s\ndirect    %s", got, want)
	}
	before := list(reflected, "list_resources_by_namespace", teamB)
	proxy.cut()
	if got := list(reflected, "list_resources_by_namespace", teamB); got != before {
		t.Errorf("while the API server is away:\n%s\nwant\n%s", got, before)
	}
	if got := list(reflected, "list_resources_all", map[string]any{"api_version": "v1", "kind": "Secret"}); !strings.Contains(got, "waiting for the reflector of v1_secrets") {
		t.Errorf("a kind first listed while the API server is away: %s", got)
	}
}

// TestReadinessWaitsForReflectors: a policy server whose policies read a
// kind is not ready until the kind's reflector holds its first list, so
// that no request waits for it; here the API server is away at the start.
func TestReadinessWaitsForReflectors(t *testing.T) {
	cl := startCluster(t)
	mustCreate(t, cl.Client, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "present"}})
	proxy := startProxy(t, cl.Config.Host)
	viaProxy := rest.CopyConfig(cl.Config)
	viaProxy.Host = "https://" + proxy.addr
	proxy.cut()

	// The policy lists, then fails a call on purpose: its rejection
	// carries what the list answered.
	settings := `{"calls":[{"namespace":"kubernetes","operation":"list_resources_by_namespace",` +
		`"payload":{"api_version":"v1","kind":"ConfigMap","namespace":"default"}},` +
		`{"namespace":"kubernetes","operation":"get_resource","payload":{"api_version":"v1","kind":"Namespace","name":"missing"}}]}`
	doc := fmt.Sprintf("lists:\n  module: file://%s\n  settings: %s\n  hostCapabilities: [\"kubernetes/*\"]\n"+
		"  contextAwareResources: [{apiVersion: v1, kind: ConfigMap}]\n", policybuild.ForTest(t, "host-call"), settings)
	port, readiness := launchPolicyServer(t, doc, writeKubeconfig(t, viaProxy))
	// Serving starts without the API server; readiness waits for it.
	eventually(t, "the policy server answers its readiness probe", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readiness", readiness))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	proxy.restore(t)
	eventually(t, "the policy server is ready", func() bool { return ready(readiness) })
	review := admissiontest.New(admissiontest.WithUID("u-1"), admissiontest.WithName("p"),
		admissiontest.WithObject(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}`))
	body := postReview(t, port, "lists", review.JSON())
	if !strings.Contains(string(body), `"allowed":false`) || !strings.Contains(string(body), `\"name\":\"present\"`) {
		t.Errorf("the first request once ready: %s", body)
	}
}
