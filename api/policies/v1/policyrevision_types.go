package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// PolicyReference identifies the policy a PolicyRevision was made from.
//
// +kubebuilder:validation:XValidation:rule="(self.kind == 'AdmissionPolicy' || self.kind == 'AdmissionPolicyGroup') == has(self.__namespace__)",message="namespace must be set for AdmissionPolicy and AdmissionPolicyGroup, and only for them"
type PolicyReference struct {
	// APIVersion of the policy, such as "policies.kubewarden.io/v1".
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`

	// Kind of the policy.
	// +kubebuilder:validation:Enum=ClusterAdmissionPolicy;AdmissionPolicy;ClusterAdmissionPolicyGroup;AdmissionPolicyGroup
	Kind string `json:"kind"`

	// Name of the policy.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// Namespace of the policy, set for AdmissionPolicy and
	// AdmissionPolicyGroup only.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// UID of the policy, to tell a policy from one deleted and created again
	// under the same name.
	// +optional
	UID types.UID `json:"uid,omitempty"`
}

// PolicyRevisionSpec is a snapshot of one generation of a policy.
type PolicyRevisionSpec struct {
	// ObjectReference identifies the policy this revision was made from. It
	// cannot be changed.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="the field is immutable",reason=FieldValueForbidden
	ObjectReference PolicyReference `json:"objectReference"`

	// PolicyGeneration is the metadata.generation of the policy when this
	// revision was made. It cannot be changed.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="the field is immutable",reason=FieldValueForbidden
	PolicyGeneration int64 `json:"policyGeneration"`

	// Enabled says whether the policy servers serve this revision. Several
	// revisions of a policy may be enabled at once while a new generation
	// rolls out; disabled revisions are kept for rollback.
	// +kubebuilder:default=false
	// +optional
	Enabled bool `json:"enabled"`

	// Data holds the policy as it was at policyGeneration, as an object
	// with one key, "spec", whose value is the policy's spec.
	// +kubebuilder:pruning:PreserveUnknownFields
	Data runtime.RawExtension `json:"data"`
}

// PolicyRevisionStatus is the observed state of a PolicyRevision.
type PolicyRevisionStatus struct {
	// Conditions are the latest observations about the revision: Scheduled
	// and Initialized (written by the controller and the policy server
	// leader), and one Ready condition per policy server replica, told
	// apart by replica.
	// +listType=atomic
	// +optional
	Conditions []PolicyStatusCondition `json:"conditions,omitempty"`

	// ModuleDigests are the sha256 digests of the revision's modules, as
	// the policy server leader pulled them when it initialised the
	// revision: the shared cache keeps their compiled code while a
	// revision names them.
	// +listType=atomic
	// +optional
	ModuleDigests []string `json:"moduleDigests,omitempty"`
}

// PolicyRevision is a snapshot of one generation of a policy, made by the
// controller in its own namespace and loaded by the policy servers. Policy
// servers report in its status whether they loaded it (RFC 000).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=polrev
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Policy Server",type=string,JSONPath=`.metadata.labels['kubewarden\.io/policy-server']`,description="Policy Server serving the revision"
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.objectReference.kind`,description="Kind of the policy"
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.objectReference.name`,description="Name of the policy"
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.spec.policyGeneration`,description="Generation of the policy"
// +kubebuilder:printcolumn:name="Enabled",type=boolean,JSONPath=`.spec.enabled`,description="Whether policy servers serve the revision"
// +kubebuilder:printcolumn:name="Initialized",type=string,JSONPath=`.status.conditions[?(@.type=="Initialized")].status`,description="Whether the module was pulled, validated and precompiled"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PolicyRevision struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the snapshot.
	Spec PolicyRevisionSpec `json:"spec,omitempty"`
	// Status is the observed state of the revision, written by the
	// controller and the policy servers.
	Status PolicyRevisionStatus `json:"status,omitempty"`
}

// PolicyRevisionList is a list of PolicyRevision.
//
// +kubebuilder:object:root=true
type PolicyRevisionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the revisions.
	Items []PolicyRevision `json:"items"`
}
