package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
)

// newClient returns the HTTP/1.1 keep-alive client every worker shares, and
// its transport. dials counts the connections it opens.
func newClient(opts *Options, dials *atomic.Int64) (*http.Client, *http.Transport, error) {
	tlsConf := &tls.Config{InsecureSkipVerify: opts.Insecure} //nolint:gosec // only with -insecure
	if opts.CACertFile != "" {
		pemBytes, err := os.ReadFile(opts.CACertFile)
		if err != nil {
			return nil, nil, fmt.Errorf("reading -cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, nil, fmt.Errorf("reading -cacert %s: no PEM certificate in it", opts.CACertFile)
		}
		tlsConf.RootCAs = pool
	}
	dialer := &net.Dialer{Timeout: opts.Timeout}
	tr := &http.Transport{
		Proxy: nil, // a loopback tool: never go through $HTTPS_PROXY
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				dials.Add(1)
			}
			return c, err
		},
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: opts.Timeout,
		// HTTP/1.1 only: a non-nil empty TLSNextProto turns HTTP/2 off.
		ForceAttemptHTTP2: false,
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
		// At most one connection per worker, all kept alive: no surplus dial
		// when a connection frees up while another is being opened.
		MaxConnsPerHost:     opts.Concurrency,
		MaxIdleConns:        opts.Concurrency,
		MaxIdleConnsPerHost: opts.Concurrency,
		DisableCompression:  true,
	}
	client := &http.Client{
		Transport: tr,
		Timeout:   opts.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is an unexpected status
		},
	}
	return client, tr, nil
}

// outcome classifies one request.
type outcome int

const (
	outcomeOK        outcome = iota
	outcomeTransport         // no complete response: dial, TLS, timeout, reset, body read
	outcomeStatus            // a status other than -expect-status
	outcomeBody              // the body lacks -expect-body-contains
	numOutcomes
)

// target sends the configured request. It is read-only once built and safe
// for concurrent use.
type target struct {
	client       *http.Client
	url          string
	body         []byte
	contentType  string
	expectStatus int
	expectBody   []byte
}

// reply is what one request produced.
type reply struct {
	outcome outcome
	// detail describes an error; proto describes a successful response's
	// protocol when asked for. Both are empty otherwise.
	detail, proto string
}

// send performs one request and reads its response body in full into buf, so
// the connection can be reused. It describes the protocol of a successful
// response when describe is true.
func (t *target) send(ctx context.Context, buf *bytes.Buffer, describe bool) reply {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(t.body))
	if err != nil {
		return reply{outcome: outcomeTransport, detail: err.Error()}
	}
	req.Header.Set("Content-Type", t.contentType)
	resp, err := t.client.Do(req)
	if err != nil {
		return reply{outcome: outcomeTransport, detail: err.Error()}
	}
	buf.Reset()
	_, err = buf.ReadFrom(resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return reply{outcome: outcomeTransport, detail: fmt.Sprintf("reading the response body: %v", err)}
	case resp.StatusCode != t.expectStatus:
		return reply{outcome: outcomeStatus, detail: fmt.Sprintf("status %d, body %q", resp.StatusCode, truncate(buf.Bytes(), 200))}
	case t.expectBody != nil && !bytes.Contains(buf.Bytes(), t.expectBody):
		return reply{outcome: outcomeBody, detail: fmt.Sprintf("body without %q: %q", t.expectBody, truncate(buf.Bytes(), 200))}
	}
	r := reply{outcome: outcomeOK}
	if describe {
		r.proto = describeProto(resp)
	}
	return r
}

// describeProto names the protocol a response came over, e.g. "HTTP/1.1
// over TLS 1.3".
func describeProto(resp *http.Response) string {
	if resp.TLS == nil {
		return resp.Proto + " (cleartext)"
	}
	return resp.Proto + " over " + tls.VersionName(resp.TLS.Version)
}

func truncate(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return b[:n]
}

// errCanceled reports whether r failed only because ctx was canceled, in which
// case it is not counted.
func errCanceled(ctx context.Context, r reply) bool {
	return r.outcome == outcomeTransport && ctx.Err() != nil
}
