package controller

// Names of the objects and labels the controller reads and writes, as
// Kubewarden's controller names them
// (docs/compatibility.md#object-names-and-labels).
const (
	// caSecretName is the Secret of Warden's CA, in the deployments
	// namespace: ca.crt, ca.key, and old-ca.crt during a rotation.
	caSecretName = "kubewarden-ca"
	caCertKey    = "ca.crt"
	caKeyKey     = "ca.key"
	oldCACertKey = "old-ca.crt"
	caCommonName = "kubewarden-controller-ca"

	// auditClientCertSecret is the default Secret of the audit scanner's
	// client certificate (tls.crt, tls.key and ca.crt), as Kubewarden's
	// chart names it; auditClientCommonName is the certificate's subject.
	auditClientCertSecret = "kubewarden-audit-scanner-client-cert"
	auditClientCommonName = "audit-scanner-client"

	// certFormatAnnotation marks the serving-certificate Secrets.
	certFormatAnnotation = "kubewarden.io/cert-format-version"
	certFormatVersion    = "1"

	// Keys of a policy server's Secret besides tls.crt and tls.key: the
	// shared cache's signing certificate and key, and the CA bundle
	// (caCertKey) its signatures must chain to.
	cacheSigningCertKey = "cache-signing.crt"
	cacheSigningKeyKey  = "cache-signing.key"

	// controllerLeaseName is the Lease of the controller's leader election.
	controllerLeaseName = "warden-controller"
	// policyServerLeasePrefix starts the name of each PolicyServer's Lease,
	// policy-server-<name>, which its replicas take to elect the one that
	// initialises revisions (internal/policyserver/leader.go).
	policyServerLeasePrefix = "policy-server-"

	// sourcesKey is the key of a policy server's ConfigMap.
	sourcesKey = "sources.yml"

	// policyServerLabel carries the PolicyServer name on its ConfigMap,
	// Service, pods and the webhook configurations of its policies.
	policyServerLabel = "kubewarden/policy-server"
	// configVersionLabel carries the resourceVersion of the ConfigMap a pod
	// (and the StatefulSet) was made for.
	configVersionLabel = "kubewarden/config-version"
	// podTemplateHashAnnotation carries, on a policy server's StatefulSet,
	// the hash of the pod template the controller asked for, which tells a
	// new template from the API server's defaults (rolloutReplicas).
	podTemplateHashAnnotation = "kubewarden/pod-template-hash"
	// partOfLabel marks every object Warden manages.
	partOfLabel = "app.kubernetes.io/part-of"
	partOf      = "kubewarden"

	// Annotations of the webhook configurations naming their policy.
	policyNameAnnotation      = "kubewardenPolicyName"
	policyNamespaceAnnotation = "kubewardenPolicyNamespace"

	// webhookSuffix ends the name of a policy's webhook.
	webhookSuffix = ".kubewarden.admission"

	// clientCAKey is the key of the client CA ConfigMap
	// (--client-ca-configmap-name).
	clientCAKey = "client-ca.crt"
	// otelInjectAnnotation asks the OpenTelemetry operator for a collector
	// sidecar.
	otelInjectAnnotation = "sidecar.opentelemetry.io/inject"

	// sigstoreTrustConfigKey is the key of a PolicyServer's sigstore trust
	// ConfigMap.
	sigstoreTrustConfigKey = "sigstore-trust-config"

	// Mount points and files in the policy server container.
	pkiDir         = "/pki"
	storeDir       = "/tmp"
	policyCacheDir = "/cache"
)

// commonLabels are the labels of a policy server's objects and pods.
func commonLabels(instance string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/component":  "policy-server",
		"app.kubernetes.io/instance":   instance,
		partOfLabel:                    partOf,
		"app.kubernetes.io/managed-by": "kubewarden-controller",
	}
}
