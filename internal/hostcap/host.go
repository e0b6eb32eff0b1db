package hostcap

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/verify"
)

// Handler answers decoded host-capability requests with the JSON the guest
// reads. An error is the answer of a failed call: its message reaches the
// guest, after "Callback evaluation failure: ".
type Handler interface {
	Handle(ctx context.Context, req Request) ([]byte, error)
}

// callbackFailure prefixes the errors of handlers, as Kubewarden's host
// does for every request it hands to its callback handler.
const callbackFailure = "Callback evaluation failure: "

// Host answers the host calls of policies with a Handler: it decodes the
// guest's payload (Decode), asks the handler, and returns its answer, or its
// error as Kubewarden words it ("Callback evaluation failure: <message>").
// It implements the engine's HostCapabilities. It does not check what the
// policy was granted: the engine does, before calling it. Safe for
// concurrent use when its Handler is.
type Host struct {
	handler Handler
}

// NewHost returns a Host that answers with h.
func NewHost(h Handler) *Host { return &Host{handler: h} }

// HostCall answers one host call of the oci, net, crypto or kubernetes
// namespace.
func (h *Host) HostCall(ctx context.Context, namespace, operation string, payload []byte) ([]byte, error) {
	req, err := Decode(namespace, operation, payload)
	if err != nil {
		return nil, err
	}
	out, err := h.handler.Handle(ctx, req)
	if err != nil {
		return nil, errors.New(callbackFailure + err.Error())
	}
	return out, nil
}

// ListResourcesAll lists every object of a kind (a list_resources_all
// without selectors), for the data of Rego policies: it implements the
// engine's KubernetesReader. Its error is the handler's, without the
// prefix guests see.
func (h *Host) ListResourcesAll(ctx context.Context, apiVersion, kind string) ([]byte, error) {
	return h.handler.Handle(ctx, KubernetesListResourceAll{APIVersion: apiVersion, Kind: kind})
}

// ResourcePluralName answers the plural name of a kind, as a JSON string.
func (h *Host) ResourcePluralName(ctx context.Context, apiVersion, kind string) ([]byte, error) {
	return h.handler.Handle(ctx, KubernetesGetResourcePluralName{APIVersion: apiVersion, Kind: kind})
}

// ListsChangedSince tells whether the objects of a kind changed since a
// time: it implements the engine's KubernetesChanges. Only a Direct
// handler whose Kubernetes keeps a reflector of the kind can tell.
func (h *Host) ListsChangedSince(apiVersion, kind string, since time.Time) (changed, tracked bool) {
	d, ok := h.handler.(*Direct)
	if !ok || d.kube == nil {
		return false, false
	}
	return d.kube.ListsChangedSince(apiVersion, kind, since)
}

// Options configure a Direct handler.
type Options struct {
	// Registry reads manifests, blobs and signatures, under its sources.yml
	// and Docker credentials; its Verifier, if any, is not used. Nil: the
	// oci host capabilities fail.
	Registry *policyfetch.Fetcher
	// Kubernetes answers the kubernetes host capabilities. Nil: they fail
	// with Kubewarden's "kube::Client was not initialized properly".
	Kubernetes *Kubernetes
	// Resolver looks host names up; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// Roots are the authorities a certificate is checked against when the
	// request gives no chain; nil means the system's roots (Kubewarden uses
	// Mozilla's, which Debian's ca-certificates package ships).
	Roots *x509.CertPool
	// Now is the clock of caches and of certificate checks; nil means
	// time.Now.
	Now func() time.Time
	// SigstoreTrust is the Sigstore trust root keyless signatures
	// (SigstoreKeylessVerify, SigstoreKeylessPrefixVerify,
	// SigstoreGithubActionsVerify) are checked against, offline; nil: those
	// requests fail and say so.
	SigstoreTrust *verify.TrustRoot
}

// Direct answers requests from the real world: registries, the resolver,
// certificates and the Kubernetes API server. OCI and signature answers are
// cached 60 s (successes only), as Kubewarden caches them. Safe for
// concurrent use.
type Direct struct {
	registry *policyfetch.Fetcher
	kube     *Kubernetes
	resolver *net.Resolver
	roots    *x509.CertPool
	now      func() time.Time
	trust    *verify.TrustRoot
	oci      *ttlCache // by variant and request
}

// ociCacheTTL is how long OCI and signature answers are kept.
const ociCacheTTL = 60 * time.Second

// NewDirect returns a Direct handler.
func NewDirect(opts Options) *Direct {
	d := &Direct{
		registry: opts.Registry,
		kube:     opts.Kubernetes,
		resolver: opts.Resolver,
		roots:    opts.Roots,
		now:      opts.Now,
		trust:    opts.SigstoreTrust,
	}
	if d.resolver == nil {
		d.resolver = net.DefaultResolver
	}
	if d.now == nil {
		d.now = time.Now
	}
	d.oci = newTTLCache(ociCacheTTL, d.now)
	return d
}

// Handle implements Handler.
func (d *Direct) Handle(ctx context.Context, req Request) ([]byte, error) {
	switch r := req.(type) {
	case OCIManifestDigest, OCIManifest, OCIManifestAndConfig,
		SigstorePubKeyVerify, SigstoreKeylessVerify, SigstoreKeylessPrefixVerify,
		SigstoreGithubActionsVerify, SigstoreCertificateVerify:
		return d.oci.get(cacheKey(r), func() ([]byte, error) { return d.handleOCI(ctx, r) })
	case DNSLookupHost:
		return d.lookup(ctx, r.Host)
	case CryptoIsCertificateTrusted:
		resp, err := verifyCertificate(r.Request, d.roots, d.now())
		if err != nil {
			return nil, err
		}
		return json.Marshal(resp)
	case KubernetesListResourceNamespace, KubernetesListResourceAll, KubernetesGetResource, KubernetesCanI,
		KubernetesGetResourcePluralName:
		if d.kube == nil {
			return nil, errors.New("kube::Client was not initialized properly")
		}
		return d.kube.Handle(ctx, r)
	}
	return nil, fmt.Errorf("unsupported request %s", req.Variant())
}

// lookup answers net/v1/dns_lookup_host: {"ips": [...]}.
func (d *Direct) lookup(ctx context.Context, host string) ([]byte, error) {
	addrs, err := d.resolver.LookupHost(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("failed to lookup address information: %w", err)
	}
	return json.Marshal(struct {
		IPs []string `json:"ips"`
	}{IPs: addrs})
}

// cacheKey identifies a request in a cache: its variant and its JSON.
func cacheKey(r Request) string {
	b, err := json.Marshal(r)
	if err != nil { // requests are plain data; this cannot happen
		return r.Variant() + fmt.Sprintf("%#v", r)
	}
	return r.Variant() + string(b)
}
