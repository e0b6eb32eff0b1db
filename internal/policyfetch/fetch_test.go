package policyfetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/pkitest"
	"github.com/wardenhq/warden/internal/testkit"
)

// moduleServer serves a module and the ways a download goes wrong.
func moduleServer(hits *atomic.Int32) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /policies/x.wasm", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(wasm("from https"))
	})
	mux.HandleFunc("GET /policies/truncated.wasm", func(w http.ResponseWriter, r *http.Request) {
		// Announce more than is sent, then hang up.
		w.Header().Set("Content-Length", "1000")
		w.Write(wasm("tr"))
	})
	mux.HandleFunc("GET /policies/notwasm.wasm", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<html>login page</html>")
	})
	mux.HandleFunc("GET /policies/redirect.wasm", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	return mux
}

func TestFetchHTTP(t *testing.T) {
	ca := pkitest.NewCA(t, "https ca")
	pair := ca.Server(t)
	var hits atomic.Int32
	tlsHost := serve(t, moduleServer(&hits), &pair)
	plainHost := serve(t, moduleServer(&hits), nil)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	sources := func(yaml string) *Sources {
		s, err := ParseSources([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	withCAPath := sources(fmt.Sprintf("source_authorities:\n  %q:\n    - type: Path\n      path: %q\n", tlsHost, caFile))
	withCAData := sources(fmt.Sprintf("source_authorities:\n  %q:\n    - type: Data\n      data: %q\n", tlsHost, ca.CertPEM))
	x := "https://" + tlsHost + "/policies/x.wasm"
	plainX := "http://" + plainHost + "/policies/x.wasm"

	tests := []struct {
		name, uri, store string
		sources          *Sources
		wantErr          string
	}{
		{name: "custom CA by path", uri: x, sources: withCAPath, store: "https/" + tlsHost + "/policies/x.wasm"},
		{name: "custom CA as data", uri: x, sources: withCAData, store: "https/" + tlsHost + "/policies/x.wasm"},
		{name: "insecure source skips verification", uri: x, sources: insecure(tlsHost), store: "https/" + tlsHost + "/policies/x.wasm"},
		{name: "no CA", uri: x,
			wantErr: "fetching " + x + ": the TLS certificate of " + tlsHost + " is signed by an unknown authority: add its CA to source_authorities in sources.yml"},
		{name: "http to an insecure source", uri: plainX, sources: insecure(plainHost), store: "http/" + plainHost + "/policies/x.wasm"},
		{name: "http refused", uri: plainX, sources: withCAPath,
			wantErr: "fetching " + plainX + ": plain http is only allowed for insecure sources: add " + plainHost + " to insecure_sources in sources.yml"},
		{name: "redirect from https to http refused", uri: "https://" + tlsHost + "/policies/redirect.wasm?to=" + plainX, sources: withCAPath,
			wantErr: "fetching https://" + tlsHost + "/policies/redirect.wasm?to=" + plainX + ": plain http is only allowed for insecure sources: add " + plainHost + " to insecure_sources in sources.yml"},
		{name: "not found", uri: "https://" + tlsHost + "/policies/nope.wasm", sources: withCAPath,
			wantErr: "fetching https://" + tlsHost + "/policies/nope.wasm: the server answered 404 Not Found"},
		{name: "truncated download", uri: "https://" + tlsHost + "/policies/truncated.wasm", sources: withCAPath,
			wantErr: "fetching https://" + tlsHost + "/policies/truncated.wasm: download truncated: got 10 of 1000 bytes"},
		{name: "not wasm", uri: "https://" + tlsHost + "/policies/notwasm.wasm", sources: withCAPath,
			wantErr: "fetching https://" + tlsHost + "/policies/notwasm.wasm: the module is not a WebAssembly binary (no \\0asm magic)"},
		{name: "server down", uri: "https://" + closedPort(t) + "/p.wasm",
			wantErr: "...: cannot connect to 127.0.0.1:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFetcher(t, tc.sources, "")
			m, err := f.Fetch(context.Background(), tc.uri)
			if tc.wantErr != "" {
				checkErr(t, err, tc.wantErr)
				if files := storeFiles(t, f); len(files) > 0 {
					t.Errorf("store holds %v after a failure", files)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkModule(t, f, m, wasm("from https"), tc.store)

			// A second fetch comes from the store.
			before := hits.Load()
			if _, err := f.Fetch(context.Background(), tc.uri); err != nil {
				t.Fatal(err)
			}
			if hits.Load() != before {
				t.Errorf("the second fetch downloaded again")
			}
		})
	}
}

func TestFetchFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.wasm")
	if err := os.WriteFile(p, wasm("local"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFetcher(t, nil, "")
	m, err := f.Fetch(context.Background(), "file://"+p)
	if err != nil {
		t.Fatal(err)
	}
	if m.Path != p || m.URI != "file://"+p {
		t.Errorf("got path %s uri %s, want %s, file://%s", m.Path, m.URI, p, p)
	}
	checkModule(t, f, m, wasm("local"), "")
	if files := storeFiles(t, f); len(files) > 0 {
		t.Errorf("file:// copied into the store: %v", files)
	}
	_, err = f.Fetch(context.Background(), "file://"+dir+"/missing.wasm")
	checkErr(t, err, "fetching file://"+dir+"/missing.wasm: open "+dir+"/missing.wasm: no such file or directory")
}

// TestFetchThroughProxy sends http:// modules through a forward proxy named
// by HTTP_PROXY, or by sources.yml's proxies section, which wins. The module
// host does not exist: only the proxy knows it.
func TestFetchThroughProxy(t *testing.T) {
	var viaEnv, viaSources atomic.Int32
	proxy := func(n *atomic.Int32) string {
		return "http://" + serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Host != "policies.invalid" {
				http.Error(w, "unknown host", http.StatusBadGateway)
				return
			}
			n.Add(1)
			w.Write(wasm("proxied"))
		}), nil)
	}
	envProxy, sourcesProxy := proxy(&viaEnv), proxy(&viaSources)
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"} {
		t.Setenv(k, "")
	}
	t.Setenv("HTTP_PROXY", envProxy)
	const uri = "http://policies.invalid/p/x.wasm"

	tests := []struct {
		name    string
		proxies *ProxyConfig
		counter *atomic.Int32
	}{
		{name: "environment", counter: &viaEnv},
		{name: "sources.yml", proxies: &ProxyConfig{HTTPProxy: sourcesProxy}, counter: &viaSources},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFetcher(t, &Sources{InsecureSources: []string{"policies.invalid"}, Proxies: tc.proxies}, "")
			m, err := f.Fetch(context.Background(), uri)
			if err != nil {
				t.Fatal(err)
			}
			checkModule(t, f, m, wasm("proxied"), "http/policies.invalid/p/x.wasm")
			if tc.counter.Load() != 1 {
				t.Errorf("the proxy served %d requests, want 1", tc.counter.Load())
			}
		})
	}
}

