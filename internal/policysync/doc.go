// Package policysync is the policy syncer (cmd/policy-syncer): RFC 002's
// policy sync, adapted to admission policies. It runs against a hub
// cluster and reads its PolicySyncs (api/sync/v1alpha1); each names the
// resources whose objects are copied (spec.policiesToSync), which of them
// (spec.selector), and the spoke clusters, reached with a kubeconfig kept in
// a Secret of the syncer's namespace (spec.clusters) or through Open Cluster
// Management (spec.placement: a ManifestWork per cluster, ocm.go).
//
// The work is split in two, so that a slow or unreachable spoke holds up
// nothing else:
//
//   - Syncer (syncer.go) is the PolicySync reconciler, run in the leader
//     only. It validates the resources (validate.go: served by the hub,
//     listable and watchable, with a policy's shape), keeps one watch on the
//     hub per resource in use (informers.go, started and stopped as
//     PolicySyncs change) and one per kubeconfig Secret (secrets.go), builds
//     the copies each spoke should hold (copies.go), and writes the status
//     from what the workers report (status.go, where Ready is decided).
//     Several PolicySyncs are reconciled at once: what they share is locked
//     apart from what each keeps, and no lock another PolicySync needs is
//     held across an API call.
//   - spoke (spoke.go) is one worker per direct cluster of each PolicySync,
//     in a goroutine of its own (ocmCluster, in ocm.go, is its OCM
//     counterpart). At each change, and every --resync-period, it
//     lists the spoke's objects of each resource and mends them: server-side
//     apply of new and changed copies, conflicts with objects made in the
//     spoke (which win and are reported), deletion of copies no longer
//     wanted (decide.go decides which, object by object), and the status
//     feedback read from each copy (feedback.go). A spoke that cannot be
//     reached is retried with a backoff capped at 30 s.
//
// Copies carry the annotation kubewarden.io/policy-synced with their
// PolicySync's name; the syncer never changes or deletes an object without
// it. The observable contract is docs/policy-sync.md.
package policysync
