// Package ociregistry serves go-containerregistry's in-process OCI registry
// on 127.0.0.1 for tests: over TLS with a certificate of a throwaway
// certificate authority, or over plain HTTP, and writes the sources.yml
// that trusts it. It is the one registry of Warden's tests. Only tests
// import it.
package ociregistry

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/registry"

	"github.com/wardenhq/warden/internal/pkitest"
)

// Registry is a registry serving until the test ends.
type Registry struct {
	// Host is 127.0.0.1:port, the registry part of the references to it.
	Host string
	// CA signed the registry's certificate; nil over plain HTTP.
	CA *pkitest.CA
}

// Option changes how Start serves the registry.
type Option func(*options)

type options struct {
	plain bool
	wrap  func(http.Handler) http.Handler
}

// Plain serves plain HTTP instead of TLS: a registry that sources.yml
// lists under insecure_sources.
func Plain() Option { return func(o *options) { o.plain = true } }

// Wrap puts wrap in front of the registry, to count, refuse or alter the
// requests it answers.
func Wrap(wrap func(http.Handler) http.Handler) Option {
	return func(o *options) { o.wrap = wrap }
}

// Start serves a registry, over TLS with a certificate for 127.0.0.1 of a
// new CA unless Plain, until the test ends.
func Start(t testing.TB, opts ...Option) *Registry {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var h http.Handler = ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0)))
	if o.wrap != nil {
		h = o.wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	r := &Registry{}
	if o.plain {
		srv.Start()
	} else {
		r.CA = pkitest.NewCA(t, "registry ca")
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{r.CA.Server(t).TLSCertificate(t)}}
		srv.StartTLS()
	}
	t.Cleanup(srv.Close)
	r.Host = srv.Listener.Addr().String()
	return r
}

// SourcesFile writes a sources.yml (Kubewarden's format) that lets a
// client reach the registry, trusting its CA or, over plain HTTP, listing
// it as insecure, and returns its path.
func (r *Registry) SourcesFile(t testing.TB) string {
	t.Helper()
	doc := fmt.Sprintf("insecure_sources: [%q]\n", r.Host)
	if r.CA != nil {
		data, err := json.Marshal(string(r.CA.CertPEM))
		if err != nil {
			t.Fatal(err)
		}
		doc = fmt.Sprintf("source_authorities:\n  %q:\n    - {type: Data, data: %s}\n", r.Host, data)
	}
	path := filepath.Join(t.TempDir(), "sources.yml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
