#!/usr/bin/env bash
# The hostile-load probe of issue 16 (docs/benchmarks.md, "Isolation under
# hostile load"). It starts one policy server with a policy that behaves
# (labels) and hostile ones: loop and wasi-loop (never return: only their
# 2 s time limit ends them), oom (grows its memory until the cap), trap and
# garbage (a non-JSON answer). It measures the good policy alone (throughput
# with 20 clients, p99 at a fixed 500 req/s), then the same while the load
# tool drives the two looping policies, then while it drives every hostile
# policy at once, and prints the good policy's figures, the server's peak
# RSS and the size of /metrics. Everything runs on 127.0.0.1 and stops by
# itself (about two minutes).
#
#   hack/chaos.sh
#
# Environment: DURATION of each measurement (10s); CHAOS_CLIENTS, the
# clients of each hostile policy (8); CHAOS_PORT and CHAOS_READINESS_PORT
# (3200, 8281) when those are taken.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${DURATION:-10s}
hostile_clients=${CHAOS_CLIENTS:-8}
port=${CHAOS_PORT:-3200}
readiness_port=${CHAOS_READINESS_PORT:-8281}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building (binaries in $work)"
go build -o "$work/policy-server" ./cmd/policy-server
go build -o "$work/loadtest" ./hack/loadtest
for p in labels loop wasi-counter oom trap garbage; do
  go run ./hack/buildpolicy "testdata/policies/$p" > "$work/$p.path"
done
module() { echo "file://$(cat "$work/$1.path")"; }
review=hack/loadtest/testdata/pod-review.json

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=localhost -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
  -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null

cat > "$work/policies.yml" <<YAML
good:
  module: $(module labels)
  settings: {denied_labels: [forbidden]}
loop:
  module: $(module loop)
wasi-loop:
  module: $(module wasi-counter)
  settings: {loop: true}
oom:
  module: $(module oom)
trap:
  module: $(module trap)
garbage:
  module: $(module garbage)
YAML

"$work/policy-server" --addr 127.0.0.1 --port "$port" --readiness-probe-port "$readiness_port" \
  --cert-file "$work/tls.crt" --key-file "$work/tls.key" --policies "$work/policies.yml" \
  --log-level error &
server=$!
pids+=("$server")
for _ in $(seq 1 600); do
  curl -fsS -o /dev/null "http://127.0.0.1:$readiness_port/readiness" 2>/dev/null && break
  sleep 0.1
done

# rss_kib is the server's peak resident set so far (VmHWM).
rss_kib() { awk '/^VmHWM/ {print $2}' "/proc/$server/status"; }

# measure runs the good policy's two loads; a failed request (the load
# tool then exits 1) is counted, not fatal.
declare -A rps p99 errs
measure() { # phase
  echo "-- good policy, 20 clients, $1"
  "$work/loadtest" -url "https://127.0.0.1:$port/validate/good" -body "$review" -cacert "$work/tls.crt" \
    -d "$duration" -c 20 -expect-body-contains '"allowed":true' > "$work/out" || true
  cat "$work/out"
  rps[$1]=$(awk '/^throughput/ {print $2}' "$work/out")
  errs[$1]=$(awk '/^errors/ {print $2}' "$work/out")
  echo "-- good policy, 500 req/s, $1"
  "$work/loadtest" -url "https://127.0.0.1:$port/validate/good" -body "$review" -cacert "$work/tls.crt" \
    -d "$duration" -rate 500 -expect-body-contains '"allowed":true' > "$work/out" || true
  cat "$work/out"
  p99[$1]=$(awk '/^latency/ {for (i = 1; i < NF; i++) if ($i == "p99") print $(i + 1)}' "$work/out")
  errs[$1]=$(( ${errs[$1]} + $(awk '/^errors/ {print $2}' "$work/out") ))
}

attack() { # phase, hostile policies...
  local phase=$1; shift
  echo "== $phase: $hostile_clients clients on each of $*"
  local hostile=()
  for p in "$@"; do
    # Their answers are rejections and errors by design: only the good
    # policy's results matter.
    "$work/loadtest" -url "https://127.0.0.1:$port/validate/$p" -body "$review" -cacert "$work/tls.crt" \
      -d 1h -warmup 0s -c "$hostile_clients" -timeout 30s > "$work/$p.out" 2>&1 &
    hostile+=($!)
    pids+=($!)
  done
  sleep 3 # the loops fill their turns and queues
  measure "$phase"
  for h in "${hostile[@]}"; do kill -INT "$h" 2>/dev/null || true; done
  for h in "${hostile[@]}"; do wait "$h" 2>/dev/null || true; done
  sleep 3 # the last loops run out their time
}

echo "== alone"
measure alone
attack "loops" loop wasi-loop
attack "every hostile policy" loop wasi-loop oom trap garbage

metrics=$(curl -fsS "http://127.0.0.1:$readiness_port/metrics" | wc -c)
echo "== summary (good policy)"
for phase in alone loops "every hostile policy"; do
  awk -v ph="$phase" -v r="${rps[$phase]}" -v a="${rps[alone]}" -v l="${p99[$phase]}" -v e="${errs[$phase]}" 'BEGIN {
    printf "%-22s %8.0f req/s (%3.0f%% of alone) with 20 clients; p99 %s at 500 req/s; %d failed\n", ph, r, 100 * r / a, l, e
  }'
done
echo "peak RSS: $(( $(rss_kib) / 1024 )) MiB"
echo "/metrics: $metrics bytes"
