// Command admissionbench measures pod creation through a Kubernetes API
// server, with and without admission webhooks: hack/admission-bench.sh runs
// it on the local cluster (hack/local-cluster.sh) before Warden is installed
// and again with Warden serving the 16 Pod Security Standard policies of
// pss-policies.yaml, and with the same 16 checks as one policy group
// (pss-group.yaml); docs/benchmarks.md holds what it printed.
//
// Modes (-mode):
//
//   - measure (the default): for each concurrency level of -c, that many
//     clients create pods back to back (a closed loop) for -d, or until -n
//     creations were measured, after a -warmup whose creations are not
//     counted. It prints the latency percentiles (p50, p95, p99, max) and
//     the throughput of each level; per creation, the CPU time of the
//     processes -cpu-of names, of the tool itself and of the rest of the
//     machine during the measured window, and the TCP connections opened
//     from the tool's network namespace (where the API server runs, on the
//     local cluster); the mean time the API server spent in validating
//     admission and in each webhook call (from its /metrics); and, with
//     -policy-server-metrics, how many policy evaluations each creation
//     cost. After each level the pods are deleted (a delete
//     collection with no grace period), so that every level starts from an
//     empty namespace.
//   - first-rejection: creates, in dry-run, a privileged pod (violatingPod)
//     every -poll until a webhook denies it with -expect-message, and prints
//     how long that took since -since: the time from `helm install` to the
//     first rejected pod.
//   - compare: no cluster; reads two -json results (-base and -with) and
//     prints a Markdown table of both and the p99 overhead of -with.
//
// Every pod is a copy of benchPod: a pod that passes the restricted Pod
// Security Standard, bound with spec.nodeName to a node that does not exist
// (admissionbench-nowhere). The API server validates it, calls the
// webhooks and stores it in etcd (a real CREATE), but no scheduler or
// kubelet ever acts on it, so nothing runs on the node.
//
// The namespace (-namespace) is created when it is missing, with the label
// app.kubernetes.io/managed-by=admissionbench, and deleted at the end unless
// -keep-namespace. A namespace without that label is refused, so that the
// tool never deletes what it did not create.
//
// The client has no client-side rate limit (QPS -1) and speaks protobuf over
// one HTTP/2 connection, as controllers do; the admin user of the local
// cluster is exempt from API Priority and Fairness, so neither side queues
// the creations on purpose. Each level is bounded by -d and -n, each
// request by -timeout, the whole first-rejection mode by -wait.
//
// Of Warden, the program links only the command-line parsing the tools
// under hack/ share: it sees Warden through the API server, as a user does.
// Its tests evaluate the 16 policies and the group with wardenctl,
// in-process, against the benchmark's pod and against pods that each break
// a check.
//
//	go run ./hack/admissionbench -kubeconfig KUBECONFIG -c 1,10,50 -d 20s -json out.json
//	go run ./hack/admissionbench -mode compare -base before.json -with after.json
//
// Exit status: 0 when every measured creation succeeded (measure), the pod
// was rejected in time (first-rejection) or the table was printed
// (compare); 1 otherwise; 2 for invalid flags.
package main
