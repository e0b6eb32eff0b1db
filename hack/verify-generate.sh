#!/usr/bin/env bash
# Checks that the generated files in the tree (deepcopy functions, CRDs, RBAC
# role) are exactly what `make generate` produces from the sources, and that
# the report CRDs (config/crd/reports) are what hack/report-crds.sh copies
# out of the Go modules pinned in go.mod. It
# generates into a scratch directory, so it changes nothing in the tree and
# works on a tree with uncommitted changes. Exits 1 with a diff when they
# differ, 2 when generation itself fails.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

out=$scratch/generated
if ! make --no-print-directory generate \
	CRD_DIR="$out/config/crd/bases" \
	RBAC_DIR="$out/config/rbac" \
	DEEPCOPY_DIR="$out/api" \
	>"$scratch/generate.log" 2>&1; then
	cat "$scratch/generate.log" >&2
	echo "verify-generate: make generate failed" >&2
	exit 2
fi
if ! hack/report-crds.sh "$out/config/crd/reports" >"$scratch/report-crds.log" 2>&1; then
	cat "$scratch/report-crds.log" >&2
	echo "verify-generate: hack/report-crds.sh failed" >&2
	exit 2
fi

# Copy the tree's version of the same paths beside it, so that the diff
# names files by their path in the tree.
mkdir -p "$scratch/tree/config/crd"
[[ -d config/crd/bases ]] && cp -R config/crd/bases "$scratch/tree/config/crd/"
[[ -d config/crd/reports ]] && cp -R config/crd/reports "$scratch/tree/config/crd/"
[[ -d config/rbac ]] && cp -R config/rbac "$scratch/tree/config/"
for f in api/*/*/zz_generated.deepcopy.go; do
	[[ -f $f ]] || continue
	mkdir -p "$scratch/tree/$(dirname "$f")"
	cp "$f" "$scratch/tree/$f"
done

if ! (cd "$scratch" && diff -ru tree generated); then
	echo >&2
	echo "verify-generate: generated files are out of date (--- tree, +++ what 'make generate' writes)." >&2
	echo "verify-generate: run 'make generate' (and hack/report-crds.sh for config/crd/reports) and commit the result." >&2
	exit 1
fi
echo "verify-generate: generated files are up to date"
