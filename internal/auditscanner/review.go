package auditscanner

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

const (
	// requestTimeout bounds one /audit request, as Kubewarden's scanner
	// does.
	requestTimeout = 10 * time.Second
	// maxAnswerBytes bounds the answer read from a policy server.
	maxAnswerBytes = 64 << 20
	// maxErrorBodyBytes bounds the part of an error answer quoted in the
	// error result's message.
	maxErrorBodyBytes = 1 << 10
)

// reviewer sends /audit requests to the policy servers. It is safe for
// concurrent use.
type reviewer struct {
	client *http.Client
	// proxy is the transport's: a host reached through a proxy is not
	// looked up here.
	proxy func(*http.Request) (*url.URL, error)
	// resolver looks the policy servers' names up; nil is the system's.
	// Tests set it, so that no lookup leaves the machine.
	resolver *net.Resolver

	mu    sync.Mutex
	names map[string]*nameLookup // by host name, for the run
}

// nameLookup is the lookup of a policy server's host name, made once per
// run: done is closed once err says whether it resolved.
type nameLookup struct {
	done chan struct{}
	err  error
}

// newReviewer returns a reviewer that trusts the system's CAs and those of
// --extra-ca, presents --client-cert when given, and opens up to maxConns
// connections to each policy server, kept open and reused (a request waits
// for a free one): Kubewarden's scanner opens one per request, a TLS
// handshake each. HTTP/2 is off, so that the connections, not one
// multiplexed one, spread over the replicas behind a Service.
func newReviewer(o *Options, maxConns int) (*reviewer, error) {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if o.ExtraCA != "" {
		pem, err := os.ReadFile(o.ExtraCA)
		if err != nil {
			return nil, fmt.Errorf("reading --extra-ca: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--extra-ca %s holds no PEM certificate", o.ExtraCA)
		}
	}
	tlsConfig := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		RootCAs:            roots,
		InsecureSkipVerify: o.InsecureSSL, //nolint:gosec // --insecure-ssl, for development, as in Kubewarden
	}
	if o.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(o.ClientCert, o.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("loading --client-cert and --client-key: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	transport.ForceAttemptHTTP2 = false
	transport.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	transport.MaxConnsPerHost = maxConns
	transport.MaxIdleConns = maxConns
	transport.MaxIdleConnsPerHost = maxConns
	return &reviewer{client: &http.Client{Transport: transport, Timeout: requestTimeout}, proxy: transport.Proxy,
		names: map[string]*nameLookup{}}, nil
}

// resolve returns why the host of req's URL does not resolve, or nil when
// it does, when it is an address, or when a proxy reaches it. The name is
// looked up once per run, within requestTimeout: without it, an object's
// request to a Service name that no DNS server answers for (a cluster
// without DNS) would fail only at requestTimeout, with nothing but
// "context deadline exceeded", and every object would wait as long again.
func (rv *reviewer) resolve(ctx context.Context, req *http.Request) error {
	host := req.URL.Hostname()
	if net.ParseIP(host) != nil {
		return nil
	}
	if rv.proxy != nil {
		if p, err := rv.proxy(req); err == nil && p != nil {
			return nil
		}
	}
	rv.mu.Lock()
	l, ok := rv.names[host]
	if !ok {
		l = &nameLookup{done: make(chan struct{})}
		rv.names[host] = l
	}
	rv.mu.Unlock()
	if ok {
		select {
		case <-l.done:
			return l.err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	resolver := rv.resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	lookupCtx, cancel := context.WithTimeout(ctx, requestTimeout)
	_, l.err = resolver.LookupHost(lookupCtx, host)
	cancel()
	if l.err != nil && ctx.Err() != nil {
		// The run is ending: that says nothing of the name.
		rv.mu.Lock()
		delete(rv.names, host)
		rv.mu.Unlock()
		l.err = context.Cause(ctx)
	}
	close(l.done)
	return l.err
}

// close closes the idle connections and forgets the names looked up: the
// next run looks them up again.
func (rv *reviewer) close() {
	rv.client.CloseIdleConnections()
	rv.mu.Lock()
	rv.names = map[string]*nameLookup{}
	rv.mu.Unlock()
}

// reviewBody returns the AdmissionReview an audit sends for obj
// (docs/compatibility.md#audit-scanner): a CREATE of the whole object, the
// request uid being the object's, and the resource being named by its kind, as
// Kubewarden does.
func reviewBody(obj *unstructured.Unstructured) ([]byte, error) {
	req, err := auditRequest(obj, obj.GetKind())
	if err != nil {
		return nil, err
	}
	return json.Marshal(admissionv1.AdmissionReview{Request: req})
}

// auditRequest returns the AdmissionRequest of an audit of obj: a CREATE
// of the whole object, the request uid being the object's, of resource.
func auditRequest(obj *unstructured.Unstructured, resource string) (*admissionv1.AdmissionRequest, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	gvk := obj.GroupVersionKind()
	kind := metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}
	return &admissionv1.AdmissionRequest{
		UID:         obj.GetUID(),
		Kind:        kind,
		Resource:    metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resource},
		RequestKind: &kind,
		Name:        obj.GetName(),
		Namespace:   obj.GetNamespace(),
		Operation:   admissionv1.Create,
		Object:      runtime.RawExtension{Raw: raw},
	}, nil
}

// verdict is a policy's answer about one object.
type verdict struct {
	allowed bool
	// message is the answer's status message, or the error.
	message string
	// errored: the policy could not evaluate the object (an error result).
	errored bool
	// warned: the policy would change the object (a
	// MutatingAdmissionPolicy's warn result); message says how.
	warned bool
	// unavailable: the policy server gave no answer (unreachable, an HTTP
	// error, an answer that is not a review); the scope is then incomplete.
	unavailable bool
}

// audit posts body to url and returns the policy's verdict. An answer with
// status code 500 is an evaluation error of the policy: errored, with its
// message.
func (rv *reviewer) audit(ctx context.Context, url string, body []byte) verdict {
	unavailable := func(err error) verdict {
		return verdict{message: err.Error(), errored: true, unavailable: true}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return unavailable(fmt.Errorf("building the audit request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	if err := rv.resolve(ctx, req); err != nil {
		return unavailable(fmt.Errorf("policy server unreachable: %w", err))
	}
	resp, err := rv.client.Do(req)
	if err != nil {
		return unavailable(fmt.Errorf("policy server unreachable: %w", err))
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return unavailable(fmt.Errorf("reading the policy server's answer: %w", err))
	}
	if resp.StatusCode != http.StatusOK {
		if len(answer) > maxErrorBodyBytes {
			answer = append(answer[:maxErrorBodyBytes:maxErrorBodyBytes], "..."...)
		}
		return unavailable(fmt.Errorf("policy server answered %s: %s", resp.Status, bytes.TrimSpace(answer)))
	}
	var review auditAnswer
	if err := json.Unmarshal(answer, &review); err != nil {
		return unavailable(fmt.Errorf("decoding the policy server's answer: %w", err))
	}
	if review.Response == nil {
		return unavailable(errors.New("the policy server's answer has no response"))
	}
	v := verdict{allowed: review.Response.Allowed}
	if st := review.Response.Status; st != nil {
		v.message = st.Message
		v.errored = st.Code == http.StatusInternalServerError
	}
	return v
}

// auditAnswer is the part of an AdmissionReview answer that a verdict is
// made of: decoding only it spares decoding patches, warnings and audit
// annotations the scanner does not use.
type auditAnswer struct {
	Response *struct {
		Allowed bool `json:"allowed"`
		Status  *struct {
			Message string `json:"message"`
			Code    int32  `json:"code"`
		} `json:"status"`
	} `json:"response"`
}
