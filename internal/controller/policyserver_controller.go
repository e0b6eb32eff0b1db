package controller

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/pki"
)

// certRenewalMargin is how long before its expiry a serving certificate is
// re-issued.
const certRenewalMargin = 30 * 24 * time.Hour

// PolicyServerReconciler reconciles a PolicyServer into the objects that run
// it in Namespace: its serving certificate, its configuration (the
// policies bound to it), a StatefulSet, a Service and an optional
// PodDisruptionBudget, all owned by the PolicyServer.
type PolicyServerReconciler struct {
	Client client.Client
	Scheme *runtime.Scheme
	// Namespace is where policy servers run (--deployments-namespace).
	Namespace string
	// AlwaysAcceptOnDeploymentsNamespace makes policy servers accept every
	// request about objects of Namespace.
	AlwaysAcceptOnDeploymentsNamespace bool
	// EnableMetrics turns the policy servers' metrics on.
	EnableMetrics bool
	// MetricsPort is the Service port of the metrics when a PolicyServer
	// sets none.
	MetricsPort int32
	// PolicyServerURL, for development, is where the policy servers are
	// reached instead of their Service (see Options.PolicyServerURL); its
	// host goes into the serving certificates.
	PolicyServerURL string
	// Now returns the time certificates are checked against.
	Now func() time.Time

	// Pods holds the settings every policy server pod gets from the
	// controller's flags.
	Pods PodSettings
}

// PodSettings are the controller-wide settings of the policy server pods
// (Kubewarden's controller flags of the same names).
type PodSettings struct {
	// EnableTracing makes policy servers export trace spans
	// (KUBEWARDEN_LOG_FMT=otlp).
	EnableTracing bool
	// OtelSidecar sends metrics and spans to an OpenTelemetry collector
	// sidecar injected by the OpenTelemetry operator, instead of the
	// collector the controller's own OTEL_EXPORTER_OTLP_* variables name.
	OtelSidecar bool
	// OtelEnv are the controller's OTEL_EXPORTER_OTLP_* variables, given
	// to the policy servers when there is no sidecar.
	OtelEnv []corev1.EnvVar
	// OtelCertificateSecret and OtelClientCertificateSecret are Secrets
	// mounted where OTEL_EXPORTER_OTLP_CERTIFICATE and
	// OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE point.
	OtelCertificateSecret       string
	OtelClientCertificateSecret string
	// ClientCAConfigMap, when set, turns on mutual TLS: its client-ca.crt
	// and Warden's CA are the CAs client certificates must chain to.
	ClientCAConfigMap string
	// ImagePullSecrets are added to every policy server pod.
	ImagePullSecrets []string
	// HostNetwork runs the pods in the node's network namespace.
	HostNetwork bool
}

// Reconcile implements reconcile.Reconciler.
func (r *PolicyServerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ps policiesv1.PolicyServer
	if err := r.Client.Get(ctx, req.NamespacedName, &ps); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ps.DeletionTimestamp.IsZero() {
		return r.reconcileDeletion(ctx, &ps)
	}
	if controllerutil.AddFinalizer(&ps, policiesv1.Finalizer) {
		if err := r.Client.Update(ctx, &ps); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}

	before := ps.Status.DeepCopy()
	err := r.reconcileObjects(ctx, &ps)
	if !equalConditions(before.Conditions, ps.Status.Conditions) {
		if serr := r.Client.Status().Update(ctx, &ps); serr != nil && err == nil {
			err = fmt.Errorf("writing the status: %w", serr)
		}
	}
	return ctrl.Result{}, err
}

