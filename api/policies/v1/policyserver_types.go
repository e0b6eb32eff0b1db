package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PolicyServerSecurity holds the security contexts of the policy server's
// workload.
type PolicyServerSecurity struct {
	// Container is the security context of the policy server container. It
	// replaces the controller's hardened default. Containers added by
	// others (such as telemetry sidecars) do not get it.
	// +optional
	Container *corev1.SecurityContext `json:"container,omitempty"`

	// Pod is the security context of the policy server pods.
	// +optional
	Pod *corev1.PodSecurityContext `json:"pod,omitempty"`
}

// PolicyServerSpec is the desired state of a PolicyServer.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.minAvailable) && has(self.maxUnavailable))",message="minAvailable and maxUnavailable cannot be both set"
// +kubebuilder:validation:XValidation:rule="(has(self.webhookPort) ? self.webhookPort : 8443) != (has(self.readinessProbePort) ? self.readinessProbePort : 8081)",message="readinessProbePort must differ from webhookPort",fieldPath=".readinessProbePort"
type PolicyServerSpec struct {
	// Image is the container image of the policy server.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`

	// Replicas is the number of policy server pods.
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas"`

	// MinAvailable is the number (or percentage) of policy server pods that
	// must stay available during a voluntary disruption, such as a node
	// drain. Setting it creates a PodDisruptionBudget. Only one of
	// minAvailable and maxUnavailable may be set.
	// +optional
	MinAvailable *intstr.IntOrString `json:"minAvailable,omitempty"`

	// MaxUnavailable is the number (or percentage) of policy server pods
	// that may be unavailable during a voluntary disruption. Setting it
	// creates a PodDisruptionBudget. Only one of minAvailable and
	// maxUnavailable may be set.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// Annotations are added to the policy server workload and its pods.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// Labels are added to the policy server workload and its pods. Labels
	// set by the controller win over labels of the same key set here.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Env lists environment variables added to the policy server container,
	// after the ones the controller sets.
	// +listType=atomic
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// ServiceAccountName is the ServiceAccount of the policy server pods,
	// also used to read the objects of context-aware policies. When unset,
	// the namespace's default ServiceAccount is used.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// ImagePullSecret is the name of a Secret of type
	// kubernetes.io/dockerconfigjson, in the controller's namespace, whose
	// credentials are used to pull policies from registries.
	// +optional
	ImagePullSecret string `json:"imagePullSecret,omitempty"`

	// InsecureSources lists registries and servers ("host" or "host:port")
	// that policies may be fetched from over plain HTTP or with an
	// untrusted certificate. It becomes insecure_sources in sources.yml.
	// +listType=atomic
	// +optional
	InsecureSources []string `json:"insecureSources,omitempty"`

	// SourceAuthorities maps a registry or server ("host" or "host:port") to
	// the PEM certificates of the authorities trusted for it. It becomes
	// source_authorities in sources.yml.
	// +optional
	SourceAuthorities map[string][]string `json:"sourceAuthorities,omitempty"`

	// VerificationConfig is the name of a ConfigMap, in the controller's
	// namespace, whose key "verification-config" holds the signature
	// verification configuration every policy module must satisfy.
	// +optional
	VerificationConfig string `json:"verificationConfig,omitempty"`

	// SigstoreTrustConfig is the name of a ConfigMap, in the controller's
	// namespace, whose key "sigstore-trust-config" holds a Sigstore
	// ClientTrustConfig (JSON): the Fulcio certificate authorities and Rekor
	// logs that keyless signatures required by VerificationConfig are
	// checked against, offline. Warden never fetches the public Sigstore
	// instance's trust root, so keyless requirements need it. Whoever can
	// write that ConfigMap decides which signatures are trusted, so
	// restrict access to it.
	// +optional
	SigstoreTrustConfig string `json:"sigstoreTrustConfig,omitempty"`

	// SecurityContexts are the security contexts of the policy server
	// container and pods.
	// +optional
	SecurityContexts PolicyServerSecurity `json:"securityContexts,omitempty"`

	// Affinity is the scheduling affinity of the policy server pods.
	// +optional
	Affinity corev1.Affinity `json:"affinity,omitempty"`

	// Limits are the most compute resources the policy server container may
	// use.
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`

	// Requests are the compute resources reserved for the policy server
	// container. A resource requested but not limited gets the limit as its
	// request when the limit is set. A request may not exceed its limit.
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`

	// Tolerations of the policy server pods, to let them run on tainted
	// nodes.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// PriorityClassName is the PriorityClass of the policy server pods,
	// to keep admission running when the cluster is short of resources.
	// Pods already running are not affected if the class is deleted, but
	// new pods cannot be created until it exists again.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// NamespacedPoliciesCapabilities lists the host capabilities that
	// namespaced policies (AdmissionPolicy, AdmissionPolicyGroup) running on
	// this PolicyServer may call. "*" allows all, "oci/*" or "oci/v1/*"
	// allow a whole category or version, and a full path such as
	// "oci/v1/verify" or "net/v1/dns_lookup_host" allows one call. When
	// unset, namespaced policies get no host capabilities.
	// +listType=atomic
	// +optional
	NamespacedPoliciesCapabilities []string `json:"namespacedPoliciesCapabilities,omitempty"`

	// WebhookPort is the port the policy server listens on for admission
	// requests. Defaults to 8443 when unset.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	WebhookPort *int32 `json:"webhookPort,omitempty"`

	// ReadinessProbePort is the port of the policy server's readiness
	// endpoint. It must differ from webhookPort. Defaults to 8081 when
	// unset.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	ReadinessProbePort *int32 `json:"readinessProbePort,omitempty"`

	// MetricsPort is the port of the metrics Service of this PolicyServer,
	// when metrics are enabled. It changes the Service port only, not the
	// port the pods listen on. Defaults to the controller's setting when
	// unset.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	MetricsPort *int32 `json:"metricsPort,omitempty"`

	// PolicyCache configures the cache of compiled policy modules the
	// replicas share. Without it each replica compiles the modules it
	// serves into a cache of its own, on an emptyDir.
	// +optional
	PolicyCache *PolicyCache `json:"policyCache,omitempty"`
}

