#!/usr/bin/env bash
# Runs the cluster test tier: builds kube-apiserver and etcd with
# hack/cluster-bins.sh (seconds once they are built, several minutes the
# first time) and runs the tests under test/cluster against them. Arguments
# go to go test, e.g. hack/cluster-test.sh -run Smoke -v
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bins="$(hack/cluster-bins.sh)"
bins="${bins##*$'\n'}"
export KUBEBUILDER_ASSETS="$bins"
echo "cluster-test: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS" >&2

go test -tags cluster ./test/cluster/... "$@"
