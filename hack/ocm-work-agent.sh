#!/usr/bin/env bash
# Builds Open Cluster Management's work agent from the Go module pinned in
# hack/ocm-work-agent/go.mod (hack/ocm-work-agent/main.go runs it) into a
# cache directory named after the module's version, and prints the binary's
# path as the last line of stdout:
#
#   export WARDEN_OCM_WORK_AGENT="$(hack/ocm-work-agent.sh)"
#
# test/cluster's TestPolicySyncOCM runs it against a spoke API server; without
# WARDEN_OCM_WORK_AGENT the test builds it itself. The first build takes a few
# minutes on two cores (OCM's dependencies, downloads included); later ones
# reuse the Go build cache and take seconds. Progress goes to stderr.
#
# Environment:
#   WARDEN_OCM_WORK_AGENT_DIR  the directory to build into, instead of
#                              ${XDG_CACHE_HOME:-$HOME/.cache}/warden/ocm-work-agent/<version>
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf 'ocm-work-agent: %s\n' "$*" >&2; }

if [[ -n "${WARDEN_OCM_WORK_AGENT_DIR:-}" && "$WARDEN_OCM_WORK_AGENT_DIR" != /* ]]; then
	WARDEN_OCM_WORK_AGENT_DIR="$PWD/$WARDEN_OCM_WORK_AGENT_DIR"
fi

cd "$root/hack/ocm-work-agent"
export GOWORK=off
export GOFLAGS=-buildvcs=false
export CGO_ENABLED=0

version="$(go list -m -f '{{.Version}}' open-cluster-management.io/ocm)"
dir="${WARDEN_OCM_WORK_AGENT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/warden/ocm-work-agent/$version}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

# Always built: go build answers from its cache in seconds when nothing
# changed, and picks up a change to main.go. Linked under a temporary name,
# so an interrupted build leaves nothing that looks finished.
start="$SECONDS"
log "building the work agent of open-cluster-management.io/ocm $version"
tmp="$dir/.ocm-work-agent.$$"
if ! go build -trimpath -ldflags "-s -w" -o "$tmp" .; then
	rm -f "$tmp"
	log "building the work agent failed"
	exit 1
fi
mv -f "$tmp" "$dir/ocm-work-agent"
log "built in $((SECONDS - start))s"
printf '%s\n' "$dir/ocm-work-agent"
