#!/usr/bin/env bash
# Starts and stops a single-node Kubernetes cluster on this machine, as root,
# from binaries built here: nothing prebuilt is downloaded and no image is
# ever pulled. See docs/local-cluster.md.
#
#   hack/local-cluster.sh build             build and install what up needs, start nothing
#   hack/local-cluster.sh up                start the cluster; the last line of stdout is
#                                           the admin kubeconfig's path
#   hack/local-cluster.sh load-images PATH  import what `go run ./hack/image -out PATH`
#                                           wrote (a .tar or an OCI layout directory)
#   hack/local-cluster.sh smoke             pods, a Service by ClusterIP and DNS name
#   hack/local-cluster.sh recycle-volumes   empty the released volumes and make them available
#   hack/local-cluster.sh status            what runs, with its memory (exit 1: down or partly up)
#   hack/local-cluster.sh env               export lines: KUBECONFIG, PATH with kubectl
#   hack/local-cluster.sh kubectl ARGS...   kubectl with the admin kubeconfig
#   hack/local-cluster.sh down              stop it and undo every change it made
#   hack/local-cluster.sh check-clean       say what a cluster left behind, exit 1 if anything
#
# Progress goes to stderr. The Kubernetes binaries come from
# hack/cluster-bins.sh node (k8s.io/kubernetes and etcd pinned in
# hack/cluster-bins/go.mod), CoreDNS from hack/local-cluster/coredns/go.mod,
# the pause and probe images from hack/local-cluster/{pause,probe}; containerd,
# runc, the CNI plugins and iptables are Debian's, installed with apt-get when
# missing.
#
# Only loopback, the node's address (on lo) and the cluster's pod and service
# ranges are used; iptables rules drop whatever would leave the machine from
# those ranges. Environment (defaults in brackets):
#   WARDEN_LOCAL_CLUSTER_NODE_IP       the node's address, put on lo [198.18.0.1]
#   WARDEN_LOCAL_CLUSTER_POD_CIDR      pod range, on the bridge warden0 [198.18.64.0/18]
#   WARDEN_LOCAL_CLUSTER_SERVICE_CIDR  service range [198.18.128.0/20]
#   WARDEN_LOCAL_CLUSTER_DIR           state [/var/lib/warden-local-cluster]
#   WARDEN_LOCAL_CLUSTER_RUN_DIR       runtime state, sockets [/run/warden-local-cluster]
#   WARDEN_LOCAL_CLUSTER_TIMEOUT       seconds up waits for each step [180]
#   WARDEN_LOCAL_CLUSTER_VOLUMES       hostPath PersistentVolumes of the default
#                                      StorageClass warden-local [16]
#   WARDEN_LOCAL_CLUSTER_VOLUME_SIZE   the capacity of each [10Gi]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

node_ip="${WARDEN_LOCAL_CLUSTER_NODE_IP:-198.18.0.1}"
pod_cidr="${WARDEN_LOCAL_CLUSTER_POD_CIDR:-198.18.64.0/18}"
service_cidr="${WARDEN_LOCAL_CLUSTER_SERVICE_CIDR:-198.18.128.0/20}"
dir="${WARDEN_LOCAL_CLUSTER_DIR:-/var/lib/warden-local-cluster}"
run="${WARDEN_LOCAL_CLUSTER_RUN_DIR:-/run/warden-local-cluster}"
timeout="${WARDEN_LOCAL_CLUSTER_TIMEOUT:-180}"
volumes="${WARDEN_LOCAL_CLUSTER_VOLUMES:-16}"
volume_size="${WARDEN_LOCAL_CLUSTER_VOLUME_SIZE:-10Gi}"

case "$dir/$run/" in
*/warden*/*/warden*/*) ;;
*) echo "local-cluster: WARDEN_LOCAL_CLUSTER_DIR and WARDEN_LOCAL_CLUSTER_RUN_DIR must be directories of their own, named warden...: down removes them" >&2; exit 2 ;;
esac
node_name=warden-local
bridge=warden0
guard_chain=WARDEN-LOCAL-CLUSTER
cluster_domain=cluster.local
pause_image=localhost/warden/pause:1
probe_image=localhost/warden/probe:1
lock_file=/run/lock/warden-local-cluster.lock
apt_packages=(containerd runc containernetworking-plugins iptables nftables openssl)
cni_bin=/usr/lib/cni

# The kernel settings the kubelet (vm.*, kernel.*), the bridge plugin and IP
# forwarding change, or that kube-proxy would if let: up records them, down
# writes back those that differ.
sysctls=(
	vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes
	net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv4.conf.default.forwarding
	net.ipv4.conf.lo.forwarding net.ipv4.conf.all.route_localnet
	net.ipv4.conf.all.accept_redirects
	net.ipv6.conf.all.forwarding net.ipv6.conf.default.forwarding
	net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
	net.bridge.bridge-nf-call-arptables
	net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_be_liberal
	net.netfilter.nf_conntrack_tcp_timeout_established
	net.netfilter.nf_conntrack_tcp_timeout_close_wait
	net.netfilter.nf_conntrack_udp_timeout net.netfilter.nf_conntrack_udp_timeout_stream
)

# Paths outside the cluster's directories that its programs create whatever
# they are told: containerd 1.6's shim sockets (/run/containerd/s) and, with
# runc's state moved, nothing else there; libcni's cache; the kubelet's
# device-plugin socket directory and its container log links; util-linux's
# mount table (/run/mount). down removes those that were not there before up,
# and what the cluster added to those that were.
host_paths=(/run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /run/mount)

# The cluster's processes, in start order; down stops them in reverse.
daemons=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns)

log() { printf 'local-cluster: [%3ds] %s\n' "$SECONDS" "$*" >&2; }
# A command that fails and stops the script says so.
set -E
trap 'log "failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR
die() {
	log "$*"
	exit 1
}

# ---------------------------------------------------------------- addresses

