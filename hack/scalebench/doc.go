// Package scalebench is the scale benchmark of context-aware policies
// (RFC 004, issue 21): a real kube-apiserver and etcd, thousands of objects
// created with client-go, the policy server as a separate process answering
// list host calls and Gatekeeper inventories from its reflector store, and,
// in the same run, a client-go informer serving the same lists, loaded with
// the same load tool, so that the ratio is measured side by side. Run it
// with one command from the repository root:
//
//	hack/scalebench.sh                         # all scenarios, full size (8-10 minutes on two cores)
//	hack/scalebench.sh namespaces              # one scenario: namespaces, rolebindings or pods
//	SCALE_QUICK=1 hack/scalebench.sh           # a tenth of the objects, shorter runs
//	SCALE_REPORT=/tmp/scale.md hack/scalebench.sh pods
//
// The script builds kube-apiserver and etcd (hack/cluster-bins.sh) and runs
// TestScale, which compiles only under the cluster and scale build tags, so
// neither go test ./... nor the cluster tier (hack/cluster-test.sh) runs it.
//
// The scenarios:
//
//   - namespaces: SCALE_NAMESPACES Namespaces (3,000); policies ns-scan and
//     ns-noscan (testdata/policies/list-resources) call list_resources_all
//     for v1 Namespace on every request, the first reading every item of the
//     answer, the second not looking at it. Informer: the list of all
//     Namespaces.
//   - rolebindings: SCALE_ROLEBINDINGS RoleBindings (10,000) spread over the
//     namespaces; Gatekeeper policies over data.inventory (testdata/*.rego):
//     rb-duplicate looks up the bindings of the request's namespace,
//     rb-subjects walks all of them.
//   - pods: SCALE_PODS Pods (2,000) of about SCALE_POD_KB KiB each (18), in
//     namespaces of SCALE_PODS_PER_NAMESPACE (100); pods-ns lists the pods
//     of one namespace, pods-all lists all of them, both reading every item.
//     Informer: the same two lists. The pods stay Pending: there is no
//     scheduler.
//
// Each scenario starts the policy server (go build ./cmd/policy-server) with
// a policies.yml granting only its kinds as contextAwareResources, plain
// HTTP, and measures from the start of the process: time until /readiness
// answers 200 and until the first validation answers without error, CPU
// (utime + stime of /proc/<pid>/stat) and peak RSS until then, RSS once
// idle, the size of the reflector database and its write-ahead log. Then
// hack/loadtest POSTs an AdmissionReview to /validate/<policy> of each
// target with each of SCALE_CLIENTS closed-loop clients (1,20) and, for the
// namespaces scenario, at each open-loop rate of SCALE_RATES (20 req/s),
// for SCALE_DURATION (10s) after SCALE_WARMUP (2s): throughput, p50, p95 and
// p99 latency, server CPU per request (its CPU over the run divided by the
// requests of the run, warm-up included), peak RSS during the run (sampled
// every 50 ms) and VmHWM at the end. The informer baseline is the test binary
// itself, run again as a separate process: a dynamic informer of the kind,
// with managedFields and the last-applied annotation dropped as the
// reflector drops them, that answers any request to /list?namespace=NS (or
// /list for all) with the JSON list, as the host call answers a policy.
//
// Environment (defaults in parentheses): SCALE_NAMESPACES (3000),
// SCALE_ROLEBINDINGS (10000), SCALE_PODS (2000), SCALE_POD_KB (18),
// SCALE_PODS_PER_NAMESPACE (100), SCALE_CLIENTS (1,20), SCALE_RATES (20),
// SCALE_DURATION (10s), SCALE_WARMUP (2s), SCALE_CREATE_WORKERS (32),
// SCALE_SERVER_ARGS (extra policy server flags, space separated),
// SCALE_REPORT (a file to write the markdown report to, besides stdout),
// SCALE_LOGS (a directory to keep the servers' logs in; default: the run's
// temporary directory, removed at the end), SCALE_PROFILES (a directory: the
// policy server then runs with --enable-pprof, and a CPU profile of the
// measured part of each load run and a heap profile once idle are saved
// there, for go tool pprof), SCALE_SCENARIOS (all; the script sets it from
// its arguments),
// SCALE_QUICK=1 (300 namespaces, 1,000 RoleBindings, 200 pods, 5s runs,
// unless set otherwise). When the policy server lists --reflector-db-path
// among its flags, the store is put in the run's temporary directory with
// it; otherwise the server's TMPDIR is that directory, where it makes its
// own. The compiled-module cache is the policy server's default, so only the
// first run after a policy changes includes compiling it.
//
// The package has no code outside its tests. The benchmark imports Warden's
// test helpers (internal/clustertest, internal/policybuild,
// internal/rego/regotest) but never the policy server: it measures the
// server from the outside, as a process.
package scalebench
