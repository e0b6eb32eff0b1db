package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AdmissionPolicySpec is the desired state of an AdmissionPolicy.
type AdmissionPolicySpec struct {
	PolicySpec `json:",inline"`
}

// AdmissionPolicy is a policy that evaluates requests for namespaced objects
// in its own namespace only. It cannot read other cluster objects.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ap
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
type AdmissionPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the policy.
	Spec AdmissionPolicySpec `json:"spec,omitempty"`
	// Status is the observed state of the policy, written by the controller.
	Status PolicyStatus `json:"status,omitempty"`
}

// AdmissionPolicyList is a list of AdmissionPolicy.
//
// +kubebuilder:object:root=true
type AdmissionPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policies.
	Items []AdmissionPolicy `json:"items"`
}
