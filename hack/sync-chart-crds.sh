#!/usr/bin/env bash
# Copies the generated CRDs (config/crd/bases) into the Helm chart's crds/
# directory, the report CRDs the audit scanner writes (config/crd/reports,
# from hack/report-crds.sh) to charts/warden/files/report-crds/, which a
# template renders unless the values skip them, and the controller's
# generated ClusterRole (config/rbac/role.yaml) to
# charts/warden/files/controller-role.yaml, whose rules the chart's
# ClusterRole renders. Run it after `make generate` or hack/report-crds.sh;
# hack/chart-test.sh fails while the copies differ from the originals.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

chart=charts/warden
rm -f "$chart"/crds/*.yaml "$chart"/files/report-crds/*.yaml
mkdir -p "$chart/crds" "$chart/files/report-crds"
cp config/crd/bases/*.yaml "$chart/crds/"
cp config/crd/reports/*.yaml "$chart/files/report-crds/"
cp config/rbac/role.yaml "$chart/files/controller-role.yaml"
