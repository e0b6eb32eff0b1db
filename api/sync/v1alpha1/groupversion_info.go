package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of every kind in this package.
const GroupName = "sync.wardenhq.io"

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package in a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds every kind of this package, and their lists, to a
	// runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// KindPolicySync is the kind of PolicySync objects.
const KindPolicySync = "PolicySync"

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &PolicySync{}, &PolicySyncList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
