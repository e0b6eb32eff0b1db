// Package auditscanner is Warden's audit scanner (cmd/audit-scanner): it
// evaluates the objects already in the cluster against the active policies
// through the policy servers' /audit endpoint, and writes one report per
// object, as Kubewarden's audit-scanner does
// (docs/compatibility.md#audit-scanner), so that existing report consumers read
// Warden's results unchanged.
//
// One run (Scanner.Run) lists the policies once, then scans the cluster-wide
// resources and every namespace (or only one of them, with --cluster or
// --namespace). For each scope it selects the policies that apply
// (namespaceSelector, rules with CREATE and no wildcard, backgroundAudit,
// status active), lists the resources they target page by page, sends each
// object to every policy whose objectSelector matches it, and writes the
// object's report: an OpenReports Report/ClusterReport (openreports.io/v1alpha1)
// or a legacy PolicyReport/ClusterPolicyReport (wgpolicyk8s.io/v1alpha2).
//
// Kubernetes' own ValidatingAdmissionPolicies and MutatingAdmissionPolicies
// are audited too (kubepolicies.go; --disable-kubernetes-policies turns it
// off): each run lists them with their bindings and params once, and
// evaluates the objects in process with the API server's admission plugins
// (internal/kubepolicy), one result per VAP binding and validation, named
// vap/<policy>/<binding>, and one per MAP binding ("would mutate"), named
// map/<policy>/<binding>, in the same reports
// (docs/audit-scanner.md#kubernetes-validatingadmissionpolicies).
//
// Where Warden goes further than Kubewarden, to be lighter on the API server:
//   - a report whose contents, timestamps aside, did not change since the
//     previous run is not written at all, and the scope's reports of objects
//     the run did not audit are deleted by name, each guarded by the
//     resourceVersion it was listed at (--keep-unchanged-reports, the
//     default). With --keep-unchanged-reports=false, as Kubewarden, an
//     unchanged report gets a merge patch of its run-uid label only, guarded
//     the same way, and the run-uid cleanup removes exactly the stale ones;
//     it is skipped when the listing shows none;
//   - the policies are listed once per run, not once per namespace, and the
//     Service of each PolicyServer is looked up once;
//   - resources and reports are listed in pages of --page-size and handled
//     as they come, so memory is bounded by the parallelism, not the cluster;
//     the namespace list, small and harmless when slightly stale, is read
//     from the API server's watch cache (resourceVersion "0"). Paginated
//     lists cannot use resourceVersion "0" (the watch cache then ignores the
//     limit and answers the whole collection), so they are consistent lists,
//     which API servers since 1.31 also answer from the watch cache;
//   - connections to the policy servers are kept alive and reused, and
//     their host names looked up once per run: a name that does not resolve
//     fails each object at once, saying so (reviewer.resolve), instead of
//     after the request timeout with "context deadline exceeded";
//   - a scope whose scan was incomplete (a policy server down or answering
//     an HTTP error, a list or a report write that failed) keeps every
//     report of the previous run: the cleanup is skipped, the error results
//     carry the error's message, and the run exits non-zero.
//
// Output: logs are JSON lines on stderr, with one progress line per
// namespace ("namespace scanned", with how many are done and left); with
// --output-scan every report of the run, written or unchanged, is printed
// on stdout, one JSON object per line; --metrics-file and
// --metrics-pushgateway-url export the run's figures as Prometheus gauges
// (metrics.go). Main exits 1 when the run could not start or some scope was
// incomplete.
//
// It must not import the policy server, the controller, or wasm packages: it
// talks to them over HTTP and the Kubernetes API only. The one evaluation
// code it links is internal/kubepolicy, for the ValidatingAdmissionPolicies,
// which runs no wasm.
package auditscanner
