package policyserver_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadinessSaysWhyItWaits checks that a server waiting for its
// reflectors says why in its readiness answer, and is ready once they are
// settled.
func TestReadinessSaysWhyItWaits(t *testing.T) {
	opts := testOptions(t, writePolicies(t, "p: {module: {labels}}\n"))
	var settled atomic.Bool
	opts.ReflectorsSettled = settled.Load
	opts.ReflectorsWaiting = func() string {
		return "waiting for the Kubernetes API server to resolve v1/Namespace: connection refused"
	}
	ts := startServerUnready(t, opts)
	get := func() (int, string) { return readiness(t, ts) }
	// Serve may not be running yet: wait until the readiness port says
	// more than that.
	code, body := get()
	for deadline := time.Now().Add(time.Minute); strings.Contains(body, "starting") && time.Now().Before(deadline); code, body = get() {
		time.Sleep(10 * time.Millisecond)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "v1/Namespace: connection refused") {
		t.Errorf("readiness %d %q, want 503 saying why", code, body)
	}
	settled.Store(true)
	if code, body := get(); code != http.StatusOK {
		t.Errorf("readiness %d %q once settled", code, body)
	}
}

// TestStartDoesNotWaitForKindsToResolve: against an API server that drops
// packets, resolving each kind a policy reads waits for discovery's 32 s
// timeout. The server starts meanwhile, its readiness port says it is not
// ready, and it turns ready once the kinds are resolved.
func TestStartDoesNotWaitForKindsToResolve(t *testing.T) {
	opts := testOptions(t, writePolicies(t, "p:\n  module: {labels}\n  contextAwareResources: [{apiVersion: v1, kind: Namespace}]\n"))
	discovery := make(chan struct{}) // closed: the API server answers
	var resolved atomic.Bool
	opts.Reflect = func(apiVersion, kind string) error {
		select {
		case <-discovery:
			resolved.Store(true)
			return nil
		case <-time.After(20 * time.Second): // as discovery's own timeout would end it
			return errors.New("discovery timed out")
		}
	}
	opts.ReflectorsSettled = func() bool { return true } // what a store with no reflector yet says

	ts := startServerUnready(t, opts)
	code, body := readiness(t, ts)
	for deadline := time.Now().Add(time.Minute); strings.Contains(body, "starting") && time.Now().Before(deadline); code, body = readiness(t, ts) {
		time.Sleep(10 * time.Millisecond)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the Kubernetes kinds") {
		t.Errorf("readiness %d %q while the kind resolves, want 503 saying why", code, body)
	}

	close(discovery)
	for deadline := time.Now().Add(time.Minute); code != http.StatusOK && time.Now().Before(deadline); code, body = readiness(t, ts) {
		time.Sleep(10 * time.Millisecond)
	}
	if code != http.StatusOK || !resolved.Load() {
		t.Errorf("readiness %d %q once the kind resolved", code, body)
	}
}

// readiness returns the status and body of the server's readiness probe.
func readiness(t *testing.T, ts *testServer) (int, string) {
	t.Helper()
	resp, err := http.Get(ts.ready + "/readiness")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
