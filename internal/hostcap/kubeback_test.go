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
	k, addr := withUnreachableAPIServer(t, 0)
	if k.ReflectorsSettled() {
		t.Fatal("settled with no API server")
	}
	if why := k.Waiting(); !strings.Contains(why, "v1/ConfigMap") || !strings.Contains(why, "connection refused") {
		t.Errorf("Waiting() = %q, want the kind and the reason", why)
	}

	// The API server comes back, after the first retries.
	time.Sleep(2 * time.Second)
	serveAt(t, addr, http.HandlerFunc(fakeDiscovery))

	// Nothing asks (no readiness probe): the retries go on by themselves.
	waitUntilListed(t, k)
}

// waitUntilListed waits, a minute at most, until k's reflector of
// ConfigMaps holds its first list, without asking (ReflectorsSettled
// would), then checks that k is settled and waits for nothing.
func waitUntilListed(t *testing.T, k *Kubernetes) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // bounds the wait only
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for tbl := k.reflectors.Table(configMaps); tbl == nil || !tbl.HasSynced(); tbl = k.reflectors.Table(configMaps) {
		if time.Now().After(deadline) {
			t.Fatalf("the kind was not listed within a minute of the API server's return; waiting: %q", k.Waiting())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !k.ReflectorsSettled() || k.Waiting() != "" {
		t.Errorf("settled %v, waiting %q", k.ReflectorsSettled(), k.Waiting())
	}
}

// withUnreachableAPIServer returns a Kubernetes with a store whose API
// server refuses connections, and its address, after a Reflect of
// ConfigMaps that failed for it: the kind is pending. retry, when not
// zero, is the backoff of every retry.
func withUnreachableAPIServer(t *testing.T, retry time.Duration) (k *Kubernetes, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close() // nothing listens there until a test serves it

	store, err := reflector.Open(filepath.Join(t.TempDir(), "reflectors.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	k, err = NewKubernetes(&rest.Config{Host: "http://" + addr}, KubernetesOptions{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	if retry != 0 {
		k.retryFirst, k.retryMax = retry, retry
	}
	if err := k.Reflect("v1", "ConfigMap"); err == nil {
		t.Fatal("the kind was resolved with no API server")
	}
	return k, addr
}

// serveAt serves handler at addr until the test ends, or skips the test
// when another process took the address meanwhile.
func serveAt(t *testing.T, addr string, handler http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// TestReadinessAnswersAtOnceWhileTheAPIServerIsSilent: an API server that
// takes connections and never answers, as one behind a firewall that drops
// its packets, made each readiness probe wait for discovery's 32 s
// timeout, far over a probe's. The probe must answer at once, and say why
// it waits.
func TestReadinessAnswersAtOnceWhileTheAPIServerIsSilent(t *testing.T) {
	k, addr := withUnreachableAPIServer(t, 0)
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))

	for range 3 {
		answered := make(chan bool, 1)
		go func() { answered <- k.ReflectorsSettled() }()
		select {
		case settled := <-answered:
			if settled {
				t.Fatal("settled while the API server never answers")
			}
		case <-time.After(10 * time.Second): // discovery's timeout is 32 s
			t.Fatal("ReflectorsSettled waited for the silent API server")
		}
		if why := k.Waiting(); !strings.Contains(why, "v1/ConfigMap") {
			t.Errorf("Waiting() = %q, want the kind it waits for", why)
		}
	}
}

// TestReadinessProbeHastensTheRetry: a probe that finds kinds pending has
// them tried at once, not at the next backoff, so that a pod turns ready
// soon after its API server is back even late in a long outage.
func TestReadinessProbeHastensTheRetry(t *testing.T) {
	k, addr := withUnreachableAPIServer(t, time.Hour) // no retry comes by itself
	serveAt(t, addr, http.HandlerFunc(fakeDiscovery))

	deadline := time.Now().Add(time.Minute) // bounds the test only
	for !k.ReflectorsSettled() {
		if time.Now().After(deadline) {
			t.Fatalf("not settled within a minute of the API server's return with probes asking; waiting: %q", k.Waiting())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
