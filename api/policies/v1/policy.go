package v1

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Names shared by the controller, the policy server and users.
const (
	// DefaultPolicyServer is the PolicyServer a policy is bound to when its
	// spec names none.
	DefaultPolicyServer = "default"

	// Finalizer is the finalizer the controller adds to policies and
	// PolicyServers, to clean up their webhooks before they go.
	Finalizer = "kubewarden.io/finalizer"
	// LegacyFinalizer is the finalizer older Kubewarden releases added. The
	// controller removes it together with Finalizer.
	LegacyFinalizer = "kubewarden"

	// PolicyServerLabel labels each PolicyRevision with the name of the
	// PolicyServer that serves it, so a policy server watches only its own.
	PolicyServerLabel = "kubewarden.io/policy-server"

	// RollbackAnnotation on a policy asks the controller to roll it back
	// to the generation it names: the spec of that generation's
	// PolicyRevision becomes the policy's (a new generation), and the
	// annotation is removed.
	RollbackAnnotation = "kubewarden.io/rollback-to-generation"

	// AnnotationSeverity is the policy annotation holding its severity,
	// copied into policy reports.
	AnnotationSeverity = "io.kubewarden.policy.severity"
	// AnnotationCategory is the policy annotation holding its category,
	// copied into policy reports.
	AnnotationCategory = "io.kubewarden.policy.category"
	// AnnotationTitle is the policy annotation holding its display name.
	AnnotationTitle = "io.artifacthub.displayName"
	// AnnotationDescription is the policy annotation holding its
	// description.
	AnnotationDescription = "io.kubewarden.policy.description"
)

// Prefixes of the unique names of policies. A unique name names the
// policy's webhook configuration, its webhook (with the suffix
// ".kubewarden.admission"), its entry in the policy server configuration and
// its URL path (/validate/<unique name>).
const (
	clusterPolicyPrefix         = "clusterwide-"
	namespacedPolicyPrefix      = "namespaced-"
	clusterPolicyGroupPrefix    = "clusterwide-group-"
	namespacedPolicyGroupPrefix = "namespaced-group-"
)

// Policy is what the four policy kinds (ClusterAdmissionPolicy,
// AdmissionPolicy, ClusterAdmissionPolicyGroup and AdmissionPolicyGroup)
// have in common. Only the pointer types of those kinds implement it.
//
// The getters return the object's own data, not copies, except where a
// method says otherwise; a Policy is not safe for concurrent mutation.
//
// +kubebuilder:object:generate=false
type Policy interface {
	metav1.Object
	runtime.Object

	// GetUniqueName returns the name that identifies the policy across
	// kinds and namespaces: "clusterwide-<name>", "namespaced-<namespace>-<name>",
	// "clusterwide-group-<name>" or "namespaced-group-<namespace>-<name>".
	GetUniqueName() string
	// GetPolicyServer returns spec.policyServer as set: empty means the
	// policy is not bound to any PolicyServer.
	GetPolicyServer() string
	// GetPolicyMode returns spec.mode, with an empty mode read as protect.
	GetPolicyMode() PolicyMode
	// GetModule returns spec.module; it is empty for groups.
	GetModule() string
	// GetSettings returns spec.settings; it is empty for groups.
	GetSettings() runtime.RawExtension
	// GetRules returns the webhook rules. For the namespaced kinds it
	// returns a copy whose rules all have the Namespaced scope.
	GetRules() []admissionregistrationv1.RuleWithOperations
	// GetFailurePolicy returns spec.failurePolicy.
	GetFailurePolicy() *admissionregistrationv1.FailurePolicyType
	// GetMatchPolicy returns spec.matchPolicy.
	GetMatchPolicy() *admissionregistrationv1.MatchPolicyType
	// GetMatchConditions returns spec.matchConditions.
	GetMatchConditions() []admissionregistrationv1.MatchCondition
	// GetSideEffects returns spec.sideEffects.
	GetSideEffects() *admissionregistrationv1.SideEffectClass
	// GetObjectSelector returns spec.objectSelector.
	GetObjectSelector() *metav1.LabelSelector
	// GetNamespaceSelector returns the namespace selector of the webhook:
	// spec.namespaceSelector for the cluster kinds, a new selector of the
	// policy's own namespace for the namespaced kinds.
	GetNamespaceSelector() *metav1.LabelSelector
	// GetAllowInsideAdmissionControllerNamespace reports whether the policy
	// also applies in the controller's namespace; always false for the
	// namespaced kinds.
	GetAllowInsideAdmissionControllerNamespace() bool
	// GetTimeoutSeconds returns spec.timeoutSeconds.
	GetTimeoutSeconds() *int32
	// GetTimeoutEvalSeconds returns spec.timeoutEvalSeconds; nil for groups,
	// whose members have their own.
	GetTimeoutEvalSeconds() *int32
	// GetMessage returns spec.message: the custom rejection message of a
	// policy, the rejection message of a group.
	GetMessage() string
	// GetBackgroundAudit returns spec.backgroundAudit.
	GetBackgroundAudit() bool
	// IsMutating reports whether the policy may mutate; always false for
	// groups.
	IsMutating() bool
	// IsContextAware reports whether the policy, or any member of a group,
	// lists context-aware resources.
	IsContextAware() bool
	// GetContextAwareResources returns the context-aware resources of a
	// ClusterAdmissionPolicy, and an empty list for the other kinds (group
	// members list their own).
	GetContextAwareResources() []ContextAwareResource
	// GetSeverity returns the severity annotation and whether it is set.
	GetSeverity() (string, bool)
	// GetCategory returns the category annotation and whether it is set.
	GetCategory() (string, bool)
	// GetTitle returns the display name annotation and whether it is set.
	GetTitle() (string, bool)
	// GetDescription returns the description annotation and whether it is
	// set.
	GetDescription() (string, bool)
	// GetStatus returns a pointer to the policy's status, to read or change
	// it in place.
	GetStatus() *PolicyStatus
	// SetPolicyServer sets spec.policyServer.
	SetPolicyServer(name string)
	// SetStatus sets status.policyStatus.
	SetStatus(status PolicyStatusEnum)
	// SetPolicyModeStatus sets status.mode.
	SetPolicyModeStatus(mode PolicyModeStatus)
	// DeepCopyPolicy returns a deep copy of the policy.
	DeepCopyPolicy() Policy
}

