//go:build tools

// Package clusterbins records the main packages that hack/cluster-bins.sh
// builds, so that go.mod and go.sum hold every module they need. It is never
// compiled: the tools build tag keeps it out of every build, and a main
// package cannot be imported anyway.
package clusterbins

import (
	// etcd's main package; the binary is built as etcd.
	_ "go.etcd.io/etcd/server/v3"
	// The Kubernetes API server: the cluster test tier needs only it and
	// etcd.
	_ "k8s.io/kubernetes/cmd/kube-apiserver"

	// The rest of a single-node cluster, built by hack/cluster-bins.sh node
	// for hack/local-cluster.sh.
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
