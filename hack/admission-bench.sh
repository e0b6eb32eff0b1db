#!/usr/bin/env bash
# Measures admission through a real API server on this machine's node
# (docs/benchmarks.md, "Admission through the API server"):
#
#   1. builds the admissionbench tool, Warden's images and the helm CLI;
#   2. under the node's lock, starts the local cluster (hack/local-cluster.sh)
#      and imports the images;
#   3. measures pod CREATE latency with no webhook (hack/admissionbench),
#      then with 16 and with 1 webhook of the benchmarks' floor
#      (hack/floorserver: the least an HTTPS webhook in Go does), the most a
#      webhook can cost the API server and no less;
#   4. installs the chart with helm, creates the first policy of
#      hack/admissionbench/pss-policies.yaml (privileged) and times the first
#      rejected pod from the start of `helm install`;
#   5. creates the 16 Pod Security Standard policies, waits until all are
#      active, measures again, counting the policy server's evaluations, and
#      prints both side by side;
#   6. replaces the 16 policies with one policy group of the same 16 checks
#      (hack/admissionbench/pss-group.yaml: one webhook call per pod instead
#      of 16) and measures that too;
#   7. uninstalls the chart, measures once more with no webhook (the drift of
#      the machine over the run), and stops the cluster, whatever happened.
#
# Needs root (the node changes host state; `down` undoes it). The node is
# shared with the end-to-end tier: everything from `up` to `down` runs under
# flock /run/lock/warden-node-user.lock, which hack/e2e.sh's users take too.
# Environment:
#   WARDEN_ADMISSION_BENCH_LEVELS    concurrency levels (default 1,10,50)
#   WARDEN_ADMISSION_BENCH_DURATION  measured time per level (default 20s)
#   WARDEN_ADMISSION_BENCH_OUT       keep the JSON results and helm's output
#                                    in this directory (default: a temporary
#                                    one, removed)
#   WARDEN_ADMISSION_BENCH_PROFILE=1 also profile the policy server: the chart
#                                    is installed with its pprof endpoints on
#                                    (KUBEWARDEN_ENABLE_PPROF), and after each
#                                    measurement with Warden an extra run at 1
#                                    and 50 clients is profiled for 15 s
#                                    (profile-*.pb.gz and their top functions
#                                    in the output directory); the figures of
#                                    such a run are not the published ones
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

lock=/run/lock/warden-node-user.lock
levels="${WARDEN_ADMISSION_BENCH_LEVELS:-1,10,50}"
duration="${WARDEN_ADMISSION_BENCH_DURATION:-20s}"
policies=hack/admissionbench/pss-policies.yaml
group=hack/admissionbench/pss-group.yaml
profile="${WARDEN_ADMISSION_BENCH_PROFILE:-}"
tag=bench
release=warden
namespace=warden-system
floor_image=localhost/warden/floorserver:bench
floor_ns=admissionbench-floor

log() { printf 'admission-bench: %s\n' "$*" >&2; }

# now prints the time in Unix seconds with nanoseconds; elapsed A B prints
# B - A in seconds with two decimals.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# machine_state prints the load average and what else uses the CPU.
machine_state() {
	echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; busiest processes:"
	ps -eo pid,pcpu,etimes,comm --sort=-pcpu | head -n 8
}

# webhooks counts the validating webhook configurations of the benchmark's
# policies.
webhooks() { kubectl get validatingwebhookconfigurations -o name | grep -c admissionbench-pss || true; }

if [[ "${1:-}" != --on-node ]]; then
	# Everything that needs no node is built before taking its lock.
	work="$(mktemp -d)"
	trap 'rm -rf "$work"' EXIT
	start=$SECONDS
	go build -o "$work/admissionbench" ./hack/admissionbench
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/floorserver" ./hack/floorserver
	go run ./hack/local-cluster/ociimage -binary "$work/floorserver" -name "$floor_image" -user 65532:65532 \
		-out "$work/floorserver.tar"
	go run ./hack/image -platform linux/amd64 -tag "$tag" -binary controller,policy-server,audit-scanner \
		-out "$work/warden-$tag.tar" >&2
	helm="$(hack/helm.sh | tail -n1)"
	log "built in $((SECONDS - start)) s; waiting for the node ($lock)"
	flock "$lock" "$0" --on-node "$work" "$helm"
	exit
fi

work="$2" helm="$3"
bench="$work/admissionbench"
out="${WARDEN_ADMISSION_BENCH_OUT:-$work}"
mkdir -p "$out"

cleanup() {
	local code=$?
	hack/local-cluster.sh down >&2 || code=1
	exit "$code"
}
trap cleanup EXIT

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- hack/admissionbench charts internal cmd api || echo ' (with local changes)')"
machine_state

