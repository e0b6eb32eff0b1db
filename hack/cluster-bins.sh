#!/usr/bin/env bash
# Builds kube-apiserver and etcd for the cluster test tier from the Go modules
# pinned in hack/cluster-bins/go.mod, into a cache directory named after their
# versions, and prints that directory as the last line of stdout:
#
#   export KUBEBUILDER_ASSETS="$(hack/cluster-bins.sh)"
#
# With the argument "node" it also builds what a single-node cluster needs
# (hack/local-cluster.sh): kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and kubectl, from the same module, into the same directory.
#
# Progress goes to stderr. A binary that is already there and reports the
# pinned version is kept, so a warm run takes under a second; the first build
# (downloads included) took about 3.5 minutes on two cores, and "node" adds
# docs/local-cluster.md's figure. Two runs at once take turns (flock on the
# directory) instead of compiling the same packages twice.
#
# Needs only Go and the Go module proxy: no prebuilt binary is downloaded.
#
# Environment:
#   WARDEN_CLUSTER_BINS  the directory to build into, instead of
#                        ${XDG_CACHE_HOME:-$HOME/.cache}/warden/cluster-bins/k8s-<version>-etcd-<version>
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/hack/cluster-bins"

log() { printf 'cluster-bins: %s\n' "$*" >&2; }

node=false
case "${1:-}" in
"") ;;
node) node=true ;;
*)
	log "usage: hack/cluster-bins.sh [node]"
	exit 2
	;;
esac

if ! command -v go >/dev/null 2>&1; then
	log "go is not on PATH; install Go first"
	exit 1
fi

# A relative WARDEN_CLUSTER_BINS is relative to where the script was run.
if [[ -n "${WARDEN_CLUSTER_BINS:-}" && "$WARDEN_CLUSTER_BINS" != /* ]]; then
	WARDEN_CLUSTER_BINS="$PWD/$WARDEN_CLUSTER_BINS"
fi

# Every go command below runs in the tools module, with the same environment
# and flags for every build, so the Go build cache is shared between them.
cd "$tools"
export GOWORK=off
export GOFLAGS=-buildvcs=false
export CGO_ENABLED=0

# The versions come from the tools module's go.mod, the one place they are
# pinned. Time is the release time of the module, used as the build date.
k8s_info="$(go list -m -f '{{.Version}} {{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)"
read -r k8s_version k8s_time <<<"$k8s_info"
etcd_version="$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
build_date="${k8s_time:-1970-01-01T00:00:00Z}"

dir="${WARDEN_CLUSTER_BINS:-${XDG_CACHE_HOME:-$HOME/.cache}/warden/cluster-bins/k8s-$k8s_version-etcd-$etcd_version}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

# One build at a time per directory: a second run waits for the first and
# then finds its binaries up to date. Without flock (util-linux) it goes on.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$dir/.lock"
	if ! flock -n 9; then
		log "another build into $dir is running; waiting for it"
		flock 9
	fi
fi

# kube-apiserver reports its version from ldflags, as the upstream release
# build sets them; without them it says v0.0.0-master.
k8s_major="${k8s_version#v}"
k8s_major="${k8s_major%%.*}"
k8s_minor="${k8s_version#v*.}"
k8s_minor="${k8s_minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$k8s_version"
	ldflags+=" -X $pkg.gitMajor=$k8s_major"
	ldflags+=" -X $pkg.gitMinor=$k8s_minor"
	ldflags+=" -X $pkg.gitTreeState=clean"
	ldflags+=" -X $pkg.buildDate=$build_date"
done

# has_version BINARY LINE [ARGS...]: BINARY exists and LINE is a whole line
# of what BINARY ARGS (default --version) prints.
has_version() {
	local bin="$1" line="$2" out
	shift 2
	(($#)) || set -- --version
	[[ -x "$dir/$bin" ]] || return 1
	out="$("$dir/$bin" "$@" 2>/dev/null)" || return 1
	[[ $'\n'"$out"$'\n' == *$'\n'"$line"$'\n'* ]]
}

# build NAME PACKAGE: builds PACKAGE into $dir/NAME. The binary is linked
# under a temporary name and renamed, so an interrupted build leaves no
# binary behind that looks finished.
build() {
	local name="$1" pkg="$2" tmp="$dir/.$1.$$" start="$SECONDS"
	log "building $name from $pkg"
	if ! go build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg"; then
		rm -f "$tmp"
		log "building $name failed"
		return 1
	fi
	mv -f "$tmp" "$dir/$name"
	log "built $name in $((SECONDS - start))s"
}

if has_version kube-apiserver "Kubernetes $k8s_version"; then
	log "kube-apiserver $k8s_version is up to date"
else
	log "the first build of kube-apiserver takes a few minutes; later ones reuse the Go build cache"
	build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
	has_version kube-apiserver "Kubernetes $k8s_version" || {
		log "the kube-apiserver just built does not report $k8s_version"
		exit 1
	}
fi

if has_version etcd "etcd Version: ${etcd_version#v}"; then
	log "etcd $etcd_version is up to date"
else
	# The main package of the server module is etcd's own entry point.
	build etcd go.etcd.io/etcd/server/v3
	has_version etcd "etcd Version: ${etcd_version#v}" || {
		log "the etcd just built does not report $etcd_version"
		exit 1
	}
fi

if $node; then
	# kubectl has no --version flag; the others answer like kube-apiserver.
	for name in kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
		want="Kubernetes $k8s_version"
		args=(--version)
		if [[ $name == kubectl ]]; then
			want="Client Version: $k8s_version"
			args=(version --client)
		fi
		if has_version "$name" "$want" "${args[@]}"; then
			log "$name $k8s_version is up to date"
			continue
		fi
		build "$name" "k8s.io/kubernetes/cmd/$name"
		has_version "$name" "$want" "${args[@]}" || {
			log "the $name just built does not report $k8s_version"
			exit 1
		}
	done
fi

printf '%s\n' "$dir"