ip2int() {
	local IFS=. a b c d
	read -r a b c d <<<"$1"
	echo $(((a << 24) | (b << 16) | (c << 8) | d))
}
int2ip() { echo "$((($1 >> 24) & 255)).$((($1 >> 16) & 255)).$((($1 >> 8) & 255)).$(($1 & 255))"; }
# cidr_range A.B.C.D/N: the first and last address as integers.
cidr_range() {
	local addr="${1%/*}" bits="${1#*/}"
	[[ $1 == */* ]] || bits=32
	local n mask
	n="$(ip2int "$addr")"
	mask=$(((0xffffffff << (32 - bits)) & 0xffffffff))
	echo "$((n & mask)) $(((n & mask) | (~mask & 0xffffffff)))"
}
# overlaps CIDR CIDR
overlaps() {
	local a1 a2 b1 b2
	read -r a1 a2 <<<"$(cidr_range "$1")"
	read -r b1 b2 <<<"$(cidr_range "$2")"
	((a1 <= b2 && b1 <= a2))
}
# nth CIDR N: the Nth address of CIDR.
nth() {
	local first
	read -r first _ <<<"$(cidr_range "$1")"
	int2ip $((first + $2))
}

pod_gateway="$(nth "$pod_cidr" 1)"
api_service_ip="$(nth "$service_cidr" 1)"
cluster_dns="$node_ip"

# ---------------------------------------------------------------- tools

# The paths of the built binaries, saved by up for the other commands.
bins=""
coredns_bin=""
helper_bin=""
load_env() {
	[[ -f $dir/env ]] || return 1
	# shellcheck disable=SC1091
	source "$dir/env"
}

kubectl() { KUBECACHEDIR="$dir/kube-cache" "$bins/kubectl" --kubeconfig "$dir/admin.kubeconfig" "$@"; }
ctr_() { ctr --address "$run/containerd/containerd.sock" -n k8s.io "$@"; }

need_root() {
	[[ $(id -u) == 0 ]] || die "run it as root: it starts a kubelet, mounts, and changes iptables and the network"
}

# install_packages installs the Debian packages that are missing.
install_packages() {
	local missing=() p
	for p in "${apt_packages[@]}"; do
		dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if ((${#missing[@]})); then
		log "installing Debian packages: ${missing[*]}"
		apt-get update >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
	fi
	local c
	for c in containerd containerd-shim-runc-v2 runc ctr iptables iptables-save ip6tables ip6tables-save openssl ip mount umount setsid flock; do
		command -v "$c" >/dev/null || die "$c is not on PATH after installing ${apt_packages[*]}"
	done
	[[ -x $cni_bin/bridge && -x $cni_bin/host-local && -x $cni_bin/loopback ]] ||
		die "the CNI plugins are not in $cni_bin"
}

# build_all builds the Kubernetes binaries, CoreDNS and the helpers, and
# records their paths in $dir/env.
build_all() {
	command -v go >/dev/null || die "go is not on PATH"
	local start=$SECONDS out
	out="$("$root/hack/cluster-bins.sh" node)"
	bins="${out##*$'\n'}"

	# CoreDNS: its own tools module, cached by version like cluster-bins.
	local cdir version cache
	cdir="$root/hack/local-cluster/coredns"
	version="$(cd "$cdir" && GOWORK=off go list -m -f '{{.Version}}' github.com/coredns/coredns)"
	cache="${XDG_CACHE_HOME:-$HOME/.cache}/warden/local-cluster"
	coredns_bin="$cache/coredns-$version/coredns"
	local have=""
	[[ -x $coredns_bin ]] && have="$("$coredns_bin" -version 2>/dev/null)" || true
	if [[ $'\n'"$have"$'\n' == *$'\n'"CoreDNS-${version#v}"$'\n'* ]]; then
		log "coredns $version is up to date"
	else
		log "building coredns $version"
		mkdir -p "${coredns_bin%/*}"
		(cd "$cdir" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
			go build -trimpath -ldflags "-s -w" -o "$coredns_bin.tmp" .) || die "building coredns failed"
		mv -f "$coredns_bin.tmp" "$coredns_bin"
	fi

	# The helpers are Warden's own code: rebuilt every time, in a second or
	# two from the build cache.
	helper_bin="$cache/helpers"
	mkdir -p "$helper_bin"
	(cd "$root" && GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
		go build -trimpath -ldflags "-s -w" -o "$helper_bin/" ./hack/local-cluster/pause ./hack/local-cluster/probe ./hack/local-cluster/ociimage) ||
		die "building the helpers failed"
	log "binaries ready in $((SECONDS - start))s: $bins, $coredns_bin, $helper_bin"
	mkdir -p "$dir"
	cat >"$dir/env" <<EOF
bins='$bins'
coredns_bin='$coredns_bin'
helper_bin='$helper_bin'
EOF
}

# ---------------------------------------------------------------- processes

# start NAME COMMAND...: runs COMMAND in its own session, logging to
# logs/NAME.log, with no other file descriptor of ours open (the lock, the
# caller's pipes), and records its PID and executable. The subshell execs
# setsid, which execs COMMAND without forking (a background job of a script
# leads no process group), so $! is COMMAND's PID.
start() {
	local name="$1" exe
	shift
	exe="$(readlink -f "$(command -v "$1")")"
	log "starting $name"
	(
		for fd in /proc/self/fd/*; do
			fd="${fd##*/}"
			((fd > 2)) && eval "exec $fd>&-"
		done
		exec setsid "$@" </dev/null >>"$dir/logs/$name.log" 2>&1
	) &
	printf '%s %s\n' "$!" "$exe" >"$dir/pids/$name"
}

# pid_of NAME: the PID of a daemon that still runs as the executable started.
pid_of() {
	local f="$dir/pids/$1" pid exe cur
	[[ -f $f ]] || return 1
	read -r pid exe <"$f"
	alive "$pid" || return 1
	cur="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
	[[ ${cur% (deleted)} == "$exe" ]] || return 1
	echo "$pid"
}

# alive PID: the process exists and is not a zombie (the daemons of an
# earlier run are the children of init, which may reap them late).
alive() {
	local stat
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
	stat="${stat##*) }"
	[[ ${stat:0:1} != Z ]]
}

# stop_pid PID WHAT: SIGTERM, then SIGKILL after 15 s.
stop_pid() {
	local pid="$1" i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 150; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
	log "$2 (PID $pid) ignored SIGTERM for 15s; killing it"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
}

stop_daemon() {
	local pid
	if pid="$(pid_of "$1")"; then
		log "stopping $1 (PID $pid)"
		stop_pid "$pid" "$1"
	fi
	rm -f "$dir/pids/$1"
}

# wait_for WHAT COMMAND...: runs COMMAND until it succeeds, for $timeout s,
# and fails at once when a daemon that was started has exited.
wait_for() {
	local what="$1" start=$SECONDS f
	shift
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS - start > timeout)); then
			log "timed out after ${timeout}s waiting for $what"
			return 1
		fi
		for f in "$dir"/pids/*; do
			[[ -f $f ]] || continue
			pid_of "${f##*/}" >/dev/null || {
				log "${f##*/} exited while waiting for $what; see $dir/logs/${f##*/}.log"
				return 1
			}
		done
		sleep 0.25
	done
	log "$what after $((SECONDS - start))s"
}

# ---------------------------------------------------------------- host state

sysctl_path() { echo "/proc/sys/${1//.//}"; }

record_baseline() {
	mkdir -p "$dir/baseline"
	local k p
	: >"$dir/baseline/sysctl"
	for k in "${sysctls[@]}"; do
		p="$(sysctl_path "$k")"
		[[ -r $p ]] && printf '%s=%s\n' "$k" "$(tr '\t' ' ' <"$p")" >>"$dir/baseline/sysctl"
	done
	iptables_rules >"$dir/baseline/iptables"
	if command -v nft >/dev/null; then
		nft list tables >"$dir/baseline/nft-tables" 2>/dev/null || true
	fi
	local h
	: >"$dir/baseline/host-paths"
	for h in "${host_paths[@]}"; do
		[[ -e $h ]] || continue
		echo "$h" >>"$dir/baseline/host-paths"
		find "$h" -xdev -mindepth 1 >"$dir/baseline/host-path-entries-${h//\//_}" 2>/dev/null || true
	done
}

