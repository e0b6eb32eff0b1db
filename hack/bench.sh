#!/usr/bin/env bash
# Reproduces the load-test and startup figures of docs/benchmarks.md.
# Everything runs on 127.0.0.1 and stops by itself. Needs Go and openssl.
#
#   hack/bench.sh            # all sections
#   hack/bench.sh load       # floor + waPC + WASI + CEL + group load tests only
#   hack/bench.sh startup    # startup time and idle RSS with 20 policies
#   hack/bench.sh reload     # hot reload: latency, load during reloads, RSS
#
# Environment: DURATION of each load (10s); the ports on 127.0.0.1, for when
# the defaults are taken: BENCH_PORT (3000, the policy server's webhook),
# BENCH_READINESS_PORT (8081, its readiness probe) and BENCH_FLOOR_PORT (3100,
# the floor server), e.g. BENCH_PORT=3443 BENCH_READINESS_PORT=8082 hack/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-all}
duration=${DURATION:-10s}
port=${BENCH_PORT:-3000}
readiness_port=${BENCH_READINESS_PORT:-8081}
floor_port=${BENCH_FLOOR_PORT:-3100}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building (binaries in $work)"
go build -o "$work/policy-server.linked" ./cmd/policy-server
# The server runs a copy of the binary, written with write(2) as an image's
# layer is unpacked. The linker writes its output through a mapping, which
# leaves the file in the page cache as large folios, and a fault maps the
# whole folio: the same server then idles about 12 MB larger
# (docs/benchmarks.md, "Startup and idle memory").
cp "$work/policy-server.linked" "$work/policy-server"
go build -o "$work/loadtest" ./hack/loadtest
go build -o "$work/floorserver" ./hack/floorserver
go build -o "$work/reloadbench" ./hack/reloadbench
labels=$(go run ./hack/buildpolicy testdata/policies/labels)
wasilog=$(go run ./hack/buildpolicy testdata/policies/wasi-log)
review=hack/loadtest/testdata/pod-review.json

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=localhost -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
  -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null

wait_ready() { # url
  for _ in $(seq 1 600); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "not ready: $1" >&2
  return 1
}

start_server() { # policies.yml, extra flags...
  local policies=$1; shift
  "$work/policy-server" --addr 127.0.0.1 --port "$port" --readiness-probe-port "$readiness_port" \
    --cert-file "$work/tls.crt" --key-file "$work/tls.key" --policies "$policies" \
    --log-level warn "$@" &
  server=$!
  pids+=("$server")
  wait_ready "http://127.0.0.1:$readiness_port/readiness"
}

stop_server() {
  kill "$server"
  wait "$server" 2>/dev/null || true
}

start_floor() {
  "$work/floorserver" -addr "127.0.0.1:$floor_port" -cert-file "$work/tls.crt" -key-file "$work/tls.key" &
  floor=$!; pids+=("$floor")
  sleep 0.5
}

stop_floor() {
  kill "$floor"; wait "$floor" 2>/dev/null || true
}

load() { # label url extra-loadtest-flags...
  local label=$1 url=$2; shift 2
  echo "-- $label"
  "$work/loadtest" -url "$url" -body "$review" -cacert "$work/tls.crt" -d "$duration" \
    -expect-body-contains '"allowed":true' "$@" | tee "$work/out"
  # Keep the closed-loop throughputs for the summary.
  if [[ $label == *"20 clients" ]]; then
    rps[${label%, 20 clients}]=$(awk '/^throughput/ {print $2}' "$work/out")
  fi
}

declare -A rps

# summary prints each target's share of the floor measured before it and of
# the floor measured after it.
summary() {
  echo "== share of the floor (20 clients)"
  local t
  for t in waPC WASI CEL group; do
    [[ -n ${rps[$t]:-} ]] || continue
    awk -v t="$t" -v r="${rps[$t]}" -v f1="${rps[floor]}" -v f2="${rps["floor again"]:-0}" 'BEGIN {
      printf "%-6s %9.1f req/s  %5.1f%% of the floor before", t, r, 100 * r / f1
      if (f2 > 0) printf ", %5.1f%% of the floor after", 100 * r / f2
      printf "\n"
    }'
  done
}

if [[ $what == all || $what == load ]]; then
  echo "== floor: trivial Go HTTPS webhook (decode and allow)"
  start_floor
  load "floor, 20 clients" "https://127.0.0.1:$floor_port/validate/x" -c 20
  load "floor, 1000 req/s" "https://127.0.0.1:$floor_port/validate/x" -rate 1000
  stop_floor

  printf 'labels:\n  module: file://%s\n  settings: {denied_labels: [forbidden]}\nwasi-log:\n  module: file://%s\n' \
    "$labels" "$wasilog" > "$work/policies.yml"
  cat >> "$work/policies.yml" <<'YAML'
