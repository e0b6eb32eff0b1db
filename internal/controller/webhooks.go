package controller

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/pki"
)

// The controller's own admission webhooks
// (docs/compatibility.md#controller-webhooks): for each kind, a mutating one
// that defaults and a validating one that runs the checks of validation.go. The
// controller serves them with a certificate it issues itself from Warden's CA,
// and writes the webhook configurations that point the API server at them.

const (
	// webhookCertValidity is how long the webhook server's certificate
	// lasts; it is renewed well before.
	webhookCertValidity = 365 * 24 * time.Hour
	webhookCertRenewal  = 30 * 24 * time.Hour
	// webhookRefresh is how often the certificate and the webhook
	// configurations are checked against the CA.
	webhookRefresh = 15 * time.Second
	webhookRetry   = time.Second

	// The names of the controller's webhook configurations, as Kubewarden's
	// chart names them.
	mutatingConfigName   = "kubewarden-controller-mutating-webhook-configuration"
	validatingConfigName = "kubewarden-controller-validating-webhook-configuration"

	// defaultPolicyServer is the PolicyServer of a policy that names none.
	defaultPolicyServer = "default"
)

// webhookKind is a kind the controller's webhooks admit.
type webhookKind struct {
	kind   string
	plural string
}

var webhookKinds = []webhookKind{
	{policiesv1.KindPolicyServer, "policyservers"},
	{policiesv1.KindClusterAdmissionPolicy, "clusteradmissionpolicies"},
	{policiesv1.KindAdmissionPolicy, "admissionpolicies"},
	{policiesv1.KindClusterAdmissionPolicyGroup, "clusteradmissionpolicygroups"},
	{policiesv1.KindAdmissionPolicyGroup, "admissionpolicygroups"},
}

func (k webhookKind) mutatePath() string {
	return "/mutate-policies-kubewarden-io-v1-" + strings.ToLower(k.kind)
}

func (k webhookKind) validatePath() string {
	return "/validate-policies-kubewarden-io-v1-" + strings.ToLower(k.kind)
}

// registerWebhooks adds the handlers of every kind to srv. PolicyServers'
// image pull Secrets are read through c, in namespace.
func registerWebhooks(srv crwebhook.Server, c client.Reader, namespace string) {
	for _, k := range webhookKinds {
		a := &kindAdmission{kind: k.kind, reader: c, namespace: namespace}
		srv.Register(k.mutatePath(), &crwebhook.Admission{Handler: admission.HandlerFunc(a.mutate)})
		srv.Register(k.validatePath(), &crwebhook.Admission{Handler: admission.HandlerFunc(a.validate)})
	}
}

// kindAdmission admits the objects of one kind.
type kindAdmission struct {
	kind      string
	reader    client.Reader
	namespace string
}

// decode reads a policy or PolicyServer from raw.
func (a *kindAdmission) decode(raw []byte) (client.Object, error) {
	var obj client.Object
	if a.kind == policiesv1.KindPolicyServer {
		obj = &policiesv1.PolicyServer{}
	} else {
		obj = policiesv1.NewPolicy(a.kind)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("decoding the %s: %w", a.kind, err)
	}
	return obj, nil
}

