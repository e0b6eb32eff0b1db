#!/usr/bin/env bash
# Builds the helm CLI pinned in hack/helm/go.mod into a cache directory named
# after its version, and prints the binary's path as the last line of stdout:
#
#   helm="$(hack/helm.sh | tail -n1)"
#
# The end-to-end tier (hack/e2e.sh) installs the chart with it, as users do.
# A binary that is already there is kept. Needs only Go and the Go module
# proxy: no prebuilt binary is downloaded.
#
# Environment:
#   WARDEN_HELM_DIR  the directory to build into, instead of
#                    ${XDG_CACHE_HOME:-$HOME/.cache}/warden/helm/<version>
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/hack/helm"
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0

version="$(go list -m -f '{{.Version}}' helm.sh/helm/v3)"
dir="${WARDEN_HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/warden/helm/$version}"
mkdir -p "$dir"
bin="$dir/helm"
if [[ ! -x "$bin" ]] || ! "$bin" version --template '{{.Version}}' 2>/dev/null | grep -qx "$version"; then
	echo "helm: building $version into $dir" >&2
	start=$SECONDS
	go build -trimpath -o "$bin.$$" \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
		helm.sh/helm/v3/cmd/helm
	mv "$bin.$$" "$bin"
	echo "helm: built in $((SECONDS - start)) s" >&2
fi
echo "$bin"
