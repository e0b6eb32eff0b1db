#!/usr/bin/env bash
# Tests the Helm chart charts/warden: renders it with Helm's Go library (the
# separate module hack/charttest, so that the main go.mod does not depend on
# Helm) and checks the objects, lints it, and checks that the chart's CRDs and
# RBAC rules are those generated into config/ (hack/sync-chart-crds.sh copies
# them). Arguments go to go test, e.g. hack/chart-test.sh -run Lint -v
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../hack/charttest"

# -count=1: the test reads the chart and config/ from outside its module, and
# go test does not notice changes there, so a cached result could be stale.
go test -count=1 ./... "$@"
