package policyfetch

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// transport applies sources.yml to every request, redirects included: plain
// HTTP only to insecure sources, unverified TLS for insecure sources, the
// host's extra certificate authorities otherwise, and the proxies. It keeps
// one http.Transport per host, so connections are reused. It is safe for
// concurrent use.
type transport struct {
	sources *Sources
	proxy   func(*url.URL) (*url.URL, error)
	// resolver looks host names up; nil is the system's. Tests set it
	// before the first request, so that no lookup leaves the machine.
	resolver *net.Resolver

	mu     sync.Mutex
	byHost map[string]*http.Transport
}

func newTransport(s *Sources) *transport {
	cfg := httpproxy.FromEnvironment()
	if s != nil && s.Proxies != nil {
		cfg = &httpproxy.Config{HTTPProxy: s.Proxies.HTTPProxy, HTTPSProxy: s.Proxies.HTTPSProxy, NoProxy: s.Proxies.NoProxy}
	}
	return &transport{sources: s, proxy: cfg.ProxyFunc(), byHost: map[string]*http.Transport{}}
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	host := req.URL.Host
	insecure := t.sources.IsInsecure(host)
	if req.URL.Scheme == "http" && !insecure {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &plainHTTPError{host: host}
	}
	return t.forHost(host, insecure).RoundTrip(req)
}

func (t *transport) forHost(host string, insecure bool) *http.Transport {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr, ok := t.byHost[host]; ok {
		return tr
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = func(r *http.Request) (*url.URL, error) { return t.proxy(r.URL) }
	if t.resolver != nil {
		// http.DefaultTransport's dialer, with the resolver.
		tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Resolver: t.resolver}).DialContext
	}
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure}
	if cas := t.sources.authorities(host); len(cas) > 0 && !insecure {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		for _, c := range cas {
			pool.AddCert(c)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	t.byHost[host] = tr
	return tr
}

// CloseIdleConnections closes the idle connections of every host; the
// http.Client calls it.
func (t *transport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tr := range t.byHost {
		tr.CloseIdleConnections()
	}
}

// plainHTTPError is a plain HTTP request to a host that is not an insecure
// source.
type plainHTTPError struct{ host string }

func (e *plainHTTPError) Error() string {
	return fmt.Sprintf("plain http is only allowed for insecure sources: add %s to insecure_sources in sources.yml", e.host)
}
