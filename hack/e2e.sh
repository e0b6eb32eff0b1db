#!/usr/bin/env bash
# Runs the end-to-end tier (test/e2e) on a real node: starts the local
# cluster (hack/local-cluster.sh), builds Warden's images and the test
# registry's with Go alone and imports them into the node's containerd,
# builds the helm CLI (hack/helm.sh), runs the suite, and stops the cluster,
# whatever happened. Arguments go to go test, e.g. hack/e2e.sh -run E2E/basic
#
# Needs root (the node changes host state; `down` undoes it). A machine has
# one node: runs wait for each other on a lock file. Environment:
#   WARDEN_E2E_KEEP_CLUSTER=1  leave the cluster up afterwards (stop it with
#                              hack/local-cluster.sh down)
#   WARDEN_NODE_LOCK           the lock file [/run/lock/warden-node-user.lock]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { printf 'e2e: %s\n' "$*" >&2; }

lock="${WARDEN_NODE_LOCK:-/run/lock/warden-node-user.lock}"
mkdir -p "$(dirname "$lock")"
exec 9>"$lock"
if ! flock -n 9; then
	log "another run uses the node ($lock); waiting for it"
	flock 9
fi

work="$(mktemp -d)"
cleanup() {
	local code=$?
	if [[ "${WARDEN_E2E_KEEP_CLUSTER:-}" != 1 ]]; then
		hack/local-cluster.sh down || code=1
	fi
	rm -rf "$work"
	exit "$code"
}
trap cleanup EXIT

# A run that was killed (a session or a CI job stopped mid-way) leaves a
# cluster whose processes are gone: take down what is there first.
if ! hack/local-cluster.sh check-clean >/dev/null 2>&1; then
	log "a cluster, or what one left, is here: taking it down first"
	hack/local-cluster.sh down
fi

start=$SECONDS
kubeconfig="$(hack/local-cluster.sh up | tail -n1)"
log "cluster up in $((SECONDS - start)) s: $kubeconfig"

helm="$(hack/helm.sh | tail -n1)"

# Two tags of the same images: the upgrade step moves the release from one
# to the other, which rolls every pod.
tag=e2e-a upgrade_tag=e2e-b
for t in "$tag" "$upgrade_tag"; do
	step=$SECONDS
	go run ./hack/image -platform linux/amd64 -tag "$t" -binary controller,policy-server,audit-scanner -out "$work/warden-$t.tar" >&2
	hack/local-cluster.sh load-images "$work/warden-$t.tar" >&2
	log "images $t built and loaded in $((SECONDS - step)) s"
done

registry_image=localhost/warden/e2e-registry:1
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/e2eregistry" ./hack/e2eregistry
go run ./hack/local-cluster/ociimage -binary "$work/e2eregistry" -name "$registry_image" -user 65532:65532 -out "$work/e2eregistry.tar"
hack/local-cluster.sh load-images "$work/e2eregistry.tar" >&2

export WARDEN_E2E_KUBECONFIG="$kubeconfig" WARDEN_E2E_HELM="$helm" \
	WARDEN_E2E_TAG="$tag" WARDEN_E2E_UPGRADE_TAG="$upgrade_tag" \
	WARDEN_E2E_REGISTRY_IMAGE="$registry_image" WARDEN_E2E_POD_IMAGE=localhost/warden/pause:1
go test -tags e2e -count=1 -timeout 30m ./test/e2e/ "$@"