# restore_host_paths removes what the cluster created outside its
# directories: whole paths that did not exist before up, else the entries
# that appeared in them.
restore_host_paths() {
	[[ -f $dir/baseline/host-paths ]] || return 0
	local h e list
	for h in "${host_paths[@]}"; do
		[[ -e $h ]] || continue
		if ! grep -qxF "$h" "$dir/baseline/host-paths"; then
			rm -rf "$h"
			continue
		fi
		list="$dir/baseline/host-path-entries-${h//\//_}"
		while IFS= read -r e; do
			grep -qxF "$e" "$list" || rm -rf "$e"
		done < <(find "$h" -xdev -mindepth 1 -depth 2>/dev/null || true)
	done
}

# iptables_rules prints every IPv4 and IPv6 rule, without counters, and
# without the tables that hold no rule, no chain of their own and no policy
# but ACCEPT (iptables-nft creates a table on first use and never removes it).
iptables_rules() {
	local save
	for save in iptables-save ip6tables-save; do
		echo "# $save"
		{ "$save" 2>/dev/null || true; } | awk '
			/^#/ { next }
			{ sub(/ \[[0-9]+:[0-9]+\]$/, "") }
			/^\*/ { block = $0 "\n"; keep = 0; next }
			/^COMMIT/ { if (keep) printf "%s%s\n", block, $0; block = ""; next }
			/^-A / || /^:[^ ]+ - *$/ || (/^:/ && $2 != "ACCEPT") { keep = 1 }
			{ block = block $0 "\n" }'
	done
}

# remove_new_tables deletes, with nft when it is installed, the empty
# iptables-nft tables that were not there before up.
remove_new_tables() {
	command -v nft >/dev/null && [[ -f $dir/baseline/nft-tables ]] || return 0
	local word family table save
	while read -r word family table; do
		[[ $word == table ]] || continue
		grep -qxF "table $family $table" "$dir/baseline/nft-tables" && continue
		case "$family:$table" in
		ip:filter | ip:nat | ip:mangle | ip:raw | ip:security) save=iptables-nft-save ;;
		ip6:filter | ip6:nat | ip6:mangle | ip6:raw | ip6:security) save=ip6tables-nft-save ;;
		*) continue ;;
		esac
		# Empty: no rule, no chain of its own, every policy ACCEPT.
		if ! "$save" -t "$table" 2>/dev/null | grep -qE '^-A |^:[^ ]+ - |^:[^ ]+ (DROP|REJECT)'; then
			nft delete table "$family" "$table" 2>/dev/null || log "could not delete the nftables table $family $table"
		fi
	done < <(nft list tables 2>/dev/null || true)
}

restore_sysctls() {
	[[ -f $dir/baseline/sysctl ]] || return 0
	local line k v p cur
	# ip_forward first: writing it resets every interface's forwarding.
	while IFS= read -r line; do
		k="${line%%=*}"
		v="${line#*=}"
		p="$(sysctl_path "$k")"
		[[ -w $p ]] || continue
		cur="$(tr '\t' ' ' <"$p")"
		if [[ $cur != "$v" ]]; then
			log "restoring $k: $cur -> $v"
			printf '%s\n' "$v" >"$p" || log "could not restore $k"
		fi
	done < <(
		grep '^net.ipv4.ip_forward=' "$dir/baseline/sysctl" || true
		grep -v '^net.ipv4.ip_forward=' "$dir/baseline/sysctl" || true
	)
}

# make_bridge creates the pods' bridge before the CNI plugin would (it takes
# it as it is), so that the service range can be routed to it: the host's
# connections to a service then start on the bridge, never on the default
# route, and a service address that kube-proxy does not translate goes
# nowhere.
make_bridge() {
	ip link add "$bridge" type bridge
	ip addr add "$pod_gateway/${pod_cidr#*/}" dev "$bridge"
	ip link set "$bridge" up
	ip route add "$service_cidr" dev "$bridge" src "$pod_gateway"
}

# guard_rules adds the rules that keep the cluster's traffic on the machine:
# nothing is forwarded between the pods' bridge and another interface, and
# nothing this host sends to the pod range leaves by another interface, nor
# to the service range unless kube-proxy translated it.
guard_rules() {
	iptables -w -N "$guard_chain" 2>/dev/null || iptables -w -F "$guard_chain"
	iptables -w -A "$guard_chain" -i "$bridge" -o "$bridge" -j RETURN
	iptables -w -A "$guard_chain" -i "$bridge" -j DROP
	iptables -w -A "$guard_chain" -o "$bridge" ! -i "$bridge" -m conntrack ! --ctstate ESTABLISHED,RELATED -j DROP
	iptables -w -A "$guard_chain" -d "$pod_cidr" ! -o "$bridge" -j DROP
	iptables -w -A "$guard_chain" -d "$service_cidr" -j DROP
	iptables -w -C FORWARD -j "$guard_chain" 2>/dev/null || iptables -w -I FORWARD 1 -j "$guard_chain"
	iptables -w -N "$guard_chain-OUT" 2>/dev/null || iptables -w -F "$guard_chain-OUT"
	iptables -w -A "$guard_chain-OUT" -o lo -j RETURN
	iptables -w -A "$guard_chain-OUT" -d "$pod_cidr" ! -o "$bridge" -j REJECT
	iptables -w -A "$guard_chain-OUT" -d "$service_cidr" -j REJECT
	iptables -w -C OUTPUT -j "$guard_chain-OUT" 2>/dev/null || iptables -w -I OUTPUT 1 -j "$guard_chain-OUT"
}

