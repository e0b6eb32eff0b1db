#!/usr/bin/env bash
# Tests Warden's Grafana dashboard and alert rules (charts/warden/files) with
# Prometheus's query engine: the separate module hack/dashboards runs a
# policy server and the controller against a real kube-apiserver and etcd
# (built by hack/cluster-bins.sh, seconds once built), scrapes them, and
# evaluates every panel query and alert. Arguments go to go test, e.g.
# hack/dashboards-test.sh -run QueriesReturnData -v
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bins="$(hack/cluster-bins.sh)"
export KUBEBUILDER_ASSETS="${bins##*$'\n'}"

cd hack/dashboards
go vet -tags cluster ./...
# -count=1: the test reads the chart's files from outside its module, and go
# test does not notice changes there, so a cached result could be stale.
go test -count=1 -tags cluster ./... "$@"
