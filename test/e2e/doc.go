// Package e2e is Warden's end-to-end tier: the Helm chart installed with the
// helm CLI on a real node (hack/local-cluster.sh), where a kubelet runs
// Warden's images, mounts its Secrets, runs its probes under the chart's
// security contexts, and the API server reaches the webhooks through
// Services. It follows Kubewarden's end-to-end suites (basic, monitor,
// mutating, namespaced, context-aware, audit, scaling, upgrade, uninstall).
//
// The tests are behind the e2e build tag and need a cluster made for them;
// hack/e2e.sh starts one, builds and loads the images, runs them and stops
// the cluster:
//
//	hack/e2e.sh            # everything
//	hack/e2e.sh -run E2E   # arguments go to go test
//
// The environment hack/e2e.sh sets (each required):
//
//	WARDEN_E2E_KUBECONFIG      the cluster's admin kubeconfig
//	WARDEN_E2E_HELM            the helm binary (hack/helm.sh)
//	WARDEN_E2E_TAG             the tag of Warden's images in the node's containerd
//	WARDEN_E2E_UPGRADE_TAG     another tag of the same images, for helm upgrade
//	WARDEN_E2E_REGISTRY_IMAGE  the image of hack/e2eregistry
//	WARDEN_E2E_POD_IMAGE       an image the test pods run (the node's pause image)
package e2e
