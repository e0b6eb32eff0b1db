package hostcap

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/wardenhq/warden/internal/reflector"
)

// fakeDiscovery answers what the policy server asks of an API server for
// ConfigMaps: discovery, an empty list, and a watch that waits.
func fakeDiscovery(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/api":
		fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}`)
	case r.URL.Path == "/apis":
		fmt.Fprint(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
	case r.URL.Path == "/api/v1":
		fmt.Fprint(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get","list","watch"]}]}`)
	case r.URL.Path == "/api/v1/configmaps" && r.URL.Query().Get("watch") == "true":
		<-r.Context().Done()
	case r.URL.Path == "/api/v1/configmaps":
		fmt.Fprint(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	default:
		http.NotFound(w, r)
	}
}

// TestAPIServerBackAfterStart starts the reflectors of a kind while the
// API server cannot be reached, then brings it up: the kind is resolved and
// listed by itself, and until then the reason the reflectors are not
// settled says what they wait for.
func TestAPIServerBackAfterStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there until the API server comes back

	store, err := reflector.Open(filepath.Join(t.TempDir(), "reflectors.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	k, err := NewKubernetes(&rest.Config{Host: "http://" + addr}, KubernetesOptions{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	if err := k.Reflect("v1", "ConfigMap"); err == nil {
		t.Fatal("the kind was resolved with no API server")
	}
	if k.ReflectorsSettled() {
		t.Fatal("settled with no API server")
	}
	if why := k.Waiting(); !strings.Contains(why, "v1/ConfigMap") || !strings.Contains(why, "connection refused") {
		t.Errorf("Waiting() = %q, want the kind and the reason", why)
	}

	// The API server comes back, after the first retries.
	time.Sleep(2 * time.Second)
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(fakeDiscovery)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	// Nothing asks (no readiness probe): the retries go on by themselves.
	deadline := time.Now().Add(time.Minute) // bounds the test only
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for tbl := k.reflectors.Table(configMaps); tbl == nil || !tbl.HasSynced(); tbl = k.reflectors.Table(configMaps) {
		if time.Now().After(deadline) {
			t.Fatalf("the kind was not listed within a minute of the API server's return; waiting: %q", k.Waiting())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !k.ReflectorsSettled() || k.Waiting() != "" {
		t.Errorf("settled %v, waiting %q", k.ReflectorsSettled(), k.Waiting())
	}
}
