#!/usr/bin/env bash
# Runs the cluster test tier: builds kube-apiserver and etcd with
# hack/cluster-bins.sh, and OCM's work agent with hack/ocm-work-agent.sh
# (seconds once they are built, several minutes the first time), and runs
# the tests under test/cluster against them. Arguments go to go test, e.g.
# hack/cluster-test.sh -run Smoke -v
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bins="$(hack/cluster-bins.sh)"
bins="${bins##*$'\n'}"
export KUBEBUILDER_ASSETS="$bins"
echo "cluster-test: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS" >&2

# OCM's work agent, for TestPolicySyncOCM: built here, outside go test's
# timeout (a few minutes the first time, seconds after).
agent="$(hack/ocm-work-agent.sh)"
export WARDEN_OCM_WORK_AGENT="${agent##*$'\n'}"

# The corpus of TestVAPDiff: the modules hack/vap-corpus pins, downloaded
# here, outside go test's timeout; the test reads them from the module cache.
(cd hack/vap-corpus && GOWORK=off go mod download)

go test -tags cluster ./test/cluster/... "$@"
