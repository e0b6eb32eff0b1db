package policysync

import (
	"context"
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

// clusterWorker keeps one cluster of one PolicySync in sync, in a
// goroutine of its own (run): spoke for the direct transport, ocmCluster
// for Open Cluster Management.
type clusterWorker interface {
	// setDesired hands the worker the state its cluster should reach.
	setDesired(*desiredState)
	// clusterStatus returns the cluster's status, and whether the worker
	// has made a first pass yet.
	clusterStatus() (syncv1alpha1.ClusterStatus, bool)
	run(ctx context.Context)
	// cleanup deletes what the worker made in its cluster; the worker's
	// goroutine must be stopped first.
	cleanup(ctx context.Context) error
}

// workerKey names a cluster's worker in a syncState: a cluster may be named
// both in spec.clusters and spec.placement.
type workerKey struct {
	ocm     bool
	cluster string
}

// runningSpoke is a cluster's worker and its goroutine. It belongs to a
// syncState, whose lock guards it: its methods other than the
// clusterWorker's are called with that lock held.
type runningSpoke struct {
	clusterWorker
	// direct is the worker when it is a spoke (direct transport), which
	// also takes a kubeconfig; nil for Open Cluster Management.
	direct *spoke
	// secret is the name of the kubeconfig Secret the spoke reads.
	secret string
	cancel context.CancelFunc
	done   chan struct{}
}

// stop stops the worker's goroutine and waits for it to return: at once,
// since a canceled pass gives up its API calls.
func (r *runningSpoke) stop() {
	r.cancel()
	<-r.done
}