# clean_iptables removes the chains of kube-proxy and the kubelet (KUBE-*),
# of the CNI plugins (CNI-*) and ours, and every rule that jumps to them,
# from every table, IPv4 and IPv6, with whichever iptables backends exist.
clean_iptables() {
	local pair ipt save table line chain rules
	for pair in iptables:iptables-save ip6tables:ip6tables-save \
		iptables-legacy:iptables-legacy-save ip6tables-legacy:ip6tables-legacy-save; do
		ipt="${pair%%:*}"
		save="${pair#*:}"
		command -v "$ipt" >/dev/null && command -v "$save" >/dev/null || continue
		local tables=(raw mangle nat filter security)
		# Naming a legacy table creates it: only those that exist.
		case "$ipt" in
		iptables-legacy) mapfile -t tables </proc/net/ip_tables_names 2>/dev/null || tables=() ;;
		ip6tables-legacy) mapfile -t tables </proc/net/ip6_tables_names 2>/dev/null || tables=() ;;
		esac
		for table in "${tables[@]}"; do
			rules="$("$save" -t "$table" 2>/dev/null)" || continue
			grep -qE '^:(KUBE-|CNI-|WARDEN-LOCAL-CLUSTER)' <<<"$rules" || continue
			# First the rules of other chains that jump to the chains going
			# away (iptables-save quotes as the shell does), then the chains.
			while IFS= read -r line; do
				eval "\"\$ipt\" -w -t \"\$table\" -D ${line#-A }" 2>/dev/null || true
			done < <(grep -E '^-A ' <<<"$rules" | grep -vE '^-A (KUBE-|CNI-|WARDEN-LOCAL-CLUSTER)' | grep -E -- '-j (KUBE-|CNI-|WARDEN-LOCAL-CLUSTER)' || true)
			while IFS= read -r chain; do
				"$ipt" -w -t "$table" -F "$chain" 2>/dev/null || true
			done < <(grep -oE '^:(KUBE-|CNI-|WARDEN-LOCAL-CLUSTER)[^ ]*' <<<"$rules" | cut -c2- || true)
			while IFS= read -r chain; do
				"$ipt" -w -t "$table" -X "$chain" 2>/dev/null || true
			done < <(grep -oE '^:(KUBE-|CNI-|WARDEN-LOCAL-CLUSTER)[^ ]*' <<<"$rules" | cut -c2- || true)
		done
	done
}

# our_mounts prints the mount points under the cluster's directories,
# deepest first.
our_mounts() {
	awk -v d="$dir/" -v r="$run/" '{ m = $5; gsub(/\\040/, " ", m); if (index(m "/", d) == 1 || index(m "/", r) == 1) print length(m), m }' /proc/self/mountinfo |
		sort -rn | cut -d' ' -f2-
}

# our_processes prints "PID what" for every process of the cluster still
# alive: the daemons, containerd's shims for this cluster's socket, and any
# process in a kubelet cgroup.
our_processes() {
	local name pid f
	for name in "${daemons[@]}"; do
		pid="$(pid_of "$name")" && echo "$pid $name"
	done
	# One grep each over every process: a loop would take seconds.
	# A command line's arguments are separated by NULs: the socket path is
	# one of them, the shim's binary the first.
	while IFS= read -r f; do
		pid="${f#/proc/}"
		pid="${pid%%/*}"
		[[ "$(tr '\0' '\n' 2>/dev/null <"$f" | head -n1)" == *containerd-shim* ]] || continue
		alive "$pid" && echo "$pid containerd-shim"
	done < <(grep -lsF -- "$run/containerd/containerd.sock" /proc/[0-9]*/cmdline || true)
	while IFS= read -r f; do
		pid="${f#/proc/}"
		pid="${pid%%/*}"
		alive "$pid" && echo "$pid container process $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | cut -c1-60)"
	done < <(grep -lsE '^[0-9]+:[^:]*:/kubepods' /proc/[0-9]*/cgroup || true)
	true
}

# our_cgroups prints the kubelet's cgroup directories, deepest first.
our_cgroups() {
	local h
	for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
		[[ -d $h ]] && find "$h" -depth -type d
	done
	true
}

# ---------------------------------------------------------------- pki

openssl_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# cert NAME SUBJECT EXTKEYUSAGE [SANS]: a key and a certificate signed by the
# cluster CA, in pki/.
cert() {
	local name="$1" subject="$2" eku="$3" sans="${4:-}" pki="$dir/pki"
	openssl_key "$pki/$name.key"
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$eku"
		[[ -n $sans ]] && echo "subjectAltName=$sans"
	} >"$pki/$name.ext"
	openssl req -new -key "$pki/$name.key" -subj "$subject" 2>/dev/null |
		openssl x509 -req -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
			-days 365 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
	rm -f "$pki/$name.ext"
}

# kubeconfig NAME CERT: a kubeconfig for the client certificate pki/CERT.
kubeconfig() {
	local pki="$dir/pki"
	cat >"$dir/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $node_name
  cluster:
    server: https://$node_ip:6443
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$pki/$2.crt")
    client-key-data: $(base64 -w0 "$pki/$2.key")
contexts:
- name: $node_name
  context:
    cluster: $node_name
    user: $2
current-context: $node_name
EOF
	chmod 600 "$dir/$1.kubeconfig"
}

make_pki() {
	local pki="$dir/pki"
	mkdir -p "$pki"
	chmod 700 "$pki"
	openssl_key "$pki/ca.key"
	openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=warden-local-cluster-ca" -days 3650 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
		-out "$pki/ca.crt" 2>/dev/null
	cert apiserver "/CN=kube-apiserver" serverAuth \
		"IP:$node_ip,IP:$api_service_ip,IP:127.0.0.1,DNS:$node_name,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$cluster_domain"
	cert apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client/O=system:masters" clientAuth
	cert kubelet-serving "/CN=$node_name" serverAuth "IP:$node_ip,DNS:$node_name"
	cert admin "/CN=kubernetes-admin/O=system:masters" clientAuth
	cert controller-manager "/CN=system:kube-controller-manager" clientAuth
	cert scheduler "/CN=system:kube-scheduler" clientAuth
	cert kubelet "/CN=system:node:$node_name/O=system:nodes" clientAuth
	cert kube-proxy "/CN=system:kube-proxy" clientAuth
	cert coredns "/CN=warden-local-cluster:coredns" clientAuth
	openssl_key "$pki/sa.key"
	openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
	kubeconfig admin admin
	kubeconfig controller-manager controller-manager
	kubeconfig scheduler scheduler
	kubeconfig kubelet kubelet
	kubeconfig kube-proxy kube-proxy
	kubeconfig coredns coredns
}

# ---------------------------------------------------------------- configs

