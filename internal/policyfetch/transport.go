package policyfetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
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
	// connect bounds connecting, TLS handshake included; idle bounds the
	// wait for any byte of an answer (Options).
	connect, idle time.Duration
	// resolver looks host names up; nil is the system's. Tests set it
	// before the first request, so that no lookup leaves the machine.
	resolver *net.Resolver

	mu     sync.Mutex
	byHost map[string]*http.Transport
}

func newTransport(s *Sources, connect, idle time.Duration) *transport {
	cfg := httpproxy.FromEnvironment()
	if s != nil && s.Proxies != nil {
		cfg = &httpproxy.Config{HTTPProxy: s.Proxies.HTTPProxy, HTTPSProxy: s.Proxies.HTTPSProxy, NoProxy: s.Proxies.NoProxy}
	}
	return &transport{sources: s, proxy: cfg.ProxyFunc(), connect: connect, idle: idle, byHost: map[string]*http.Transport{}}
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
	// The idle timer runs from the request to the headers, then from one
	// read of the body to the next; when it fires it cancels the request.
	ctx, cancel := context.WithCancelCause(req.Context())
	idle := &idleError{host: host, after: t.idle}
	timer := time.AfterFunc(t.idle, func() { cancel(idle) })
	resp, err := t.forHost(host, insecure).RoundTrip(req.WithContext(ctx))
	if err != nil {
		timer.Stop()
		err = t.cause(ctx, host, err)
		cancel(nil)
		return nil, err
	}
	timer.Reset(t.idle)
	resp.Body = &idleBody{ReadCloser: resp.Body, ctx: ctx, cancel: cancel, timer: timer, idle: t.idle}
	return resp, nil
}

// cause returns the error of a request: the idle timeout when it fired,
// the connect timeout when connecting took too long.
func (t *transport) cause(ctx context.Context, host string, err error) error {
	var idle *idleError
	if errors.As(context.Cause(ctx), &idle) {
		return idle
	}
	var (
		ne  net.Error
		dns *net.DNSError // a name server's timeout says which name: describe tells it
	)
	if errors.As(err, &ne) && ne.Timeout() && !errors.As(err, &dns) && ctx.Err() == nil {
		return causef(err, "cannot connect to %s within %s (the fetch connect timeout)", host, t.connect)
	}
	return err
}

// idleError is a fetch that received no byte for the idle timeout.
type idleError struct {
	host  string
	after time.Duration
}

func (e *idleError) Error() string {
	return fmt.Sprintf("no byte received from %s for %s (the fetch idle timeout)", e.host, e.after)
}

// Unwrap makes the idle timeout a deadline, as errors.Is sees it.
func (e *idleError) Unwrap() error { return context.DeadlineExceeded }

// idleBody is an answer's body whose reads keep its idle timer from firing.
type idleBody struct {
	io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	idle   time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		var idle *idleError
		if errors.As(context.Cause(b.ctx), &idle) {
			return n, idle
		}
	}
	if n > 0 {
		b.timer.Reset(b.idle)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

func (t *transport) forHost(host string, insecure bool) *http.Transport {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr, ok := t.byHost[host]; ok {
		return tr
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = func(r *http.Request) (*url.URL, error) { return t.proxy(r.URL) }
	// http.DefaultTransport's dialer, with the connect timeout (and the
	// resolver of tests).
	tr.DialContext = (&net.Dialer{Timeout: t.connect, KeepAlive: 30 * time.Second, Resolver: t.resolver}).DialContext
	tr.TLSHandshakeTimeout = t.connect
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