// reconcileObjects brings every object of ps to its desired state, and
// records each step in ps's conditions. It stops at the first failure.
func (r *PolicyServerReconciler) reconcileObjects(ctx context.Context, ps *policiesv1.PolicyServer) error {
	ca, err := ensureCA(ctx, r.Client, r.Namespace, r.Now())
	if setCondition(ps, policiesv1.CARootSecretReconciled, err); err != nil {
		return err
	}
	err = r.reconcileCertSecret(ctx, ps, ca)
	if setCondition(ps, policiesv1.PolicyServerCertSecretReconciled, err); err != nil {
		return err
	}
	cm, hasSources, err := r.reconcileConfigMap(ctx, ps)
	if setCondition(ps, policiesv1.PolicyServerConfigMapReconciled, err); err != nil {
		return err
	}
	if name := r.Pods.ClientCAConfigMap; name != "" {
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, &corev1.ConfigMap{}); err != nil {
			err = fmt.Errorf("reading the client CA ConfigMap %q: %w", name, err)
			setCondition(ps, policiesv1.PolicyServerDeploymentReconciled, err)
			return err
		}
	}
	if c := ps.Spec.PolicyCache; c != nil {
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: c.ClaimName}, &corev1.PersistentVolumeClaim{}); err != nil {
			err = fmt.Errorf("reading the policy cache's PersistentVolumeClaim %q in %s: %w", c.ClaimName, r.Namespace, err)
			setCondition(ps, policiesv1.PolicyServerDeploymentReconciled, err)
			return err
		}
	}
	err = r.apply(ctx, ps, &appsv1.StatefulSet{ObjectMeta: r.meta(ps)}, func(o client.Object) error {
		sts := o.(*appsv1.StatefulSet)
		live := sts.DeepCopy()
		r.desiredStatefulSet(sts, ps, cm.ResourceVersion, hasSources)
		// The live template carries the API server's defaults, which the
		// desired one lacks: the hash of what the controller asks for, on
		// the StatefulSet, says whether that changed.
		fresh := &appsv1.StatefulSet{}
		r.desiredStatefulSet(fresh, ps, cm.ResourceVersion, hasSources)
		hash, err := templateHash(&fresh.Spec.Template)
		if err != nil {
			return err
		}
		changed := live.Annotations[podTemplateHashAnnotation] != hash
		sts.Annotations[podTemplateHashAnnotation] = hash
		sts.Spec.Replicas = ptr.To(rolloutReplicas(live, changed, ps.Spec.Replicas))
		return nil
	})
	if setCondition(ps, policiesv1.PolicyServerDeploymentReconciled, err); err != nil {
		return err
	}
	err = r.apply(ctx, ps, &corev1.Service{ObjectMeta: r.meta(ps)}, func(o client.Object) error {
		r.desiredService(o.(*corev1.Service), ps)
		return nil
	})
	if setCondition(ps, policiesv1.PolicyServerServiceReconciled, err); err != nil {
		return err
	}
	err = r.reconcilePDB(ctx, ps)
	setCondition(ps, policiesv1.PolicyServerPodDisruptionBudgetReconciled, err)
	return err
}

func (r *PolicyServerReconciler) meta(ps *policiesv1.PolicyServer) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: r.Namespace, Name: ps.NameWithPrefix()}
}

// apply creates or updates obj, owned by ps, with desired applied to it.
func (r *PolicyServerReconciler) apply(ctx context.Context, ps *policiesv1.PolicyServer, obj client.Object, desired func(client.Object) error) error {
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, obj, func() error {
		if err := desired(obj); err != nil {
			return err
		}
		return controllerutil.SetControllerReference(ps, obj, r.Scheme)
	})
	if err != nil {
		return fmt.Errorf("reconciling %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// reconcileCertSecret keeps in the Secret policy-server-<name> a serving
// certificate for the policy server's Service and a code-signing one for
// its shared cache, both issued by the current CA, and the CA bundle.
func (r *PolicyServerReconciler) reconcileCertSecret(ctx context.Context, ps *policiesv1.PolicyServer, ca *pki.CA) error {
	dnsNames, ips := r.servingNames(ps)
	now := r.Now()
	bundle, err := caBundle(ctx, r.Client, r.Namespace)
	if err != nil {
		return err
	}
	return r.apply(ctx, ps, &corev1.Secret{ObjectMeta: r.meta(ps)}, func(o client.Object) error {
		secret := o.(*corev1.Secret)
		if secret.Annotations == nil {
			secret.Annotations = map[string]string{}
		}
		secret.Annotations[certFormatAnnotation] = certFormatVersion
		secret.Type = corev1.SecretTypeOpaque
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		if !certValid(secret.Data[corev1.TLSCertKey], ca, dnsNames, ips, now) {
			pair, err := ca.IssueServer(dnsNames, ips, now, pki.ServerValidity)
			if err != nil {
				return err
			}
			secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey] = pair.CertPEM, pair.KeyPEM
		}
		// The shared cache's signing certificate, and the CAs its
		// signatures must chain to (the previous one too, during a
		// rotation, so that blobs signed before it still load).
		if !certValid(secret.Data[cacheSigningCertKey], ca, nil, nil, now) {
			pair, err := ca.IssueCodeSigning(ps.NameWithPrefix()+" policy cache", now, pki.ServerValidity)
			if err != nil {
				return err
			}
			secret.Data[cacheSigningCertKey], secret.Data[cacheSigningKeyKey] = pair.CertPEM, pair.KeyPEM
		}
		secret.Data[caCertKey] = bundle
		return nil
	})
}

// servingNames are the names the serving certificate covers: the Service's
// DNS name, and the host of PolicyServerURL in development.
func (r *PolicyServerReconciler) servingNames(ps *policiesv1.PolicyServer) ([]string, []net.IP) {
	dnsNames := []string{ps.NameWithPrefix() + "." + r.Namespace + ".svc"}
	var ips []net.IP
	if u, err := url.Parse(r.PolicyServerURL); err == nil && u.Hostname() != "" {
		if ip := net.ParseIP(u.Hostname()); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, u.Hostname())
		}
	}
	return dnsNames, ips
}