write_configs() {
	mkdir -p "$dir/cni/net.d" "$dir/cni/ipam" "$dir/kubelet" "$dir/pod-logs" "$run/containerd"
	cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd"
state = "$run/containerd"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "$run/containerd/containerd.sock"

[ttrpc]
  address = "$run/containerd/containerd.sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # Root here lacks CAP_SYS_RESOURCE: without this every sandbox fails
  # with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  stream_server_address = "$node_ip"
  stream_server_port = "0"
  enable_selinux = false
  # The pods' network namespaces live under the state directory, not in
  # /var/run/netns, so that down finds exactly the cluster's own.
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$run/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$dir/cni/net.d"
EOF
	cat >"$dir/cni/net.d/10-warden-local.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "warden-local",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$pod_cidr", "gateway": "$pod_gateway"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
	# Pods get no name server but the cluster's: nothing resolves a name
	# outside the cluster, nothing leaves the machine.
	: >"$dir/resolv.conf"
	cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $node_ip
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $dir/pki/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $dir/pki/kubelet-serving.crt
tlsPrivateKeyFile: $dir/pki/kubelet-serving.key
containerRuntimeEndpoint: unix://$run/containerd/containerd.sock
# This machine has cgroup v1 (/sys/fs/cgroup is a tmpfs): kubelet 1.36
# refuses it unless told, and systemd is not there to drive cgroups.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
# Root here lacks CAP_SYS_RESOURCE: lowering an OOM score would fail.
oomScoreAdj: 0
clusterDNS: [$cluster_dns]
clusterDomain: $cluster_domain
resolvConf: $dir/resolv.conf
podLogsDir: $dir/pod-logs
# Imported images are the only ones there are: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  nodefs.inodesFree: 2%
  imagefs.available: 2%
rotateCertificates: false
serverTLSBootstrap: false
EOF
	cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $dir/kube-proxy.kubeconfig
hostnameOverride: $node_name
mode: iptables
clusterCIDR: $pod_cidr
healthzBindAddress: $node_ip:10256
metricsBindAddress: $node_ip:10249
nodePortAddresses: ["$node_ip/32"]
oomScoreAdj: 0
iptables:
  # Service traffic leaves with the bridge's address, so replies come back
  # through the host's conntrack even between pods on the bridge.
  masqueradeAll: true
  # NodePorts on 127.0.0.1 would need route_localnet=1.
  localhostNodePorts: false
# Zero: kube-proxy changes no kernel setting.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
EOF
	cat >"$dir/Corefile" <<EOF
$cluster_domain:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $node_ip
    errors
    ready $node_ip:8181
    kubernetes $cluster_domain in-addr.arpa ip6.arpa {
        kubeconfig $dir/coredns.kubeconfig
        pods insecure
        ttl 5
    }
    cache 5
    loadbalance
}
.:53 {
    bind $node_ip
    errors
    # No name outside the cluster resolves: the machine has no network.
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOF
	# Storage: no provisioner would give a non-root pod a writable volume
	# (the controller manager's hostPath provisioner makes root-owned 0750
	# directories), so up makes a pool of hostPath volumes of a default
	# StorageClass: world-writable directories under volumes/, deleted by
	# down. A claim takes a free one; a released one is not reused.
	mkdir -p "$dir/volumes"
	: >"$dir/volumes.yaml"
	cat >>"$dir/volumes.yaml" <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: warden-local
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
reclaimPolicy: Retain
volumeBindingMode: Immediate
EOF
	local i
	for ((i = 1; i <= volumes; i++)); do
		mkdir -m 1777 "$dir/volumes/pv-$i"
		cat >>"$dir/volumes.yaml" <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: warden-local-pv-$i
spec:
  storageClassName: warden-local
  capacity: {storage: ${volume_size}}
  accessModes: [ReadWriteOnce, ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $dir/volumes/pv-$i, type: Directory}
EOF
	done
	cat >"$dir/coredns-rbac.yaml" <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: warden-local-cluster:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: warden-local-cluster:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: warden-local-cluster:coredns
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: warden-local-cluster:coredns
EOF
}

# ---------------------------------------------------------------- images

build_images() {
	mkdir -p "$dir/images"
	"$helper_bin/ociimage" -binary "$helper_bin/pause" -name "$pause_image" -user 65535:65535 -out "$dir/images/pause.tar"
	"$helper_bin/ociimage" -binary "$helper_bin/probe" -name "$probe_image" -cmd serve -out "$dir/images/probe.tar"
}

# import_archive FILE|-: imports a docker-save or OCI tarball into the k8s.io
# namespace under the names it carries (io.containerd.image.name or
# RepoTags), and prints those names.
import_archive() {
	local out
	out="$(ctr_ images import "$1")" || {
		printf '%s\n' "$out" >&2
		return 1
	}
	sed -n 's/^unpacking \([^ ]*\) (sha256:.*/\1/p' <<<"$out"
}

# ---------------------------------------------------------------- checks

