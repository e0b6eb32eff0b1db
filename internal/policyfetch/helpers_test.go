package policyfetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/wardenhq/warden/internal/pkitest"
	"github.com/wardenhq/warden/internal/testkit/ociregistry"
)

// testRegistry is the registry of internal/testkit/ociregistry, counting
// the requests it answers.
type testRegistry struct {
	host string
	ca   *pkitest.CA // signed its certificate; nil over plain HTTP

	mu   sync.Mutex
	hits map[string]int // "GET manifests", "GET blobs", ...
}

type registryOptions struct {
	tls  bool                            // serve TLS (plain HTTP otherwise)
	wrap func(http.Handler) http.Handler // put in front of the registry
}

func startRegistry(t testing.TB, opts registryOptions) *testRegistry {
	t.Helper()
	r := &testRegistry{hits: map[string]int{}}
	count := func(h http.Handler) http.Handler {
		if opts.wrap != nil {
			h = opts.wrap(h)
		}
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			kind := "other"
			for _, k := range []string{"manifests", "blobs"} {
				if strings.Contains(req.URL.Path, "/"+k+"/") {
					kind = k
				}
			}
			r.mu.Lock()
			r.hits[req.Method+" "+kind]++
			r.mu.Unlock()
			h.ServeHTTP(w, req)
		})
	}
	opt := []ociregistry.Option{ociregistry.Wrap(count)}
	if !opts.tls {
		opt = append(opt, ociregistry.Plain())
	}
	reg := ociregistry.Start(t, opt...)
	r.host, r.ca = reg.Host, reg.CA
	return r
}

func (r *testRegistry) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[key]
}

// serve starts h on 127.0.0.1, over TLS when pair is set, and returns
// host:port.
func serve(t testing.TB, h http.Handler, pair *pkitest.Pair) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if pair != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair.TLSCertificate(t)}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// closedPort returns 127.0.0.1:port where nothing listens.
func closedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// newFetcher returns a Fetcher with an empty store and, unless docker is
// set, no Docker credentials at all.
func newFetcher(t testing.TB, src *Sources, docker string) *Fetcher {
	t.Helper()
	if docker == "" {
		docker = filepath.Join(t.TempDir(), "no-docker-config.json")
	}
	f, err := New(Options{StoreDir: t.TempDir(), Sources: src, DockerConfigPath: docker})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

func insecure(hosts ...string) *Sources { return &Sources{InsecureSources: hosts} }

// wasm returns a small module: the Wasm header and a payload.
func wasm(payload string) []byte {
	return append([]byte("\x00asm\x01\x00\x00\x00"), payload...)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// push publishes a module with Push, failing the test on error.
func push(t testing.TB, f *Fetcher, ref string, module []byte) string {
	t.Helper()
	d, err := f.Push(context.Background(), ref, module, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// storeFiles lists the files under the store, slash-separated.
func storeFiles(t testing.TB, f *Fetcher) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(f.store, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(f.store, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// checkModule checks what Fetch returned against the expected content and
// store path (relative to the store; empty for file://).
func checkModule(t testing.TB, f *Fetcher, m Module, want []byte, storePath string) {
	t.Helper()
	if !bytes.Equal(m.Bytes, want) {
		t.Errorf("Bytes = %q, want %q", m.Bytes, want)
	}
	if m.Digest != sha(want) {
		t.Errorf("Digest = %s, want %s", m.Digest, sha(want))
	}
	if storePath != "" {
		if p := filepath.Join(f.store, filepath.FromSlash(storePath)); m.Path != p {
			t.Errorf("Path = %s, want %s", m.Path, p)
		}
	}
	onDisk, err := os.ReadFile(m.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, want) {
		t.Errorf("file %s holds %q, want %q", m.Path, onDisk, want)
	}
}

// checkErr checks that err is the one-line error want, or contains it when
// want starts with "...".
func checkErr(t testing.TB, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	got := err.Error()
	if strings.Contains(got, "\n") {
		t.Errorf("error spans lines: %q", got)
	}
	if sub, ok := strings.CutPrefix(want, "..."); ok {
		if !strings.Contains(got, sub) {
			t.Errorf("error = %q, want it to contain %q", got, sub)
		}
		return
	}
	if got != want {
		t.Errorf("error = %q\n         want %q", got, want)
	}
}
