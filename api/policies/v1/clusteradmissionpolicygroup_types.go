package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterAdmissionPolicyGroupSpec is the desired state of a
// ClusterAdmissionPolicyGroup.
type ClusterAdmissionPolicyGroupSpec struct {
	ClusterPolicyGroupSpec `json:",inline"`

	// NamespaceSelector restricts the group to objects in namespaces whose
	// labels match; for a Namespace object its own labels are checked, and
	// other cluster-scoped objects always match. The namespace Warden runs
	// in is always excluded unless allowInsideAdmissionControllerNamespace
	// is true. When unset, every namespace matches.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// AllowInsideAdmissionControllerNamespace makes the group apply in the
	// namespace Warden runs in too. By default that namespace is excluded,
	// so that a group cannot stop Warden's own components from starting;
	// set this only when you mean it.
	// +optional
	AllowInsideAdmissionControllerNamespace bool `json:"allowInsideAdmissionControllerNamespace,omitempty"`
}

// ClusterAdmissionPolicyGroup combines several policies with a CEL
// expression into one cluster-wide validating policy.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=capg
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Policy Server",type=string,JSONPath=`.spec.policyServer`,description="Bound to Policy Server"
// +kubebuilder:printcolumn:name="Mutating",type=boolean,JSONPath=`.spec.mutating`,description="Whether the policy is mutating"
// +kubebuilder:printcolumn:name="BackgroundAudit",type=boolean,JSONPath=`.spec.backgroundAudit`,description="Whether the policy is used in audit checks"
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`,description="Policy deployment mode"
// +kubebuilder:printcolumn:name="Observed mode",type=string,JSONPath=`.status.mode`,description="Policy deployment mode observed on the assigned Policy Server"
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.policyStatus`,description="Status of the policy"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Severity",type=string,JSONPath=`.metadata.annotations['io\.kubewarden\.policy\.severity']`,priority=1
// +kubebuilder:printcolumn:name="Category",type=string,JSONPath=`.metadata.annotations['io\.kubewarden\.policy\.category']`,priority=1
type ClusterAdmissionPolicyGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the group.
	Spec ClusterAdmissionPolicyGroupSpec `json:"spec,omitempty"`
	// Status is the observed state of the group, written by the controller.
	Status PolicyStatus `json:"status,omitempty"`
}

// ClusterAdmissionPolicyGroupList is a list of ClusterAdmissionPolicyGroup.
//
// +kubebuilder:object:root=true
type ClusterAdmissionPolicyGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policy groups.
	Items []ClusterAdmissionPolicyGroup `json:"items"`
}