preflight() {
	local c
	for c in cpu cpuacct cpuset memory pids devices freezer; do
		[[ -d /sys/fs/cgroup/$c || -f /sys/fs/cgroup/cgroup.controllers ]] || die "the cgroup controller $c is not mounted under /sys/fs/cgroup"
	done
	[[ ! -e /sys/class/net/$bridge ]] || die "the bridge $bridge exists: a cluster is there, or a down was interrupted; run $0 down"
	ip -4 -o addr show | grep -q " $node_ip/" && die "$node_ip is already on an interface: a cluster is up, or a down was interrupted; run $0 down"
	# The node's address and both ranges must not meet any address or route
	# of the host, nor its name servers.
	local mine cidr
	for mine in "$node_ip/32" "$pod_cidr" "$service_cidr"; do
		for cidr in $(ip -4 -o addr show | awk '{print $4}') $(ip -4 route show | awk '$1 != "default" {print $1}') \
			$(awk '$1 == "nameserver" && $2 ~ /^[0-9.]+$/ {print $2}' /etc/resolv.conf 2>/dev/null); do
			[[ $cidr == */* ]] || cidr="$cidr/32"
			if overlaps "$mine" "$cidr"; then
				die "$mine meets $cidr on this host: set WARDEN_LOCAL_CLUSTER_NODE_IP/POD_CIDR/SERVICE_CIDR (docs/local-cluster.md)"
			fi
		done
	done
	overlaps "$pod_cidr" "$service_cidr" && die "the pod range $pod_cidr and the service range $service_cidr overlap"
	overlaps "$node_ip/32" "$pod_cidr" && die "the node address $node_ip is in the pod range"
	overlaps "$node_ip/32" "$service_cidr" && die "the node address $node_ip is in the service range"
	true
}

dns_answers() {
	[[ "$("$helper_bin/probe" lookup -timeout 2s -server "$node_ip:53" "kubernetes.default.svc.$cluster_domain")" == "$api_service_ip" ]]
}

node_ready() {
	[[ "$(kubectl get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

# healthy: every daemon runs and the API server answers.
healthy() {
	local name
	for name in "${daemons[@]}"; do
		pid_of "$name" >/dev/null || return 1
	done
	kubectl get --raw /readyz >/dev/null 2>&1
}

# ---------------------------------------------------------------- commands

cmd_build() {
	need_root
	install_packages
	build_all
}

cmd_up() {
	if [[ -f $dir/up ]]; then
		load_env || die "$dir/up exists but $dir/env does not: run $0 down"
		if healthy; then
			log "already up"
			echo "$dir/admin.kubeconfig"
			return 0
		fi
		die "the cluster in $dir is partly up (see $0 status): run $0 down, then up"
	fi
	# A run that failed half-way leaves state: clean it first.
	if [[ -d $dir/pids || -d $run ]]; then
		log "cleaning up what an earlier up left"
		cmd_down_locked || die "something is left behind (above): see docs/local-cluster.md, Troubleshooting"
	fi
	local t0=$SECONDS
	cmd_build
	local t_built=$SECONDS
	preflight
	mkdir -p "$dir/logs" "$dir/pids" "$run"
	record_baseline
	# From here on a failure tears down what was started.
	up_done=false
	trap 'up_failed' EXIT

	ip addr add "$node_ip/32" dev lo
	make_bridge
	guard_rules
	make_pki
	write_configs
	build_images

	start etcd "$bins/etcd" --name "$node_name" --data-dir "$dir/etcd" \
		--listen-client-urls "http://$node_ip:2379" --advertise-client-urls "http://$node_ip:2379" \
		--listen-peer-urls "http://$node_ip:2380" --initial-advertise-peer-urls "http://$node_ip:2380" \
		--initial-cluster "$node_name=http://$node_ip:2380" \
		--unsafe-no-fsync --quota-backend-bytes 2147483648 --log-level warn
	# containerd is the only program here that would reach a registry, for
	# an image that is not imported. Its HTTP client takes the proxy from the
	# environment and leaves the registry's name to the proxy: a pull then
	# fails at once on 127.0.0.1:9, where nothing listens, without looking
	# the registry up or sending a packet off the machine. Registries at the
	# cluster's own addresses are reached directly.
	local direct="$node_ip,$pod_cidr,$service_cidr"
	HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY="$direct" \
		http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 no_proxy="$direct" \
		start containerd containerd --config "$dir/containerd.toml"
	wait_for etcd "$helper_bin/probe" get -timeout 2s "http://$node_ip:2379/health"
	start kube-apiserver "$bins/kube-apiserver" \
		--advertise-address "$node_ip" --bind-address "$node_ip" --secure-port 6443 \
		--etcd-servers "http://$node_ip:2379" \
		--service-cluster-ip-range "$service_cidr" \
		--client-ca-file "$dir/pki/ca.crt" \
		--tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
		--cert-dir "$dir/pki/apiserver" \
		--kubelet-client-certificate "$dir/pki/apiserver-kubelet-client.crt" \
		--kubelet-client-key "$dir/pki/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority "$dir/pki/ca.crt" \
		--kubelet-preferred-address-types InternalIP \
		--service-account-issuer "https://kubernetes.default.svc.$cluster_domain" \
		--service-account-key-file "$dir/pki/sa.pub" \
		--service-account-signing-key-file "$dir/pki/sa.key" \
		--authorization-mode Node,RBAC \
		--enable-admission-plugins NodeRestriction \
		--allow-privileged=true \
		--enable-aggregator-routing=true \
		--profiling=false
	wait_for "containerd" ctr_ version
	import_archive "$dir/images/pause.tar" >/dev/null
	import_archive "$dir/images/probe.tar" >/dev/null
	wait_for "the API server" kubectl get --raw /readyz
	kubectl apply -f "$dir/coredns-rbac.yaml" >&2
	kubectl apply -f "$dir/volumes.yaml" >/dev/null

	start kube-controller-manager "$bins/kube-controller-manager" \
		--kubeconfig "$dir/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
		--authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
		--bind-address "$node_ip" --cert-dir "$dir/pki/controller-manager" \
		--service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
		--cluster-signing-cert-file "$dir/pki/ca.crt" --cluster-signing-key-file "$dir/pki/ca.key" \
		--use-service-account-credentials=true --leader-elect=false \
		--service-cluster-ip-range "$service_cidr" --profiling=false
	start kube-scheduler "$bins/kube-scheduler" \
		--kubeconfig "$dir/scheduler.kubeconfig" \
		--authentication-kubeconfig "$dir/scheduler.kubeconfig" \
		--authorization-kubeconfig "$dir/scheduler.kubeconfig" \
		--bind-address "$node_ip" --cert-dir "$dir/pki/scheduler" --leader-elect=false --profiling=false
	start kubelet "$bins/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
		--hostname-override "$node_name" --node-ip "$node_ip" --root-dir "$dir/kubelet"
	start kube-proxy "$bins/kube-proxy" --config "$dir/kube-proxy.yaml"
	start coredns "$coredns_bin" -conf "$dir/Corefile"

	wait_for "node $node_name Ready" node_ready
	wait_for "kube-proxy" "$helper_bin/probe" get -timeout 2s "http://$node_ip:10256/healthz"
	wait_for "cluster DNS" dns_answers
	wait_for "the default ServiceAccount" kubectl get serviceaccount default -n default
	up_done=true
	trap - EXIT
	touch "$dir/up"
	log "up in $((SECONDS - t0))s ($((SECONDS - t_built))s after building); $(memory_line)"
	log "kubectl: $bins/kubectl; load images: $0 load-images PATH"
	echo "$dir/admin.kubeconfig"
}

up_failed() {
	$up_done && return
	log "up failed; the end of each log in $dir/logs:"
	local f
	for f in "$dir"/logs/*.log; do
		[[ -f $f ]] || continue
		echo "==> $f" >&2
		tail -n 15 "$f" >&2
	done
	if [[ -n ${WARDEN_LOCAL_CLUSTER_KEEP_FAILED:-} ]]; then
		log "WARDEN_LOCAL_CLUSTER_KEEP_FAILED is set: leaving it as it is; run $0 down"
		return
	fi
	log "tearing down"
	cmd_down_locked || true
}

# memory_line sums the resident memory of the daemons, and of the pods'
# processes with their shims.
memory_line() {
	local daemons_kb=0 pods_kb=0 kb pid what
	while read -r pid what; do
		kb="$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" || continue
		case "$what" in
		containerd-shim | "container process"*) pods_kb=$((pods_kb + ${kb:-0})) ;;
		*) daemons_kb=$((daemons_kb + ${kb:-0})) ;;
		esac
	done < <(our_processes || true)
	echo "the cluster's daemons use $((daemons_kb / 1024)) MiB (RSS), the pods and their shims $((pods_kb / 1024)) MiB"
}

cmd_load_images() {
	need_root
	local path="${1:-}"
	[[ -n $path ]] || die "usage: $0 load-images PATH (what go run ./hack/image -out PATH wrote)"
	load_env && [[ -f $dir/up ]] || die "the cluster is not up: run $0 up first"
	pid_of containerd >/dev/null || die "containerd is not running: run $0 down, then up"
	local names
	if [[ -d $path ]]; then
		[[ -f $path/index.json ]] || die "$path is not an OCI image layout (no index.json)"
		log "importing the OCI layout $path"
		names="$(tar -C "$path" -cf - . | import_archive -)" || die "importing $path failed"
	elif [[ -f $path ]]; then
		log "importing the tarball $path"
		names="$(import_archive "$path")" || die "importing $path failed"
	else
		die "$path: no such file or directory"
	fi
	[[ -n $names ]] || die "$path holds no named image (io.containerd.image.name or RepoTags)"
	# What the kubelet sees: the CRI lists the k8s.io namespace.
	local n images absent=0
	images="$(ctr_ images ls -q)"
	for n in $names; do
		if grep -qxF "$n" <<<"$images"; then
			echo "$n"
		else
			log "$n is not in containerd after the import"
			absent=1
		fi
	done
	((absent == 0)) || die "some images were not imported"
	log "imported $(wc -w <<<"$names") images; pods with imagePullPolicy IfNotPresent use them"
}

# drain_pods deletes every pod through the API while the kubelet still
# runs, so that it stops the containers and tears their networks down (CNI
# DEL) as it would on any node; the controllers are stopped first so that
# nothing replaces them.
drain_pods() {
	pid_of kubelet >/dev/null && pid_of kube-apiserver >/dev/null || return 0
	kubectl get --raw /readyz >/dev/null 2>&1 || return 0
	stop_daemon kube-controller-manager
	stop_daemon kube-scheduler
	log "deleting every pod"
	kubectl delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || true
	local start=$SECONDS
	while ((SECONDS - start < 60)); do
		if [[ -z "$(kubectl get pods -A -o name 2>/dev/null)" ]] &&
			! ctr_ tasks ls 2>/dev/null | grep -q RUNNING &&
			! our_mounts | grep -q "^$run/containerd/netns/"; then
			log "pods gone after $((SECONDS - start))s"
			return 0
		fi
		sleep 0.5
	done
	log "pods still there after 60s; removing them by force"
}

cmd_down() {
	need_root
	mkdir -p "${lock_file%/*}"
	exec 9>"$lock_file"
	flock 9
	cmd_down_locked
}

cmd_down_locked() {
	local t0=$SECONDS
	load_env || true
	[[ -n $bins ]] && drain_pods
	local i name pid
	for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do
		name="${daemons[i]}"
		[[ $name == containerd ]] && continue
		stop_daemon "$name"
	done
	if pid_of containerd >/dev/null; then
		local id
		for id in $(ctr_ tasks ls -q 2>/dev/null); do
			ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		sleep 0.5
		for id in $(ctr_ tasks ls -q 2>/dev/null); do
			ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
		done
		stop_daemon containerd
	fi
	# Whatever survived: shims of this containerd, processes in the kubelet's
	# cgroups.
	local what
	while read -r pid what; do
		log "killing leftover $what (PID $pid)"
		kill -KILL "$pid" 2>/dev/null || true
	done < <(our_processes || true)
	for ((i = 0; i < 50; i++)); do
		[[ -z "$(our_processes)" ]] && break
		sleep 0.1
	done
	local m
	while IFS= read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
	done < <(our_mounts || true)
	if [[ -e /sys/class/net/$bridge ]]; then
		local l
		for l in "/sys/class/net/$bridge/brif/"*; do
			[[ -e $l ]] && ip link del "${l##*/}" 2>/dev/null
		done
		ip link del "$bridge" 2>/dev/null || log "could not delete $bridge"
	fi
	clean_iptables
	remove_new_tables
	local c
	while IFS= read -r c; do
		rmdir "$c" 2>/dev/null || log "could not remove the cgroup $c"
	done < <(our_cgroups || true)
	ip addr del "$node_ip/32" dev lo 2>/dev/null || true
	restore_sysctls
	restore_host_paths
	local ok=0
	check_clean || ok=1
	rm -rf "$dir" "$run"
	if ((ok == 0)); then
		log "down in $((SECONDS - t0))s; nothing left behind"
	else
		log "down in $((SECONDS - t0))s, but something is left behind (above)"
	fi
	return $ok
}

# check_clean reports what a cluster left on the host; with the baseline of
# up still there, it also compares the kernel settings and iptables rules.
check_clean() {
	local bad=0 out
	out="$(our_processes)"
	[[ -z $out ]] || {
		log "processes left: $out"
		bad=1
	}
	out="$(our_mounts)"
	[[ -z $out ]] || {
		log "mounts left: $out"
		bad=1
	}
	out="$(grep -E 'kubepods|containerd|warden-local' /proc/self/mountinfo | awk '{print $5}')" || true
	[[ -z $out ]] || {
		log "mounts left: $out"
		bad=1
	}
	[[ ! -e /sys/class/net/$bridge ]] || {
		log "link left: $bridge"
		bad=1
	}
	# The bridge plugin names the host's end of a pod's link veth<8 hex>.
	out="$(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^veth[0-9a-f]{8}(@|$)')" || true
	[[ -z $out ]] || {
		log "veth links left: $out"
		bad=1
	}
	out="$(ip -4 -o addr show | grep " $node_ip/")" || true
	[[ -z $out ]] || {
		log "address left: $out"
		bad=1
	}
	out="$(ip netns list 2>/dev/null | grep '^cni-')" || true
	[[ -z $out ]] || {
		log "network namespaces left: $out"
		bad=1
	}
	out="$(our_cgroups)"
	[[ -z $out ]] || {
		log "cgroups left: $out"
		bad=1
	}
	local save
	for save in iptables-save ip6tables-save iptables-legacy-save ip6tables-legacy-save; do
		command -v "$save" >/dev/null || continue
		out="$("$save" 2>/dev/null | grep -E '^:(KUBE-|CNI-|WARDEN-LOCAL-CLUSTER)|-j (KUBE-|CNI-|WARDEN-LOCAL-CLUSTER)')" || true
		[[ -z $out ]] || {
			log "$save: rules left: $out"
			bad=1
		}
	done
	if [[ -f $dir/baseline/iptables ]]; then
		out="$(diff <(cat "$dir/baseline/iptables") <(iptables_rules))" || {
			log "iptables differ from before up: $out"
			bad=1
		}
	fi
	if [[ -f $dir/baseline/host-paths ]]; then
		local h e
		for h in "${host_paths[@]}"; do
			[[ -e $h ]] || continue
			if ! grep -qxF "$h" "$dir/baseline/host-paths"; then
				log "left behind: $h"
				bad=1
				continue
			fi
			while IFS= read -r e; do
				grep -qxF "$e" "$dir/baseline/host-path-entries-${h//\//_}" || {
					log "left behind: $e"
					bad=1
				}
			done < <(find "$h" -xdev -mindepth 1 2>/dev/null || true)
		done
	fi
	if [[ -f $dir/baseline/sysctl ]]; then
		local line k v cur
		while IFS= read -r line; do
			k="${line%%=*}"
			v="${line#*=}"
			cur="$(tr '\t' ' ' <"$(sysctl_path "$k")" 2>/dev/null)" || continue
			[[ $cur == "$v" ]] || {
				log "kernel setting $k is $cur, was $v before up"
				bad=1
			}
		done <"$dir/baseline/sysctl"
	fi
	return $bad
}

cmd_check_clean() {
	need_root
	if check_clean; then
		log "nothing of a local cluster is left on this host"
	else
		return 1
	fi
}

cmd_status() {
	if ! load_env || [[ ! -f $dir/up && ! -d $dir/pids ]]; then
		log "down"
		return 1
	fi
	local name pid kb state=0
	for name in "${daemons[@]}"; do
		if pid="$(pid_of "$name")"; then
			kb="$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")"
			printf '%-24s PID %-8s %5s MiB\n' "$name" "$pid" "$((kb / 1024))" >&2
		else
			printf '%-24s not running\n' "$name" >&2
			state=1
		fi
	done
	log "$(memory_line)"
	if kubectl get --raw /readyz >/dev/null 2>&1; then
		kubectl get nodes -o wide >&2 || true
	else
		log "the API server does not answer"
		state=1
	fi
	echo "$dir/admin.kubeconfig"
	return $state
}