// PolicyGroup is what ClusterAdmissionPolicyGroup and AdmissionPolicyGroup
// have in common on top of Policy.
//
// +kubebuilder:object:generate=false
type PolicyGroup interface {
	Policy
	// GetPolicyGroupMembersWithContext returns the members of the group. An
	// AdmissionPolicyGroup's members are returned in a new map, without
	// context-aware resources.
	GetPolicyGroupMembersWithContext() PolicyGroupMembersWithContext
	// GetExpression returns spec.expression.
	GetExpression() string
}

var (
	_ Policy      = (*ClusterAdmissionPolicy)(nil)
	_ Policy      = (*AdmissionPolicy)(nil)
	_ PolicyGroup = (*ClusterAdmissionPolicyGroup)(nil)
	_ PolicyGroup = (*AdmissionPolicyGroup)(nil)
)

// ClusterPolicyUniqueName returns the unique name of the
// ClusterAdmissionPolicy called name.
func ClusterPolicyUniqueName(name string) string { return clusterPolicyPrefix + name }

// NamespacedPolicyUniqueName returns the unique name of the AdmissionPolicy
// called name in namespace.
func NamespacedPolicyUniqueName(namespace, name string) string {
	return namespacedPolicyPrefix + namespace + "-" + name
}

// ClusterPolicyGroupUniqueName returns the unique name of the
// ClusterAdmissionPolicyGroup called name.
func ClusterPolicyGroupUniqueName(name string) string { return clusterPolicyGroupPrefix + name }

// NamespacedPolicyGroupUniqueName returns the unique name of the
// AdmissionPolicyGroup called name in namespace.
func NamespacedPolicyGroupUniqueName(namespace, name string) string {
	return namespacedPolicyGroupPrefix + namespace + "-" + name
}

// PolicyKind returns the kind of p ("ClusterAdmissionPolicy", ...), from its
// Go type, so it works on objects whose TypeMeta is empty. It returns "" for
// a type that is not one of the four policy kinds.
func PolicyKind(p Policy) string {
	switch p.(type) {
	case *ClusterAdmissionPolicy:
		return KindClusterAdmissionPolicy
	case *AdmissionPolicy:
		return KindAdmissionPolicy
	case *ClusterAdmissionPolicyGroup:
		return KindClusterAdmissionPolicyGroup
	case *AdmissionPolicyGroup:
		return KindAdmissionPolicyGroup
	default:
		return ""
	}
}

// NewPolicy returns a new, empty policy of the given kind, or nil when kind
// is not one of the four policy kinds.
func NewPolicy(kind string) Policy {
	switch kind {
	case KindClusterAdmissionPolicy:
		return &ClusterAdmissionPolicy{}
	case KindAdmissionPolicy:
		return &AdmissionPolicy{}
	case KindClusterAdmissionPolicyGroup:
		return &ClusterAdmissionPolicyGroup{}
	case KindAdmissionPolicyGroup:
		return &AdmissionPolicyGroup{}
	default:
		return nil
	}
}

// policyModeOrDefault reads an empty mode as protect, the CRD default.
func policyModeOrDefault(mode PolicyMode) PolicyMode {
	if mode == "" {
		return PolicyModeProtect
	}
	return mode
}

// namespacedRules returns a copy of rules with every rule scoped to
// namespaced resources, as namespaced policies only see those.
func namespacedRules(rules []admissionregistrationv1.RuleWithOperations) []admissionregistrationv1.RuleWithOperations {
	scoped := make([]admissionregistrationv1.RuleWithOperations, 0, len(rules))
	for _, rule := range rules {
		rule = *rule.DeepCopy()
		scope := admissionregistrationv1.NamespacedScope
		rule.Scope = &scope
		scoped = append(scoped, rule)
	}
	return scoped
}

// namespaceSelectorFor selects the namespace called namespace only.
func namespaceSelectorFor(namespace string) *metav1.LabelSelector {
	return &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace},
	}
}

// annotation returns the value of an annotation and whether it is set.
func annotation(obj metav1.Object, key string) (string, bool) {
	value, ok := obj.GetAnnotations()[key]
	return value, ok
}