// mutate adds the finalizer, and names the default PolicyServer in a
// policy that names none. It patches only those fields, so nothing else of
// the object changes on the way through.
func (a *kindAdmission) mutate(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj, err := a.decode(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	var ops []jsonpatch.JsonPatchOperation
	if p, ok := obj.(policiesv1.Policy); ok && p.GetPolicyServer() == "" {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/policyServer", defaultPolicyServer))
	}
	if obj.GetDeletionTimestamp().IsZero() && !controllerutil.ContainsFinalizer(obj, policiesv1.Finalizer) {
		if len(obj.GetFinalizers()) == 0 {
			ops = append(ops, jsonpatch.NewOperation("add", "/metadata/finalizers", []string{policiesv1.Finalizer}))
		} else {
			ops = append(ops, jsonpatch.NewOperation("add", "/metadata/finalizers/-", policiesv1.Finalizer))
		}
	}
	if len(ops) == 0 {
		return admission.Allowed("")
	}
	return admission.Patched("", ops...)
}

// validate runs the checks of the kind. An update that leaves the spec
// alone, or of an object being deleted, is let through: it only moves
// metadata (finalizers, labels), and must not be stuck behind a check
// that an older object never passed.
func (a *kindAdmission) validate(ctx context.Context, req admission.Request) admission.Response {
	switch req.Operation {
	case admissionv1.Create:
	case admissionv1.Update:
		if specUnchanged(req.OldObject.Raw, req.Object.Raw) {
			return admission.Allowed("")
		}
	default:
		return admission.Allowed("")
	}
	obj, err := a.decode(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return admission.Allowed("")
	}
	var errs field.ErrorList
	switch o := obj.(type) {
	case *policiesv1.PolicyServer:
		errs = validatePolicyServer(ctx, a.reader, a.namespace, o)
	case policiesv1.Policy:
		var old policiesv1.Policy
		if req.Operation == admissionv1.Update {
			prev, err := a.decode(req.OldObject.Raw)
			if err != nil {
				return admission.Errored(http.StatusBadRequest, err)
			}
			old = prev.(policiesv1.Policy)
		}
		errs = validatePolicy(o, old)
	}
	if len(errs) == 0 {
		return admission.Allowed("")
	}
	status := invalid(a.kind, obj.GetName(), errs).ErrStatus
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
}

// specUnchanged reports whether two encodings of an object have the same
// spec.
func specUnchanged(oldRaw, newRaw []byte) bool {
	var o, n struct {
		Spec any `json:"spec"`
	}
	if json.Unmarshal(oldRaw, &o) != nil || json.Unmarshal(newRaw, &n) != nil {
		return false
	}
	return reflect.DeepEqual(o.Spec, n.Spec)
}

// webhookCertificate is the webhook server's certificate, issued by Warden's
// CA for the webhook Service (or the development URL's host). Every
// controller replica issues its own and keeps it current; the webhook
// server asks for it on each TLS handshake.
type webhookCertificate struct {
	client    client.Client // uncached: it runs before the caches sync
	logger    logr.Logger
	namespace string
	dnsNames  []string
	ips       []net.IP

	mu      sync.RWMutex
	cert    *tls.Certificate
	certPEM []byte
}

// newWebhookCertificate returns the certificate source for the webhook
// Service serviceName in namespace or, when devURL is set, for its host.
func newWebhookCertificate(c client.Client, logger logr.Logger, namespace, serviceName, devURL string) (*webhookCertificate, error) {
	w := &webhookCertificate{client: c, logger: logger, namespace: namespace}
	if devURL == "" {
		w.dnsNames = serviceDNSNames(serviceName, namespace)
		return w, nil
	}
	u, err := url.Parse(devURL)
	if err != nil {
		return nil, fmt.Errorf("the controller webhook URL: %w", err)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil {
		w.ips = []net.IP{ip}
	} else {
		w.dnsNames = []string{u.Hostname()}
	}
	return w, nil
}

// serviceDNSNames are the names a Service answers to inside the cluster.
func serviceDNSNames(name, namespace string) []string {
	return []string{name, name + "." + namespace, name + "." + namespace + ".svc", name + "." + namespace + ".svc.cluster.local"}
}

// GetCertificate serves as tls.Config.GetCertificate.
func (w *webhookCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.cert == nil {
		return nil, errors.New("the webhook certificate is not issued yet")
	}
	return w.cert, nil
}

// Start keeps the certificate current until ctx is done: it implements
// manager.Runnable.
func (w *webhookCertificate) Start(ctx context.Context) error {
	return poll(ctx, w.logger, webhookRefresh, w.refresh)
}

// NeedLeaderElection is false: every replica serves the webhooks.
func (w *webhookCertificate) NeedLeaderElection() bool { return false }

// refresh issues a certificate when there is none, when it nears its expiry,
// or when the CA changed.
func (w *webhookCertificate) refresh(ctx context.Context) error {
	now := time.Now()
	ca, err := ensureCA(ctx, w.client, w.namespace, now)
	if err != nil {
		return err
	}
	w.mu.RLock()
	current := w.certPEM
	w.mu.RUnlock()
	if current != nil && validFrom(current, ca, now) {
		return nil
	}
	pair, err := ca.IssueServer(w.dnsNames, w.ips, now, webhookCertValidity)
	if err != nil {
		return fmt.Errorf("issuing the webhook certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		return fmt.Errorf("loading the webhook certificate: %w", err)
	}
	w.mu.Lock()
	w.cert, w.certPEM = &cert, pair.CertPEM
	w.mu.Unlock()
	return nil
}

// validFrom reports whether certPEM is signed by ca and far from expiry.
func validFrom(certPEM []byte, ca *pki.CA, now time.Time) bool {
	cert, err := pki.ParseCertificate(certPEM)
	return err == nil && !pki.NeedsRenewal(cert, now, webhookCertRenewal) && pki.IssuedBy(certPEM, ca, "", now)
}

// webhookConfigurations writes the controller's webhook configurations and
// keeps their CA bundle current. Only the leader writes them.
type webhookConfigurations struct {
	client    client.Client
	logger    logr.Logger
	namespace string
	service   string // the webhook Service, when url is empty
	url       string // development: the webhook server's base URL
}

// Start implements manager.Runnable.
func (c *webhookConfigurations) Start(ctx context.Context) error {
	return poll(ctx, c.logger, webhookRefresh, c.apply)
}

// NeedLeaderElection is true: one writer is enough.
func (c *webhookConfigurations) NeedLeaderElection() bool { return true }

func (c *webhookConfigurations) apply(ctx context.Context) error {
	bundle, err := caBundle(ctx, c.client, c.namespace)
	if err != nil {
		return err
	}
	if err := c.waitForFirstEndpoint(ctx); err != nil {
		return err
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: mutatingConfigName}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c.client, mutating, func() error {
		mutating.Labels = ownWebhookLabels(mutating.Labels)
		mutating.Webhooks = nil
		for _, k := range webhookKinds {
			mutating.Webhooks = append(mutating.Webhooks, asMutating(c.webhook("m", k, k.mutatePath(), bundle)))
		}
		return nil
	}); err != nil {
		return fmt.Errorf("writing %s: %w", mutatingConfigName, err)
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: validatingConfigName}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c.client, validating, func() error {
		validating.Labels = ownWebhookLabels(validating.Labels)
		validating.Webhooks = nil
		for _, k := range webhookKinds {
			validating.Webhooks = append(validating.Webhooks, c.webhook("v", k, k.validatePath(), bundle))
		}
		return nil
	}); err != nil {
		return fmt.Errorf("writing %s: %w", validatingConfigName, err)
	}
	return nil
}

// waitForFirstEndpoint returns an error, which apply retries, while the
// configurations do not exist yet and the webhook Service has no ready
// endpoint. They fail closed: written as soon as the controller starts, they
// made the API server refuse every PolicyServer and policy for the seconds
// before the controller's pod was ready, the default PolicyServer of a
// `helm install` among them ("no endpoints available for service"). Once
// they exist they are kept current whatever the endpoints: a rollout of the
// controller keeps a ready pod. With --dev-webhook-url there is no Service
// to wait for.
func (c *webhookConfigurations) waitForFirstEndpoint(ctx context.Context) error {
	if c.url != "" {
		return nil
	}
	err := c.client.Get(ctx, client.ObjectKey{Name: validatingConfigName}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	var endpoints discoveryv1.EndpointSliceList
	if err := c.client.List(ctx, &endpoints, client.InNamespace(c.namespace), client.MatchingLabels{discoveryv1.LabelServiceName: c.service}); err != nil {
		return fmt.Errorf("reading the endpoints of the webhook Service %s/%s: %w", c.namespace, c.service, err)
	}
	if !hasReadyEndpoint(endpoints.Items) {
		return fmt.Errorf("the webhook Service %s/%s has no ready endpoint yet: not writing the webhook configurations", c.namespace, c.service)
	}
	return nil
}

// hasReadyEndpoint reports whether one of slices has an endpoint ready to
// take requests (an endpoint that does not say counts as ready, as the API
// says).
func hasReadyEndpoint(slices []discoveryv1.EndpointSlice) bool {
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Ready, true) {
				return true
			}
		}
	}
	return false
}

