package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wardenhq/warden/internal/pki"
)

// caRotationMargin is how long before its expiry the CA is replaced, as in
// Kubewarden.
const caRotationMargin = 60 * 24 * time.Hour

// ensureCA reads the CA Secret of namespace, creating it when it is missing
// or unreadable and rotating the CA when it nears its expiry (the old CA
// stays in the Secret, and so in the bundle, until it expires). Only the
// PolicyServer reconciler writes the CA; the policy reconcilers read the
// bundle (caBundle).
func ensureCA(ctx context.Context, c client.Client, namespace string, now time.Time) (*pki.CA, error) {
	var secret corev1.Secret
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: caSecretName}, &secret)
	switch {
	case apierrors.IsNotFound(err):
		return createCA(ctx, c, namespace, now)
	case err != nil:
		return nil, fmt.Errorf("reading the CA Secret: %w", err)
	}
	ca, err := pki.ParseCA(secret.Data[caCertKey], secret.Data[caKeyKey])
	if err != nil {
		// A CA that cannot be read cannot sign: start a new one. Every
		// certificate and bundle follows, as after a rotation.
		return replaceCA(ctx, c, &secret, nil, now)
	}
	if pki.NeedsRenewal(ca.Cert, now, caRotationMargin) {
		return replaceCA(ctx, c, &secret, ca, now)
	}
	if old := secret.Data[oldCACertKey]; len(old) > 0 {
		if oldCert, err := pki.ParseCertificate(old); err != nil || !now.Before(oldCert.NotAfter) {
			// The old CA has expired: nothing it signed is valid any more.
			delete(secret.Data, oldCACertKey)
			if err := c.Update(ctx, &secret); err != nil {
				return nil, fmt.Errorf("dropping the expired CA: %w", err)
			}
		}
	}
	return ca, nil
}

// errNoCA is returned by caBundle before the CA Secret exists.
var errNoCA = errors.New("the CA Secret does not exist yet")

// caBundle returns the certificates webhook clients must trust: the CA,
// and the previous CA during a rotation.
func caBundle(ctx context.Context, c client.Client, namespace string) ([]byte, error) {
	var secret corev1.Secret
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: caSecretName}, &secret)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && len(secret.Data[caCertKey]) == 0):
		return nil, errNoCA
	case err != nil:
		return nil, fmt.Errorf("reading the CA Secret: %w", err)
	}
	return pki.Bundle(secret.Data[caCertKey], secret.Data[oldCACertKey]), nil
}

func createCA(ctx context.Context, c client.Client, namespace string, now time.Time) (*pki.CA, error) {
	ca, err := pki.NewCA(caCommonName, now, pki.CAValidity)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: caSecretName, Labels: map[string]string{partOfLabel: partOf}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{caCertKey: ca.CertPEM, caKeyKey: ca.KeyPEM},
	}
	if err := c.Create(ctx, secret); err != nil {
		// Another writer may have been first: the next reconcile reads its
		// CA.
		return nil, fmt.Errorf("creating the CA Secret: %w", err)
	}
	return ca, nil
}

// replaceCA puts a new CA in secret, keeping old (when valid) as old-ca.crt.
func replaceCA(ctx context.Context, c client.Client, secret *corev1.Secret, old *pki.CA, now time.Time) (*pki.CA, error) {
	ca, err := pki.NewCA(caCommonName, now, pki.CAValidity)
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{caCertKey: ca.CertPEM, caKeyKey: ca.KeyPEM}
	if old != nil && now.Before(old.Cert.NotAfter) {
		data[oldCACertKey] = old.CertPEM
	}
	secret.Data = data
	if err := c.Update(ctx, secret); err != nil {
		return nil, fmt.Errorf("rotating the CA: %w", err)
	}
	return ca, nil
}