// PolicyCache is the shared cache of compiled policy modules (RFC 000):
// the replica that initialises a PolicyRevision compiles its modules into
// it, signed with a key the controller issues from Warden's CA, and every
// replica loads them from it once their signatures verify.
type PolicyCache struct {
	// ClaimName is an existing ReadWriteMany PersistentVolumeClaim in the
	// controller's namespace, mounted by every replica.
	// +kubebuilder:validation:MinLength=1
	ClaimName string `json:"claimName"`
}

// PolicyServerConditionType is the type of a condition of a PolicyServer.
type PolicyServerConditionType string

const (
	// PolicyServerCertSecretReconciled is True when the policy server's TLS
	// Secret is up to date.
	PolicyServerCertSecretReconciled PolicyServerConditionType = "CertSecretReconciled"
	// CARootSecretReconciled is True when the CA Secret is up to date.
	CARootSecretReconciled PolicyServerConditionType = "CARootSecretReconciled"
	// PolicyServerConfigMapReconciled is True when the policy server's
	// ConfigMap is up to date.
	PolicyServerConfigMapReconciled PolicyServerConditionType = "ConfigMapReconciled"
	// PolicyServerDeploymentReconciled is True when the policy server's
	// workload is up to date.
	PolicyServerDeploymentReconciled PolicyServerConditionType = "DeploymentReconciled"
	// PolicyServerServiceReconciled is True when the policy server's
	// Service is up to date.
	PolicyServerServiceReconciled PolicyServerConditionType = "ServiceReconciled"
	// PolicyServerPodDisruptionBudgetReconciled is True when the policy
	// server's PodDisruptionBudget is up to date.
	PolicyServerPodDisruptionBudgetReconciled PolicyServerConditionType = "PodDisruptionBudgetReconciled"
	// PolicyServerPolicyWebhooksCleanedUp is True when, during deletion, no
	// webhook configuration of the policies bound to the PolicyServer is
	// left. The finalizer is removed only then.
	PolicyServerPolicyWebhooksCleanedUp PolicyServerConditionType = "PolicyWebhooksCleanedUp"
)

// ReconciliationTransitionReason is the reason of a PolicyServer condition.
type ReconciliationTransitionReason string

const (
	// ReconciliationSucceeded is the reason of a condition whose object was
	// reconciled.
	ReconciliationSucceeded ReconciliationTransitionReason = "ReconciliationSucceeded"
	// ReconciliationFailed is the reason of a condition whose object could
	// not be reconciled.
	ReconciliationFailed ReconciliationTransitionReason = "ReconciliationFailed"
)

// PolicyServerStatus is the observed state of a PolicyServer.
type PolicyServerStatus struct {
	// Conditions are the latest observations about the objects the
	// controller manages for this PolicyServer: CertSecretReconciled,
	// CARootSecretReconciled, ConfigMapReconciled, DeploymentReconciled,
	// ServiceReconciled, PodDisruptionBudgetReconciled and
	// PolicyWebhooksCleanedUp.
	// +listType=map
	// +listMapKey=type
	// +patchMergeKey=type
	// +patchStrategy=merge
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// PolicyServer runs policies: the controller turns it into a set of policy
// server pods, a Service and their TLS material, and registers the webhooks
// of the policies bound to it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ps
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Replicas",type=string,JSONPath=`.spec.replicas`,description="Policy Server replicas"
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,description="Policy Server image"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="the PolicyServer name cannot be longer than 63 characters"
type PolicyServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the PolicyServer.
	Spec PolicyServerSpec `json:"spec,omitempty"`
	// Status is the observed state of the PolicyServer, written by the
	// controller.
	Status PolicyServerStatus `json:"status,omitempty"`
}

// PolicyServerList is a list of PolicyServer.
//
// +kubebuilder:object:root=true
type PolicyServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the PolicyServers.
	Items []PolicyServer `json:"items"`
}