cel:
  module: builtin://cel
  settings:
    validations:
      - expression: "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)"
        message: "privileged containers are not allowed"
      - expression: "has(object.metadata.labels) && 'app' in object.metadata.labels"
        message: "pods need an app label"
      - expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"
        message: "images must not use the latest tag"
group:
  expression: "cel_a() && cel_b() && cel_c()"
  message: "rejected by the group"
  policies:
    cel_a: {module: builtin://cel, settings: {validations: [{expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"}]}}
    cel_b: {module: builtin://cel, settings: {validations: [{expression: "has(object.metadata.labels)"}]}}
    cel_c: {module: builtin://cel, settings: {validations: [{expression: "object.spec.containers.size() < 10"}]}}
YAML
  start_server "$work/policies.yml"
  echo "== Warden: waPC policy (labels), a snapshot-isolated instance per request"
  load "waPC, 20 clients" "https://127.0.0.1:$port/validate/labels" -c 20
  load "waPC, 1000 req/s" "https://127.0.0.1:$port/validate/labels" -rate 1000
  echo "== Warden: WASI policy (wasi-log, Go wasip1 command, snapshot-restored)"
  load "WASI, 20 clients" "https://127.0.0.1:$port/validate/wasi-log" -c 20
  load "WASI, 1000 req/s" "https://127.0.0.1:$port/validate/wasi-log" -rate 1000
  echo "== Warden: native CEL policy (3 validations)"
  load "CEL, 20 clients" "https://127.0.0.1:$port/validate/cel" -c 20
  load "CEL, 1000 req/s" "https://127.0.0.1:$port/validate/cel" -rate 1000
  echo "== Warden: policy group of 3 native CEL members"
  load "group, 20 clients" "https://127.0.0.1:$port/validate/group" -c 20
  stop_server
  # The machine is shared: measuring the floor again shows how far it moved
  # during the run. Compare each target with the higher of the two.
  echo "== floor again, after the Warden runs"
  start_floor
  load "floor again, 20 clients" "https://127.0.0.1:$floor_port/validate/x" -c 20
  stop_floor
  summary
fi

startup() { # label policies.yml
  for run in cold cached; do
    start=$(date +%s.%N)
    start_server "$2" --cache-dir "$work/cache-$1"
    end=$(date +%s.%N)
    sleep 2
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$server/status")
    printf -- '-- %s, %s start: %.2f s to ready, idle RSS %d MiB\n' "$1" "$run" "$(echo "$end - $start" | bc)" $((rss / 1024))
    stop_server
  done
}

if [[ $what == all || $what == startup ]]; then
  echo "== startup with 20 policies"
  # A mix: 20 policies over 8 distinct Go modules (2-4 MB each), as a cluster
  # runs the same module with different settings.
  : > "$work/mix.yml"
  n=0
  for spec in labels:4 mutate-labels:3 raw:2 counter:1 wasi-log:3 \
              ../../examples/policies/pod-privileged:3 ../../examples/policies/default-team-label:2 \
              ../../examples/policies/deny-latest-tag:2; do
    name=${spec%%:*}; count=${spec##*:}
    mod=$(go run ./hack/buildpolicy "testdata/policies/$name")
    for i in $(seq 1 "$count"); do
      n=$((n + 1))
      printf 'p%d:\n  module: file://%s\n  settings: {}\n' "$n" "$mod" >> "$work/mix.yml"
    done
  done
  startup "mix of 8 modules" "$work/mix.yml"

  # The worst case: 20 distinct 3.4 MB Go modules.
  go run ./hack/buildpolicy -copies 20 -o "$work/mods" testdata/policies/labels >/dev/null
  : > "$work/p20.yml"
  for i in $(seq 1 20); do
    printf 'p%d:\n  module: file://%s/labels-%d.wasm\n  settings: {denied_labels: [forbidden]}\n' "$i" "$work/mods" "$i" >> "$work/p20.yml"
  done
  startup "20 distinct modules" "$work/p20.yml"
fi

if [[ $what == all || $what == reload ]]; then
  echo "== hot reload of policy p (labels, waPC), the server watching its file"
  go run ./hack/buildpolicy -copies 2 -o "$work/reload-mods" testdata/policies/labels >/dev/null
  printf 'p:\n  module: file://%s\n' "$labels" > "$work/reload.yml"
  start_server "$work/reload.yml" --cache-dir "$work/cache-reload"
  rb() { "$work/reloadbench" -url "https://127.0.0.1:$port" -policies "$work/reload.yml" -cacert "$work/tls.crt" -pid "$server" -d "$duration" "$@"; }
  echo "-- a small waPC policy (labels, 1.8 MB), same module, new settings"
  rb -module "$labels" latency
  echo "-- a new module each time (3.4 MB copies of labels, from the disk cache)"
  rb -module "$work/reload-mods/labels-1.wasm" -module2 "$work/reload-mods/labels-2.wasm" rss
  echo "-- 20 clients, no reload, then a reload every second"
  rb -module "$labels" load
  stop_server
fi