// certValid reports whether certPEM is a certificate of ca, not due for
// renewal, for every one of dnsNames and ips.
func certValid(certPEM []byte, ca *pki.CA, dnsNames []string, ips []net.IP, now time.Time) bool {
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil || pki.NeedsRenewal(cert, now, certRenewalMargin) || !pki.IssuedBy(certPEM, ca, "", now) {
		return false
	}
	for _, name := range dnsNames {
		if !pki.IssuedBy(certPEM, ca, name, now) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// reconcileConfigMap writes the PolicyServer's sources.yml. Policies are
// not in it: the policy servers read their PolicyRevisions (RFC 000), so
// that a policy change never changes the pods.
func (r *PolicyServerReconciler) reconcileConfigMap(ctx context.Context, ps *policiesv1.PolicyServer) (*corev1.ConfigMap, bool, error) {
	sourcesYML, err := sourcesConfig(ps)
	if err != nil {
		return nil, false, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: r.meta(ps)}
	err = r.apply(ctx, ps, cm, func(o client.Object) error {
		cm := o.(*corev1.ConfigMap)
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels[policyServerLabel] = ps.Name
		cm.Data = map[string]string{}
		if sourcesYML != nil {
			cm.Data[sourcesKey] = string(sourcesYML)
		}
		return nil
	})
	return cm, sourcesYML != nil, err
}

// reconcilePDB keeps a PodDisruptionBudget when ps asks for one, and none
// otherwise.
func (r *PolicyServerReconciler) reconcilePDB(ctx context.Context, ps *policiesv1.PolicyServer) error {
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: r.meta(ps)}
	if ps.Spec.MinAvailable == nil && ps.Spec.MaxUnavailable == nil {
		if err := r.Client.Delete(ctx, pdb); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the PodDisruptionBudget: %w", err)
		}
		return nil
	}
	return r.apply(ctx, ps, pdb, func(o client.Object) error {
		desiredPDB(o.(*policyv1.PodDisruptionBudget), ps)
		return nil
	})
}

// reconcileDeletion waits until no webhook of ps's policies remains (the
// policy reconcilers remove them once their PolicyServer is going), then
// lets ps go; the objects it owns are garbage-collected.
func (r *PolicyServerReconciler) reconcileDeletion(ctx context.Context, ps *policiesv1.PolicyServer) (ctrl.Result, error) {
	remaining, err := countWebhooks(ctx, r.Client, ps.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := ps.Status.DeepCopy()
	if remaining > 0 {
		setConditionStatus(ps, policiesv1.PolicyServerPolicyWebhooksCleanedUp, metav1.ConditionFalse,
			policiesv1.ReconciliationFailed, fmt.Sprintf("%d webhook configurations of its policies remain", remaining))
		if !equalConditions(before.Conditions, ps.Status.Conditions) {
			if err := r.Client.Status().Update(ctx, ps); err != nil {
				return ctrl.Result{}, fmt.Errorf("writing the status: %w", err)
			}
		}
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	removed := controllerutil.RemoveFinalizer(ps, policiesv1.Finalizer)
	removed = controllerutil.RemoveFinalizer(ps, policiesv1.LegacyFinalizer) || removed
	if removed {
		if err := r.Client.Update(ctx, ps); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("removing the finalizer: %w", err)
		}
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler: it runs for PolicyServers, the
// objects they own and the CA Secret (every certificate follows it).
func (r *PolicyServerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("policyserver").
		For(&policiesv1.PolicyServer{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.allForCA)).
		Complete(r)
}

// allForCA maps the CA Secret to every PolicyServer.
func (r *PolicyServerReconciler) allForCA(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.Namespace || o.GetName() != caSecretName {
		return nil
	}
	var list policiesv1.PolicyServerList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, ps := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: ps.Name}})
	}
	return reqs
}

// setCondition records the outcome of one reconciliation step.
func setCondition(ps *policiesv1.PolicyServer, t policiesv1.PolicyServerConditionType, err error) {
	if err != nil {
		setConditionStatus(ps, t, metav1.ConditionFalse, policiesv1.ReconciliationFailed, err.Error())
		return
	}
	setConditionStatus(ps, t, metav1.ConditionTrue, policiesv1.ReconciliationSucceeded, "")
}

func setConditionStatus(ps *policiesv1.PolicyServer, t policiesv1.PolicyServerConditionType, status metav1.ConditionStatus,
	reason policiesv1.ReconciliationTransitionReason, message string) {
	meta.SetStatusCondition(&ps.Status.Conditions, metav1.Condition{
		Type: string(t), Status: status, Reason: string(reason), Message: message, ObservedGeneration: ps.Generation,
	})
}

// equalConditions compares conditions without their transition times.
func equalConditions(a, b []metav1.Condition) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason &&
			x.Message == y.Message && x.ObservedGeneration == y.ObservedGeneration
	})
}
