// Package clustertest starts a real kube-apiserver and etcd for the cluster
// test tier: tests that need an API server call Start and get a *rest.Config
// and a controller-runtime client for a control plane of their own, stopped
// when the test ends.
//
// The binaries are built from Go modules by hack/cluster-bins.sh, which
// prints the directory that KUBEBUILDER_ASSETS must name; hack/cluster-test.sh
// does both and runs the tests. The control plane is started by
// controller-runtime's envtest, so its environment variables apply too: for
// example KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT=true shows the output of
// kube-apiserver and etcd.
//
// Everything that starts processes compiles only under the cluster build tag,
// like the tests that use it (test/cluster), so the plain go test ./... does
// not build envtest. Only tests import this package; it must not import any
// Warden package, so that every package's cluster tests can use it.
package clustertest
