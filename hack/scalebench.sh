#!/usr/bin/env bash
# Runs the scale benchmark of context-aware policies (hack/scalebench, issue
# 21): builds kube-apiserver and etcd with hack/cluster-bins.sh, then runs
# TestScale, which creates the populations, starts the policy server and
# the informer baseline as processes and loads them with hack/loadtest. The
# report (markdown) is printed at the end, and written to $SCALE_REPORT when
# set.
#
#   hack/scalebench.sh                   # every scenario: namespaces rolebindings pods
#   hack/scalebench.sh pods              # some of them
#   SCALE_QUICK=1 hack/scalebench.sh     # 300 namespaces, 1,000 RoleBindings, 200 pods, 5s runs
#
# The SCALE_* variables of the package comment of hack/scalebench size the
# populations and the runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for s in "$@"; do
  case $s in
  namespaces | rolebindings | pods) ;;
  *)
    echo "usage: hack/scalebench.sh [namespaces] [rolebindings] [pods]" >&2
    exit 2
    ;;
  esac
done
export SCALE_SCENARIOS="${*:-${SCALE_SCENARIOS:-}}"

bins="$(hack/cluster-bins.sh)"
bins="${bins##*$'\n'}"
export KUBEBUILDER_ASSETS="$bins"
echo "scalebench: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS" >&2

exec go test -tags cluster,scale -run '^TestScale$' -count 1 -timeout 4h -v ./hack/scalebench
