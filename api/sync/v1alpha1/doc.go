// Package v1alpha1 holds the Go types of Warden's sync.wardenhq.io/v1alpha1
// API: the PolicySync kind, which the policy syncer (cmd/policy-syncer,
// internal/policysync) reads on a hub cluster to copy policies to spoke
// clusters, and whose status it writes (RFC 002, adapted; the observable
// contract is docs/policy-sync.md).
//
// The group is Warden's own: Kubewarden has no such kind, so it does not
// live in policies.kubewarden.io.
//
// The CustomResourceDefinition in config/crd/bases and
// zz_generated.deepcopy.go are generated from the markers in this package by
// `make generate`; do not edit them by hand.
//
// Like api/policies/v1, this package may import k8s.io/api and
// k8s.io/apimachinery only: no controller-runtime, no client-go, nothing
// from Warden's internal packages.
//
// +kubebuilder:object:generate=true
// +groupName=sync.wardenhq.io
package v1alpha1
