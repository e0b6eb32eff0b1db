package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wardenhq/warden/internal/pki"
)

// AuditClientCertReconciler keeps the audit scanner's client certificate in
// a Secret: tls.crt and tls.key, issued by Warden's CA for
// auditClientCommonName, and ca.crt, the CA bundle the scanner verifies the
// policy servers' serving certificates with. Under mutual TLS the policy
// servers accept clients of Warden's CA, so the scanner's requests to
// /audit get through (docs/audit-scanner.md#installing-with-the-chart). The
// certificate is re-issued when it nears its expiry and when the CA
// changes, as the policy servers' serving certificates are.
type AuditClientCertReconciler struct {
	Client client.Client
	// Namespace is the deployments namespace, where the CA lives.
	Namespace string
	// Secret is the Secret written (--audit-scanner-client-cert-secret-name
	// and -namespace).
	Secret types.NamespacedName
	// Now returns the time certificates are checked against.
	Now func() time.Time
}

// Reconcile implements reconcile.Reconciler. Every request is for Secret.
func (r *AuditClientCertReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	now := r.Now()
	ca, bundle, err := readCA(ctx, r.Client, r.Namespace)
	if errors.Is(err, errNoCA) {
		// The CA's creation brings the reconciler back.
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Secret.Namespace, Name: r.Secret.Name}}
	_, err = controllerutil.CreateOrUpdate(ctx, r.Client, secret, func() error {
		if secret.Labels == nil {
			secret.Labels = map[string]string{}
		}
		secret.Labels[partOfLabel] = partOf
		if secret.CreationTimestamp.IsZero() {
			// The type of an existing Secret cannot change: one made
			// by hand as Opaque stays so.
			secret.Type = corev1.SecretTypeTLS
		}
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		if !clientCertValid(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey], ca, now) {
			pair, err := ca.IssueClient(auditClientCommonName, now, pki.ServerValidity)
			if err != nil {
				return fmt.Errorf("issuing the audit scanner's client certificate: %w", err)
			}
			secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey] = pair.CertPEM, pair.KeyPEM
		}
		secret.Data[caCertKey] = bundle
		return nil
	})
	if apierrors.IsConflict(err) {
		// The cache was behind a write: try again once it caught up.
		return ctrl.Result{Requeue: true}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the audit scanner's client certificate Secret %s: %w", r.Secret, err)
	}
	// Come back when the certificate is due for renewal; a change of the
	// CA or of the Secret brings it back sooner.
	cert, err := pki.ParseCertificate(secret.Data[corev1.TLSCertKey])
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: max(cert.NotAfter.Add(-certRenewalMargin).Sub(now), time.Minute)}, nil
}

// readCA returns the CA of the CA Secret of namespace and the bundle clients
// must trust, without writing anything: the PolicyServer reconciler and the
// webhook certificate create and rotate the CA. errNoCA when it does not
// exist yet.
func readCA(ctx context.Context, c client.Client, namespace string) (*pki.CA, []byte, error) {
	var secret corev1.Secret
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: caSecretName}, &secret)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && len(secret.Data[caCertKey]) == 0):
		return nil, nil, errNoCA
	case err != nil:
		return nil, nil, fmt.Errorf("reading the CA Secret: %w", err)
	}
	ca, err := pki.ParseCA(secret.Data[caCertKey], secret.Data[caKeyKey])
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CA Secret: %w", err)
	}
	return ca, pki.Bundle(secret.Data[caCertKey], secret.Data[oldCACertKey]), nil
}

// clientCertValid reports whether certPEM is a client certificate of ca, not
// due for renewal, and keyPEM its key.
func clientCertValid(certPEM, keyPEM []byte, ca *pki.CA, now time.Time) bool {
	if !certValid(certPEM, ca, nil, nil, now) {
		return false
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return false
	}
	cert, err := pki.ParseCertificate(certPEM)
	return err == nil && slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
}

// SetupWithManager registers the reconciler: it runs for the CA Secret and
// the client certificate's Secret, and once at start for the Secrets the
// cache lists.
func (r *AuditClientCertReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("auditclientcertificate").
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.forSecret)).
		Complete(r)
}

// forSecret maps the CA Secret and the client certificate's Secret to the
// one request of the reconciler.
func (r *AuditClientCertReconciler) forSecret(_ context.Context, o client.Object) []reconcile.Request {
	key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
	if key == r.Secret || key == (types.NamespacedName{Namespace: r.Namespace, Name: caSecretName}) {
		return []reconcile.Request{{NamespacedName: r.Secret}}
	}
	return nil
}
