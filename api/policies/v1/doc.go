// Package v1 holds the Go types of the policies.kubewarden.io/v1 API: the
// Custom Resources that Warden's controller and policy server read and write.
//
// The kinds are wire-compatible with Kubewarden's: a manifest written for
// Kubewarden's policies.kubewarden.io/v1 is accepted unchanged. The package
// adds the PolicyRevision kind of RFC 000 and the helpers the controller
// needs (the Policy interface, unique names, condition helpers).
//
// The CustomResourceDefinitions in config/crd/bases, the RBAC role in
// config/rbac and zz_generated.deepcopy.go are generated from the markers in
// this package by `make generate`; do not edit them by hand.
//
// This package is Warden's only public Go package. It may import k8s.io/api
// and k8s.io/apimachinery only: no controller-runtime, no client-go, nothing
// from Warden's internal packages.
//
// +kubebuilder:object:generate=true
// +groupName=policies.kubewarden.io
package v1
