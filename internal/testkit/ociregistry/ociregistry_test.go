package ociregistry_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/testkit/ociregistry"
)

// TestRegistry pushes a module to the registry and pulls it back, as
// Warden's clients reach it: with the sources.yml SourcesFile writes, and
// refused without it over TLS.
func TestRegistry(t *testing.T) {
	module := []byte("\x00asm\x01\x00\x00\x00registry")
	fetcher := func(t *testing.T, sourcesFile string) *policyfetch.Fetcher {
		var src *policyfetch.Sources
		if sourcesFile != "" {
			var err error
			if src, err = policyfetch.LoadSources(sourcesFile); err != nil {
				t.Fatal(err)
			}
		}
		f, err := policyfetch.New(policyfetch.Options{StoreDir: t.TempDir(), Sources: src,
			DockerConfigPath: filepath.Join(t.TempDir(), "none.json")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		return f
	}
	for _, tc := range []struct {
		name   string
		opts   []ociregistry.Option
		wantCA bool
	}{
		{name: "TLS", wantCA: true},
		{name: "plain HTTP", opts: []ociregistry.Option{ociregistry.Plain()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int64
			count := ociregistry.Wrap(func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					requests.Add(1)
					h.ServeHTTP(w, r)
				})
			})
			reg := ociregistry.Start(t, append(tc.opts, count)...)
			if (reg.CA != nil) != tc.wantCA || !strings.HasPrefix(reg.Host, "127.0.0.1:") {
				t.Fatalf("host %s, CA %v; want 127.0.0.1:port, a CA: %t", reg.Host, reg.CA, tc.wantCA)
			}
			sources := reg.SourcesFile(t)
			uri := "registry://" + reg.Host + "/policies/x:v1"
			if _, err := fetcher(t, sources).Push(context.Background(), uri, module, nil); err != nil {
				t.Fatal(err)
			}
			m, err := fetcher(t, sources).Fetch(context.Background(), uri)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(m.Path); err != nil || string(got) != string(module) {
				t.Errorf("pulled %q, %v; want %q", got, err, module)
			}
			if requests.Load() == 0 {
				t.Error("Wrap saw no request")
			}
			_, err = fetcher(t, "").Fetch(context.Background(), uri)
			if tc.wantCA && (err == nil || !strings.Contains(err.Error(), "signed by an unknown authority")) {
				t.Errorf("without sources.yml: %v, want an unknown authority", err)
			}
		})
	}
}
