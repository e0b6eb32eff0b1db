#!/usr/bin/env bash
# Copies the CustomResourceDefinitions of the report kinds the audit scanner
# writes out of the Go modules that define them, at the versions pinned in
# go.mod, into config/crd/reports (or the directory given as the only
# argument):
#
#   openreports.io/v1alpha1 Report, ClusterReport
#     github.com/openreports/reports-api, config/crd/
#   wgpolicyk8s.io/v1alpha2 PolicyReport, ClusterPolicyReport (legacy)
#     sigs.k8s.io/wg-policy-prototypes, policy-report/crd/v1alpha2/
#
# Both modules ship the CRDs that controller-gen made from their Go types;
# these are the files Kubewarden's kubewarden-crds chart installs, byte for
# byte, so a cluster that already has them from Kubewarden, Kyverno or
# Policy Reporter holds the same definitions. Nothing is downloaded but the
# modules, through the Go module proxy. hack/verify-generate.sh fails when
# the copies in the tree differ.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/config/crd/reports}"
cd "$root"

# module_dir PATH: the directory of module PATH, at the version go.mod
# selects, in the module cache (downloaded first when missing).
module_dir() {
	local dir
	dir="$(go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
	if [[ -z "$dir" || ! -d "$dir" ]]; then
		echo "report-crds: module $1 has no directory in the module cache" >&2
		return 1
	fi
	printf '%s\n' "$dir"
}

openreports="$(module_dir github.com/openreports/reports-api)"
wgpolicy="$(module_dir sigs.k8s.io/wg-policy-prototypes)"

mkdir -p "$out"
rm -f "$out"/*.yaml
# The module cache is read-only: write copies the tree can change.
for f in \
	"$openreports/config/crd/openreports.io_reports.yaml" \
	"$openreports/config/crd/openreports.io_clusterreports.yaml" \
	"$wgpolicy/policy-report/crd/v1alpha2/wgpolicyk8s.io_policyreports.yaml" \
	"$wgpolicy/policy-report/crd/v1alpha2/wgpolicyk8s.io_clusterpolicyreports.yaml"; do
	install -m 0644 "$f" "$out/$(basename "$f")"
done
