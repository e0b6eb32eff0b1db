package policysync

import (
	"sync"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// workerState is what both kinds of cluster worker (spoke, ocmCluster)
// share with the reconciler: the desired state it hands them, a kick when
// that changes, and the cluster status they report back.
type workerState struct {
	kick chan struct{}

	mu       sync.Mutex // guards the fields below, and those of the worker that say so
	desired  *desiredState
	status   syncv1alpha1.ClusterStatus
	reported bool // status holds a first pass
}

func newWorkerState(cluster string) workerState {
	return workerState{kick: make(chan struct{}, 1), status: syncv1alpha1.ClusterStatus{Name: cluster}}
}

// setDesired hands the worker a new desired state, and kicks it when the
// state changed.
func (w *workerState) setDesired(d *desiredState) {
	w.mu.Lock()
	same := w.desired != nil && w.desired.digest == d.digest
	w.desired = d
	w.mu.Unlock()
	if !same {
		w.poke()
	}
}

// poke wakes the worker, unless a kick is already pending.
func (w *workerState) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// clusterStatus returns the cluster's status, and whether the worker has
// made a first pass yet.
func (w *workerState) clusterStatus() (syncv1alpha1.ClusterStatus, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return *w.status.DeepCopy(), w.reported
}

// setStatus records the status of a pass.
func (w *workerState) setStatus(status syncv1alpha1.ClusterStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status, w.reported = status, true
}