// webhook is the webhook of kind k at path; prefix is "m" or "v", as in
// Kubewarden's webhook names (mpolicyserver.kb.io).
func (c *webhookConfigurations) webhook(prefix string, k webhookKind, path string, bundle []byte) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:         prefix + strings.ToLower(k.kind) + ".kb.io",
		ClientConfig: clientConfig(c.url, c.namespace, c.service, path, bundle),
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{policiesv1.GroupVersion.Group}, APIVersions: []string{policiesv1.GroupVersion.Version},
				Resources: []string{k.plural},
			},
		}},
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
	}
}

func ownWebhookLabels(labels map[string]string) map[string]string {
	if labels == nil {
		labels = map[string]string{}
	}
	labels[partOfLabel] = partOf
	labels["app.kubernetes.io/component"] = "controller"
	return labels
}

// poll runs f now and then every interval until ctx is done. A failed run
// (the API server may be briefly unreachable, the CA not made yet) is logged
// and retried sooner.
func poll(ctx context.Context, logger logr.Logger, interval time.Duration, f func(context.Context) error) error {
	for {
		wait := interval
		if err := f(ctx); err != nil && ctx.Err() == nil {
			if !errors.Is(err, errNoCA) { // the other runnable is making it
				logger.Error(err, "refreshing the controller's webhooks")
			}
			wait = webhookRetry
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}
