// Package cluster holds the cluster test tier: tests against a real
// kube-apiserver and etcd, started per test by internal/clustertest. The tests
// compile only under the cluster build tag, so the plain go test ./... does
// not reach them. Run them with hack/cluster-test.sh, which builds the
// binaries first, or by hand:
//
//	export KUBEBUILDER_ASSETS="$(hack/cluster-bins.sh)"
//	go test -tags cluster ./test/cluster/...
//
// The package has tests only; nothing imports it.
package cluster
