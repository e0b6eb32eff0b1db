package hostcap

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/wardenhq/warden/internal/reflector"
)

// TestAPIServerBackAfterALongOutage replays a row of issue 31: a
// context-aware policy's API server unreachable at start, with readiness
// 503 for minutes and the retries seen to stop after about two, until a
// SIGHUP. The backoff's cap is shortened to 20 ms, and the API server
// stays away for 40 retries at the cap, as many as 20 minutes of the real
// 30 s cap (two minutes of the real backoff are about nine retries), in
// two ways: nothing listens (connections refused), and it accepts
// connections and never answers (requests time out). Then it comes back;
// nothing asks (no readiness probe, no signal), and the kind must be
// resolved and listed by the background retries alone, the reason to wait
// said until then.
func TestAPIServerBackAfterALongOutage(t *testing.T) {
	const retriesAway = 40
	tests := []struct {
		name string
		hang bool
	}{
		{name: "connections refused"},
		{name: "requests that never end", hang: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			var up atomic.Bool
			serve := func(ln net.Listener) {
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if !up.Load() {
						<-r.Context().Done() // an API server that accepts and never answers
						return
					}
					fakeDiscovery(w, r)
				})}
				go srv.Serve(ln)
				t.Cleanup(func() { srv.Close() })
			}
			if tt.hang {
				serve(ln)
			} else {
				ln.Close() // nothing listens there until the API server comes back
			}

			store, err := reflector.Open(filepath.Join(t.TempDir(), "reflectors.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			var dials atomic.Int32
			dialer := &net.Dialer{}
			cfg := &rest.Config{
				Host:    "http://" + addr,
				Timeout: 100 * time.Millisecond, // a request to the silent API server
				Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
					dials.Add(1)
					return dialer.DialContext(ctx, network, address)
				},
			}
			k, err := NewKubernetes(cfg, KubernetesOptions{Store: store})
			if err != nil {
				t.Fatal(err)
			}
			k.retryFirst, k.retryMax = 5*time.Millisecond, 20*time.Millisecond
			t.Cleanup(k.Close)
			if err := k.Reflect("v1", "ConfigMap"); err == nil {
				t.Fatal("the kind was resolved with no API server")
			}

			// Away for retriesAway retries at the cap; nobody asks.
			start := dials.Load()
			deadline := time.Now().Add(5 * time.Minute) // bounds the wait only
			for dials.Load() < start+retriesAway {
				if k.Waiting() == "" {
					t.Fatal("nothing was waited for while the API server was away: a readiness probe would have settled")
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d connections to the API server in 5 minutes, want %d: the retries stopped", dials.Load()-start, retriesAway)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if why := k.Waiting(); !strings.Contains(why, "v1/ConfigMap") {
				t.Errorf("Waiting() = %q, want the kind and the reason", why)
			}

			// Back.
			up.Store(true)
			if !tt.hang {
				if ln, err = net.Listen("tcp", addr); err != nil {
					t.Skipf("the address was taken meanwhile: %v", err)
				}
				serve(ln)
			}
			waitUntilListed(t, k)
		})
	}
}
