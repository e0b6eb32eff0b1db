package policyserver_test

import (
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
	get := func() (int, string) {
		resp, err := http.Get(ts.ready + "/readiness")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
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