start=$SECONDS
kubeconfig="$(hack/local-cluster.sh up | tail -n1)"
eval "$(hack/local-cluster.sh env)" # KUBECONFIG, and kubectl on PATH
log "cluster up in $((SECONDS - start)) s"
hack/local-cluster.sh load-images "$work/warden-$tag.tar" >&2
hack/local-cluster.sh load-images "$work/floorserver.tar" >&2

measure=("$bench" -kubeconfig "$kubeconfig" -c "$levels" -d "$duration"
	-cpu-of "kube-apiserver,etcd,policy-server,floorserver,kube-controller,kube-scheduler")

# start_floor runs hack/floorserver in the cluster behind the Service
# floor.admissionbench-floor, with a certificate of its own.
start_floor() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=floor \
		-addext "subjectAltName=DNS:floor.$floor_ns.svc" -keyout "$work/floor.key" -out "$work/floor.crt" 2>/dev/null
	kubectl create namespace "$floor_ns" >&2
	kubectl -n "$floor_ns" create secret tls floor --cert "$work/floor.crt" --key "$work/floor.key" >&2
	kubectl apply -f - >&2 <<-EOF
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: floor, namespace: $floor_ns}
		spec:
		  selector: {matchLabels: {app: floor}}
		  template:
		    metadata: {labels: {app: floor}}
		    spec:
		      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
		      containers:
		        - name: floor
		          image: $floor_image
		          imagePullPolicy: Never
		          args: [-addr, ":8443", -cert-file, /tls/tls.crt, -key-file, /tls/tls.key]
		          ports: [{containerPort: 8443}]
		          readinessProbe: {tcpSocket: {port: 8443}, periodSeconds: 1}
		          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
		          volumeMounts: [{name: tls, mountPath: /tls, readOnly: true}]
		      volumes: [{name: tls, secret: {secretName: floor}}]
		---
		apiVersion: v1
		kind: Service
		metadata: {name: floor, namespace: $floor_ns}
		spec:
		  selector: {app: floor}
		  ports: [{port: 443, targetPort: 8443}]
	EOF
	kubectl -n "$floor_ns" rollout status deployment/floor --timeout=3m >&2
}

# floor_webhooks N points N validating webhooks at the floor, for the pods of
# the benchmark's namespace, as Warden's policies are.
floor_webhooks() {
	local i ca
	ca="$(base64 -w0 "$work/floor.crt")"
	kubectl delete validatingwebhookconfiguration admissionbench-floor --ignore-not-found >&2
	{
		printf 'apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n'
		printf 'metadata: {name: admissionbench-floor}\nwebhooks:\n'
		for ((i = 1; i <= $1; i++)); do
			printf '  - name: floor-%d.admissionbench.local\n' "$i"
			printf '    clientConfig: {service: {namespace: %s, name: floor, path: /validate/floor-%d, port: 443}, caBundle: %s}\n' "$floor_ns" "$i" "$ca"
			printf '    rules: [{apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [CREATE, UPDATE]}]\n'
			printf '    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: admissionbench}}\n'
			printf '    failurePolicy: Fail\n    sideEffects: None\n    admissionReviewVersions: [v1]\n    timeoutSeconds: 10\n'
		done
	} | kubectl apply -f - >&2
	sleep 2 # the API server's webhook informer
}

# policy_server finds the default policy server's pod: its address, its
# webhook port and its readiness port, which serves /metrics.
policy_server() {
	local pod=(-n "$namespace" get pods -l kubewarden/policy-server=default) i
	kubectl -n "$namespace" rollout status statefulset/policy-server-default --timeout=5m >&2
	for ((i = 0; i < 120; i++)); do # a replaced pod may still be terminating
		[[ "$(kubectl "${pod[@]}" -o name | wc -l)" == 1 ]] && break
		sleep 1
	done
	[[ "$(kubectl "${pod[@]}" -o name | wc -l)" == 1 ]] || { kubectl "${pod[@]}" >&2; log "want one policy-server pod"; return 1; }
	ps_ip="$(kubectl "${pod[@]}" -o jsonpath='{.items[0].status.podIP}')"
	ps_port="$(kubectl "${pod[@]}" -o jsonpath='{.items[0].spec.containers[0].ports[0].containerPort}')"
	ps_metrics="http://$ps_ip:$(kubectl "${pod[@]}" -o jsonpath='{.items[0].spec.containers[0].readinessProbe.httpGet.port}')/metrics"
}

