package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of every kind in this package.
const GroupName = "policies.kubewarden.io"

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

	// SchemeBuilder registers the kinds of this package in a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds every kind of this package, and their lists, to a
	// runtime.Scheme. It is safe to call concurrently on different schemes.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Kind names, as they appear in the kind field of a manifest.
const (
	// KindPolicyServer is the kind of PolicyServer objects.
	KindPolicyServer = "PolicyServer"
	// KindClusterAdmissionPolicy is the kind of ClusterAdmissionPolicy objects.
	KindClusterAdmissionPolicy = "ClusterAdmissionPolicy"
	// KindAdmissionPolicy is the kind of AdmissionPolicy objects.
	KindAdmissionPolicy = "AdmissionPolicy"
	// KindClusterAdmissionPolicyGroup is the kind of ClusterAdmissionPolicyGroup objects.
	KindClusterAdmissionPolicyGroup = "ClusterAdmissionPolicyGroup"
	// KindAdmissionPolicyGroup is the kind of AdmissionPolicyGroup objects.
	KindAdmissionPolicyGroup = "AdmissionPolicyGroup"
	// KindPolicyRevision is the kind of PolicyRevision objects.
	KindPolicyRevision = "PolicyRevision"
)

// Resource returns the group-qualified resource for an unqualified resource
// name of this group, such as "clusteradmissionpolicies".
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&PolicyServer{}, &PolicyServerList{},
		&ClusterAdmissionPolicy{}, &ClusterAdmissionPolicyList{},
		&AdmissionPolicy{}, &AdmissionPolicyList{},
		&ClusterAdmissionPolicyGroup{}, &ClusterAdmissionPolicyGroupList{},
		&AdmissionPolicyGroup{}, &AdmissionPolicyGroupList{},
		&PolicyRevision{}, &PolicyRevisionList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
