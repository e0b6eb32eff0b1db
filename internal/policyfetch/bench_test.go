package policyfetch

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"os"
	"testing"
)

// BenchmarkFetch5MB pulls a 5 MB module from the in-process registry over
// TLS (custom CA from sources): cold is an empty store and a new Fetcher (so
// new connections) each time, cached is the same Fetcher finding it in its
// store.
//
//	go test -run '^$' -bench Fetch5MB -benchtime 50x ./internal/policyfetch/
func BenchmarkFetch5MB(b *testing.B) {
	reg := startRegistry(b, registryOptions{tls: true})
	src := &Sources{SourceAuthorities: map[string][]*x509.Certificate{reg.host: {reg.ca.Cert}}}
	module := make([]byte, 5<<20)
	rand.Read(module)
	copy(module, wasm(""))
	uri := "registry://" + reg.host + "/policies/big:v1"
	push(b, newFetcher(b, src, ""), uri, module)

	b.Run("cold", func(b *testing.B) {
		b.SetBytes(int64(len(module)))
		for b.Loop() {
			dir, err := os.MkdirTemp(b.TempDir(), "store")
			if err != nil {
				b.Fatal(err)
			}
			f, err := New(Options{StoreDir: dir, Sources: src, DockerConfigPath: dir + "/none"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.Fetch(context.Background(), uri); err != nil {
				b.Fatal(err)
			}
			f.Close()
			os.RemoveAll(dir)
		}
	})
	b.Run("cached", func(b *testing.B) {
		f := newFetcher(b, src, "")
		if _, err := f.Fetch(context.Background(), uri); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(module)))
		for b.Loop() {
			if _, err := f.Fetch(context.Background(), uri); err != nil {
				b.Fatal(err)
			}
		}
	})
}