# profile_runs NAME profiles the policy server for 15 s in the middle of a
# 20 s run at 1 client and one at 50 clients (WARDEN_ADMISSION_BENCH_PROFILE).
profile_runs() {
	[[ "$profile" == 1 ]] || return 0
	local c
	for c in 1 50; do
		"${measure[@]}" -c "$c" -d 20s -label "$1, profiled" -keep-namespace \
			-policy-server-metrics "$ps_metrics" >"$out/profile-$1-c$c.txt" &
		sleep 7
		curl -sSfk -o "$out/profile-$1-c$c.pb.gz" "https://$ps_ip:$ps_port/debug/pprof/profile?seconds=15"
		wait $!
		go tool pprof -top -nodecount=60 "$out/profile-$1-c$c.pb.gz" >"$out/profile-$1-c$c.top.txt" 2>&1
		log "profiled $1 at $c clients: $out/profile-$1-c$c.top.txt"
	done
}

echo
echo "== 1. no webhook"
"${measure[@]}" -label "no webhook" -json "$out/no-webhook.json" -keep-namespace

echo
echo "== 1b. the floor: 16 trivial webhooks, then 1 (hack/floorserver, HTTP/2)"
start_floor
for n in 16 1; do
	floor_webhooks "$n"
	"${measure[@]}" -label "$n trivial webhooks" -json "$out/floor-$n.json" -keep-namespace
	echo
	"$bench" -mode compare -base "$out/no-webhook.json" -with "$out/floor-$n.json"
	echo
done
kubectl delete validatingwebhookconfiguration admissionbench-floor >&2
kubectl delete namespace "$floor_ns" --wait >&2

echo
echo "== 2. helm install to the first rejected pod"
t0="$(now)"
helm_install=("$helm" install "$release" charts/warden -n "$namespace" --create-namespace --wait
	--set "controller.image.tag=$tag" --set "policyServer.image.tag=$tag" --set "auditScanner.image.tag=$tag")
if [[ "$profile" == 1 ]]; then
	helm_install+=(--set 'policyServer.spec.env[0].name=KUBEWARDEN_ENABLE_PPROF' --set-string 'policyServer.spec.env[0].value=true')
fi
"${helm_install[@]}" >"$out/helm-install.txt"
t1="$(now)"
kubectl apply -f "$policies" -l admissionbench/first-rejection=true >&2
t2="$(now)"
"$bench" -mode first-rejection -kubeconfig "$kubeconfig" -since "$t0" -keep-namespace \
	-expect-message "privileged containers are not allowed"
echo "helm install --wait: $(elapsed "$t0" "$t1") s; the policy created $(elapsed "$t0" "$t2") s after the start of helm install"

echo
echo "== 3. Warden with the 16 policies of $policies"
t3="$(now)"
kubectl apply -f "$policies" >&2
kubectl wait --for=jsonpath='{.status.policyStatus}'=active clusteradmissionpolicies \
	-l app.kubernetes.io/part-of=admissionbench --timeout=5m >&2
echo "16 policies active $(elapsed "$t3" "$(now)") s after kubectl apply"
echo "validating webhook configurations of the benchmark: $(webhooks)"
policy_server
# What the API server's webhook client, which offers HTTP/2, gets.
echo "the policy server's webhook port answers a client that offers HTTP/2 with HTTP/$(curl -sk --http2 -o /dev/null -w '%{http_version}' "https://$ps_ip:$ps_port/")"
machine_state
"${measure[@]}" -label "Warden, 16 PSS policies" -json "$out/warden.json" -keep-namespace \
	-policy-server-metrics "$ps_metrics"

echo
echo "== no webhook against Warden with 16 policies, same run"
"$bench" -mode compare -base "$out/no-webhook.json" -with "$out/warden.json"
profile_runs policies

echo
echo "== 4. Warden with the 16 checks as one policy group ($group)"
kubectl delete -f "$policies" --wait >&2
for ((i = 0; i < 300; i++)); do
	[[ "$(webhooks)" == 0 ]] && break
	sleep 1
done
t5="$(now)"
kubectl apply -f "$group" >&2
kubectl wait --for=jsonpath='{.status.policyStatus}'=active clusteradmissionpolicygroups \
	-l app.kubernetes.io/part-of=admissionbench --timeout=5m >&2
echo "the group active $(elapsed "$t5" "$(now)") s after kubectl apply; validating webhook configurations of the benchmark: $(webhooks)"
policy_server
machine_state
"${measure[@]}" -label "Warden, 1 group of 16 PSS checks" -json "$out/warden-group.json" -keep-namespace \
	-policy-server-metrics "$ps_metrics"
echo
"$bench" -mode compare -base "$out/no-webhook.json" -with "$out/warden-group.json"
profile_runs group

echo
echo "== 5. helm uninstall, and no webhook again"
t4="$(now)"
"$helm" uninstall "$release" -n "$namespace" --wait >"$out/helm-uninstall.txt"
echo "helm uninstall --wait: $(elapsed "$t4" "$(now)") s"
"${measure[@]}" -label "no webhook, again" -json "$out/no-webhook-again.json"
echo
"$bench" -mode compare -base "$out/no-webhook.json" -with "$out/no-webhook-again.json"
echo
machine_state