# recycle_volumes makes the volumes of the pool that a deleted claim
# released available again, emptied.
recycle_volumes() {
	local name path n=0
	while read -r name path; do
		[[ $name == warden-local-pv-* && $path == "$dir/volumes/"* && -d $path ]] || continue
		find "$path" -mindepth 1 -delete
		kubectl patch pv "$name" --type json -p '[{"op": "remove", "path": "/spec/claimRef"}]' >/dev/null
		n=$((n + 1))
	done < <(kubectl get pv -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name}{" "}{.spec.hostPath.path}{"\n"}{end}' || true)
	log "recycled $n released volumes"
}

cmd_recycle_volumes() {
	load_env && [[ -f $dir/up ]] || die "the cluster is not up"
	recycle_volumes
}

# cmd_smoke checks, in a namespace of its own that it deletes, that pods
# start from the imported images, that a Service reaches them by ClusterIP
# from the host and by DNS name from another pod, that the pods resolve
# nothing outside the cluster, and that the pause image runs.
cmd_smoke() {
	load_env && [[ -f $dir/up ]] || die "the cluster is not up"
	local ns="warden-local-smoke-$$" start=$SECONDS
	log "smoke test in namespace $ns"
	kubectl create namespace "$ns" >/dev/null
	kubectl apply -n "$ns" -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: pause
spec:
  containers:
  - name: pause
    image: $pause_image
    imagePullPolicy: IfNotPresent
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: echo
spec:
  replicas: 2
  selector:
    matchLabels: {app: echo}
  template:
    metadata:
      labels: {app: echo}
    spec:
      securityContext:
        runAsNonRoot: true
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: probe
        image: $probe_image
        imagePullPolicy: IfNotPresent
        args: [serve]
        ports: [{containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /, port: 8080}
          periodSeconds: 1
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts: [{name: shared, mountPath: /shared}]
      volumes:
      - name: shared
        persistentVolumeClaim: {claimName: shared}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: shared
spec:
  accessModes: [ReadWriteMany]
  resources:
    requests: {storage: 1Gi}
---
apiVersion: v1
kind: Service
metadata:
  name: echo
spec:
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  containers:
  - name: probe
    image: $probe_image
    imagePullPolicy: IfNotPresent
    args: [sleep]
EOF
	local ok=true ip out
	wait_for "the smoke test's Deployment" kubectl rollout status -n "$ns" deployment/echo --timeout=5s || ok=false
	wait_for "the smoke test's pods Ready" kubectl wait -n "$ns" --for=condition=Ready pod --all --timeout=5s || ok=false
	ip="$(kubectl get -n "$ns" service echo -o jsonpath='{.spec.clusterIP}')"
	if $ok && out="$("$helper_bin/probe" get -timeout 20s "http://$ip/")"; then
		log "host -> ClusterIP $ip: answered by $out"
	else
		log "host -> ClusterIP $ip: no answer"
		ok=false
	fi
	# The API server's service proxy picks an endpoint of the Service, as it
	# does for a webhook with --enable-aggregator-routing.
	if $ok && out="$(kubectl get --raw "/api/v1/namespaces/$ns/services/http:echo:80/proxy/")"; then
		log "API server -> Service echo's endpoints: answered by $out"
	else
		log "API server -> Service echo's endpoints: no answer"
		ok=false
	fi
	if $ok && out="$(kubectl exec -n "$ns" client -- /probe get -timeout 20s "http://echo.$ns.svc.$cluster_domain/")"; then
		log "pod -> echo.$ns.svc.$cluster_domain: answered by $out"
	else
		log "pod -> echo.$ns.svc.$cluster_domain: no answer"
		ok=false
	fi
	if $ok && out="$(kubectl exec -n "$ns" client -- /probe get -timeout 20s "http://echo/")"; then
		log "pod -> echo (search path): answered by $out"
	else
		log "pod -> echo (search path): no answer"
		ok=false
	fi
	local pods
	read -r -a pods <<<"$(kubectl get pods -n "$ns" -l app=echo -o jsonpath='{.items[*].metadata.name}')"
	if $ok && kubectl exec -n "$ns" "${pods[0]}" -- /probe write /shared/smoke "from ${pods[0]}" &&
		out="$(kubectl exec -n "$ns" "${pods[1]}" -- /probe cat /shared/smoke)" && [[ $out == "from ${pods[0]}" ]]; then
		log "a ReadWriteMany claim of the default StorageClass, shared by two non-root pods: ${pods[1]} read what ${pods[0]} wrote"
	elif $ok; then
		log "the shared claim: ${pods[1]} did not read what ${pods[0]} wrote"
		ok=false
	fi
	if $ok && out="$(kubectl exec -n "$ns" client -- /probe lookup -timeout 2s example.com 2>&1)"; then
		log "pod resolved example.com: $out"
		ok=false
	elif $ok; then
		log "pod -> example.com: does not resolve, as it should not"
	fi
	if ! $ok; then
		kubectl get -n "$ns" pods,endpoints,pvc,events -o wide >&2 || true
	fi
	# The claim goes first, so that its volume is released and recycled;
	# the namespace then goes in the background.
	kubectl delete -n "$ns" deployment,pod,pvc --all --grace-period=1 --timeout=60s >/dev/null ||
		log "the smoke test's pods and claim are not gone after 60s"
	recycle_volumes
	kubectl delete namespace "$ns" --wait=false >/dev/null
	$ok || die "smoke test failed after $((SECONDS - start))s"
	log "smoke test passed in $((SECONDS - start))s"
}

cmd_env() {
	load_env && [[ -f $dir/up ]] || die "the cluster is not up"
	printf 'export KUBECONFIG=%q\n' "$dir/admin.kubeconfig"
	printf 'export KUBECACHEDIR=%q\n' "$dir/kube-cache"
	# shellcheck disable=SC2016 # $PATH is for the shell that evals this
	printf 'export PATH=%q:"$PATH"\n' "$bins"
	printf 'export WARDEN_LOCAL_CLUSTER_PROBE_IMAGE=%q\n' "$probe_image"
	printf 'export WARDEN_LOCAL_CLUSTER_PAUSE_IMAGE=%q\n' "$pause_image"
}

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	exit 2
}

case "${1:-}" in
build) cmd_build ;;
up)
	need_root
	mkdir -p "${lock_file%/*}"
	exec 9>"$lock_file"
	flock 9
	cmd_up
	;;
down) cmd_down ;;
load-images)
	shift
	cmd_load_images "$@"
	;;
status) cmd_status ;;
env) cmd_env ;;
kubectl)
	shift
	load_env || die "the cluster is not up"
	kubectl "$@"
	;;
check-clean) cmd_check_clean ;;
smoke) cmd_smoke ;;
recycle-volumes) cmd_recycle_volumes ;;
*) usage ;;
esac