// gate holds manifest requests until opened.
type gate struct {
	open chan struct{}
	once sync.Once
}

// release opens the gate. Tests also defer it to their cleanup, after the
// server's, so that a failing test does not hang closing the server.
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && filepath.Base(filepath.Dir(r.URL.Path)) == "manifests" {
			<-g.open
		}
		h.ServeHTTP(w, r)
	})
}

// TestFetchConcurrentDownloadsOnce fetches latest (which is never reused
// from the store) from many goroutines while the registry holds the first
// request: one download serves them all, and a caller that gives up does
// not cancel it for the others.
func TestFetchConcurrentDownloadsOnce(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	reg := startRegistry(t, registryOptions{wrap: g.wrap})
	t.Cleanup(g.release)
	uri := "registry://" + reg.host + "/policies/x:latest"
	push(t, newFetcher(t, insecure(reg.host), ""), uri, wasm("once"))
	f := newFetcher(t, insecure(reg.host), "")

	const n = 8
	var wg sync.WaitGroup
	results := make([]error, n)
	leaver, leave := context.WithCancel(context.Background())
	defer leave()
	for i := range n {
		ctx := context.Background()
		if i == 0 { // the caller that starts the download gives up
			ctx = leaver
		}
		wg.Go(func() {
			m, err := f.Fetch(ctx, uri)
			if err == nil && string(m.Bytes) != string(wasm("once")) {
				err = fmt.Errorf("got %q", m.Bytes)
			}
			results[i] = err
		})
	}
	testkit.Eventually(t, 10*time.Second, "all callers join one download", func() bool { return f.flights.waiting(uri) == n })
	leave()
	testkit.Eventually(t, 10*time.Second, "the first caller leaves", func() bool { return f.flights.waiting(uri) == n-1 })
	g.release()
	wg.Wait()

	if !errors.Is(results[0], context.Canceled) {
		t.Errorf("the caller that gave up got %v, want context.Canceled", results[0])
	}
	for i, err := range results[1:] {
		if err != nil {
			t.Errorf("caller %d: %v", i+1, err)
		}
	}
	if got := reg.count("GET manifests"); got != 1 {
		t.Errorf("%d manifest downloads, want 1", got)
	}
	if got := reg.count("GET blobs"); got != 1 {
		t.Errorf("%d blob downloads, want 1", got)
	}
	if files := storeFiles(t, f); len(files) != 1 {
		t.Errorf("store holds %v, want one module", files)
	}
}

// TestFetchAllLeave checks that the download stops when every caller has
// gone, and that nothing stays in the store.
func TestFetchAllLeave(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	reg := startRegistry(t, registryOptions{wrap: g.wrap})
	t.Cleanup(g.release)
	uri := "registry://" + reg.host + "/policies/x:v1"
	f := newFetcher(t, insecure(reg.host), "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := f.Fetch(ctx, uri)
		done <- err
	}()
	testkit.Eventually(t, 10*time.Second, "the manifest request", func() bool { return reg.count("GET manifests") > 0 })
	cancel()
	checkErr(t, <-done, "fetching "+uri+": context canceled")
	if f.flights.waiting(uri) != 0 {
		t.Errorf("the flight is still registered")
	}
	if files := storeFiles(t, f); len(files) > 0 {
		t.Errorf("store holds %v", files)
	}
}
