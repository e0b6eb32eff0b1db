#!/usr/bin/env bash
# Measures whether the memory of a large module comes back when the module
# is removed (issue 31, deliverable 5; docs/benchmarks.md, "Hostile bounds").
#
# It starts policy-server with one small policy (labels), then CYCLES times
# adds a policy "big" to its policies.yml (hot reload), waits until GET
# /policies shows it active, removes it, waits until it is gone, waits
# SETTLE seconds and records the server's VmRSS (/proc/<pid>/status). The
# large module is hack/bigpolicy (a 30 MB Go policy with cel-go and
# k8s.io/api) padded with a custom section to PAD_MB more megabytes, so that
# the file is about the size of the issue's (250 MB): the padding costs the
# host its read, digest and rewriting, the code the compilation.
#
#   hack/module-cycles.sh                 # 20 cycles, 220 MB of padding
#   CYCLES=3 PAD_MB=0 hack/module-cycles.sh
#
# Environment: CYCLES (20), PAD_MB (220), SETTLE seconds after a removal
# (3), CACHE=0 to compile every load (no --cache-dir; by default a cache
# directory of its own, so that the loads after the first read the code
# from it), PORT and READINESS_PORT on 127.0.0.1 (39321, 39322). Needs Go
# and curl; everything stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

cycles=${CYCLES:-20}
pad_mb=${PAD_MB:-220}
settle=${SETTLE:-3}
port=${PORT:-39321}
readiness_port=${READINESS_PORT:-39322}
work=$(mktemp -d)
server=
cleanup() {
  if [[ -n $server ]]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building (in $work)"
go build -o "$work/policy-server.linked" ./cmd/policy-server
# A copy written with write(2), as hack/bench.sh runs: run from the file the
# linker wrote, the binary's read-only data is mapped in large folios and
# its resident part varies by 10 MB from one start to the next.
cp "$work/policy-server.linked" "$work/policy-server"
labels=$(go run ./hack/buildpolicy testdata/policies/labels)
bigpolicy=$(go run ./hack/buildpolicy hack/bigpolicy)

# leb128 writes its argument as an unsigned LEB128 number.
leb128() {
  local v=$1 b
  while :; do
    b=$((v & 0x7f)); v=$((v >> 7))
    ((v)) && b=$((b | 0x80))
    printf "\\x$(printf %02x "$b")"
    ((v)) || break
  done
}
big=$work/big.wasm
cp "$bigpolicy" "$big"
if ((pad_mb > 0)); then
  name=warden.padding
  size=$((pad_mb * 1000 * 1000))
  { printf '\x00'; leb128 $((1 + ${#name} + size)); leb128 ${#name}; printf %s "$name"; head -c "$size" /dev/zero; } >>"$big"
fi
echo "module: $(stat -c %s "$big") bytes"

small=$(printf 'labels:\n  module: file://%s\n  settings: {denied_labels: [forbidden]}\n' "$labels")
printf '%s\n' "$small" >"$work/policies.yml"
flags=(--addr 127.0.0.1 --port "$port" --readiness-probe-port "$readiness_port"
  --policies "$work/policies.yml" --log-level warn)
if [[ ${CACHE:-1} == 0 ]]; then flags+=(--cache-dir ''); else flags+=(--cache-dir "$work/cache"); fi
"$work/policy-server" "${flags[@]}" &
server=$!

policies() { curl -fsS "http://127.0.0.1:$readiness_port/policies" 2>/dev/null || true; }
wait_until() { # description, command...
  local what=$1; shift
  for _ in $(seq 1 3000); do
    "$@" && return 0
    sleep 0.1
  done
  echo "timed out waiting: $what" >&2
  exit 1
}
big_active() { policies | tr -d ' \n' | grep -q '"id":"big","state":"active"'; }
big_gone() { ! policies | grep -q '"id":"big"'; }
labels_active() { policies | tr -d ' \n' | grep -q '"id":"labels","state":"active"'; }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$server/status"; }
# write replaces the policies file at once, as an editor's rename does.
write() { printf '%s\n' "$1" >"$work/next.yml"; mv "$work/next.yml" "$work/policies.yml"; }

wait_until "the server's start" labels_active
sleep "$settle"
start=$(rss)
echo "start: $start KiB (load: $(cut -d' ' -f1-3 /proc/loadavg))"
for i in $(seq 1 "$cycles"); do
  write "$small
big:
  module: file://$big"
  t0=$(date +%s.%N)
  wait_until "big loaded, cycle $i" big_active
  t1=$(date +%s.%N)
  loaded=$(rss)
  write "$small"
  wait_until "big removed, cycle $i" big_gone
  sleep "$settle"
  removed=$(rss)
  awk -v i="$i" -v l="$loaded" -v r="$removed" -v s="$start" -v t="$(echo "$t1 - $t0" | bc)" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
    'BEGIN { printf "cycle %2d: loaded in %5.1f s, %8d KiB with big; %8d KiB after its removal (%+.1f%% of the start), load %s\n", i, t, l, r, (r - s) * 100 / s, load }'
done
echo "peak: $(awk '/^VmHWM/ {print $2}' "/proc/$server/status") KiB (VmHWM)"
