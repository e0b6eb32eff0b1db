package policysync

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// minStatusInterval spaces a PolicySync's status writes: with many objects
// the status is large, and the workers report after every pass.
const minStatusInterval = 500 * time.Millisecond

// statusRetry is how long a status write that failed waits to be tried
// again.
const statusRetry = time.Second

// statusWriter writes one PolicySync's status in a goroutine of its own.
// A reconcile only hands it the latest status: the PolicySync's next
// reconcile (a hub change to hand to the workers) does not wait for a
// large write to finish. Statuses handed in while a write runs are
// coalesced into one write of the latest.
type statusWriter struct {
	client client.Client
	name   string
	logger *slog.Logger
	kick   chan struct{}

	mu      sync.Mutex
	pending *syncv1alpha1.PolicySyncStatus
	// last is the last status handed in, to tell a new one from a repeat
	// while the PolicySync read from the cache still has an older one.
	last *syncv1alpha1.PolicySyncStatus
}

func newStatusWriter(c client.Client, name string, logger *slog.Logger) *statusWriter {
	return &statusWriter{client: c, name: name, logger: logger, kick: make(chan struct{}, 1)}
}

// set hands the writer status, unless it equals the status last handed in.
func (w *statusWriter) set(status syncv1alpha1.PolicySyncStatus) {
	w.mu.Lock()
	if w.last != nil && equality.Semantic.DeepEqual(*w.last, status) {
		w.mu.Unlock()
		return
	}
	w.last, w.pending = &status, &status
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run writes the statuses handed in until ctx is done, at most one every
// minStatusInterval.
func (w *statusWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		w.mu.Lock()
		status := w.pending
		w.pending = nil
		w.mu.Unlock()
		if status == nil {
			continue
		}
		wait := minStatusInterval
		if err := w.write(ctx, status); err != nil {
			w.logger.Warn("writing the status of a PolicySync", "policySync", w.name, "error", err)
			w.mu.Lock()
			if w.pending == nil {
				w.pending = status
			}
			w.mu.Unlock()
			wait = statusRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		w.mu.Lock()
		again := w.pending != nil
		w.mu.Unlock()
		if again {
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	}
}

// write replaces the PolicySync's status with a JSON merge patch, which
// replaces lists whole and needs no resourceVersion: the status is the
// syncer's alone.
func (w *statusWriter) write(ctx context.Context, status *syncv1alpha1.PolicySyncStatus) error {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	ps := &syncv1alpha1.PolicySync{ObjectMeta: metav1.ObjectMeta{Name: w.name}}
	return client.IgnoreNotFound(w.client.Status().Patch(ctx, ps, client.RawPatch(types.MergePatchType, patch)))
}

// clusterReport is what the status is told of one cluster a PolicySync
// names, in the order the spec names them.
type clusterReport struct {
	name string
	// running says whether the cluster has a worker; reported whether
	// the worker made a first pass, and status is what that pass found.
	running, reported bool
	status            syncv1alpha1.ClusterStatus
}

// policySyncStatus is the status of the PolicySync ps: its resources as
// validated, its clusters as reported, and the Ready condition that
// readyCondition decides from them. buildErr is why the copies could not
// be made (nil: they were).
func policySyncStatus(ps *syncv1alpha1.PolicySync, resources []validatedGVR, clusters []clusterReport, buildErr error) syncv1alpha1.PolicySyncStatus {
	status := syncv1alpha1.PolicySyncStatus{
		ObservedGeneration: ps.Generation,
		Conditions:         slices.Clone(ps.Status.Conditions),
	}
	for _, r := range resources {
		g := syncv1alpha1.GVRStatus{Group: r.gvr.Group, Version: r.gvr.Version, Resource: r.gvr.Resource, Valid: r.err == nil}
		if r.err != nil {
			g.Message = r.err.Error()
		}
		status.PoliciesToSync = append(status.PoliciesToSync, g)
	}
	for _, c := range clusters {
		switch {
		case !c.running:
		case !c.reported:
			status.Clusters = append(status.Clusters, syncv1alpha1.ClusterStatus{Name: c.name})
		default:
			status.Clusters = append(status.Clusters, c.status)
		}
	}
	meta.SetStatusCondition(&status.Conditions, readyCondition(ps.Generation, resources, clusters, buildErr))
	return status
}

// readyCondition is where the Ready condition of a PolicySync at
// generation is decided, the first that applies winning: SyncFailed when
// the copies could not be made (buildErr), InvalidGVR when a resource
// cannot be synced, ClusterUnreachable when a cluster that reported cannot
// be reached, Conflict when a cluster holds objects of its own that win,
// SyncFailed when an object is not synced (or, on a reachable cluster, a
// message says why nothing is: a ManifestWork the hub refused), Unknown
// (Syncing) while a cluster has not reported, and True (Synced) otherwise.
func readyCondition(generation int64, resources []validatedGVR, clusters []clusterReport, buildErr error) metav1.Condition {
	var invalid, unreachable, conflicting, failing, pending []string
	for _, r := range resources {
		if r.err != nil {
			invalid = append(invalid, displayGVR(r.gvr))
		}
	}
	for _, c := range clusters {
		switch cs := c.status; {
		case !c.running || !c.reported:
			pending = append(pending, c.name)
		case !cs.Reachable:
			unreachable = append(unreachable, c.name)
		default:
			if len(cs.Conflicts) > 0 {
				conflicting = append(conflicting, c.name)
			}
			// A message on a reachable cluster is a ManifestWork the hub
			// refused, which may hold no object (deleting it was refused).
			if cs.Message != "" || slices.ContainsFunc(cs.Objects, func(o syncv1alpha1.ObjectStatus) bool { return !o.Synced }) {
				failing = append(failing, c.name)
			}
		}
	}

	ready := metav1.Condition{Type: syncv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: syncv1alpha1.ReasonSynced,
		Message: "every object is synced to every cluster", ObservedGeneration: generation}
	switch {
	case buildErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, syncv1alpha1.ReasonSyncFailed, buildErr.Error()
	case len(invalid) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, syncv1alpha1.ReasonInvalidGVR
		ready.Message = "not synced, see status.policiesToSync: " + strings.Join(invalid, ", ")
	case len(unreachable) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, syncv1alpha1.ReasonClusterUnreachable
		ready.Message = "clusters not reachable, see status.clusters: " + strings.Join(unreachable, ", ")
	case len(conflicting) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, syncv1alpha1.ReasonConflict
		ready.Message = "objects made in the clusters win over the hub's, see status.clusters: " + strings.Join(conflicting, ", ")
	case len(failing) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, syncv1alpha1.ReasonSyncFailed
		ready.Message = "objects not synced, see status.clusters: " + strings.Join(failing, ", ")
	case len(pending) > 0:
		ready.Status, ready.Reason = metav1.ConditionUnknown, syncv1alpha1.ReasonSyncing
		ready.Message = "not synced yet: " + strings.Join(pending, ", ")
	}
	return ready
}
