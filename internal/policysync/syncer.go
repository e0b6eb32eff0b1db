package policysync

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// finalizer keeps a deleted PolicySync until its copies are deleted from
// the clusters that can be reached.
const finalizer = "sync.wardenhq.io/cleanup"

// revalidateAfter is how long a GVR's validation is trusted: a resource
// installed on the hub after the PolicySync, or a permission granted
// later, is picked up within this time.
const revalidateAfter = time.Minute

// informerSyncPoll is how soon a PolicySync is looked at again while the
// hub watches of its resources fill their caches: syncing from a partial
// cache would delete copies.
const informerSyncPoll = 200 * time.Millisecond

// Syncer reconciles PolicySyncs: it watches the hub objects of their
// resources, hands each cluster's worker (spoke, ocmCluster) the copies it
// should hold, and writes the PolicySync's status from what the workers
// report. It is a manager.Runnable that needs leader election: its watches
// and workers run only in the leader.
//
// Reconcile is safe for concurrent use with different PolicySyncs (the
// controller reconciles several at once, never one PolicySync twice at
// once). Its state is cut along what shares it: the hub watches
// (hubWatches) and the kubeconfig Secrets (secrets) are shared by all
// PolicySyncs and locked by their own sets, never across an API call; what
// it keeps of each PolicySync is in a syncState of its own, locked by that
// PolicySync's reconcile alone. No lock another PolicySync needs is held
// across a call to the hub (discovery, SelfSubjectAccessReviews) or a
// spoke.
type Syncer struct {
	client    client.Client
	hub       dynamic.Interface
	validator *gvrValidator
	opts      Options
	logger    *slog.Logger
	// events carries the names of PolicySyncs to reconcile, from the hub
	// watches, the Secret watches and the workers.
	events chan event.GenericEvent

	started chan struct{}
	ctx     context.Context // the leader's context, set by Start before started is closed

	// hubWatches holds one informer per resource synced, shared by the
	// PolicySyncs that sync it.
	hubWatches *informerSet[schema.GroupVersionResource]
	// secrets holds the spokes' kubeconfig Secrets.
	secrets *kubeconfigSecrets

	mu sync.Mutex // guards syncs, the map; each syncState has its own lock
	// syncs holds what the Syncer keeps of each PolicySync, by name.
	syncs map[string]*syncState
}

// syncerDeps are what a Syncer talks to: the hub, through a
// controller-runtime client (PolicySyncs, CustomResourceDefinitions read
// uncached with reader, SelfSubjectAccessReviews), a dynamic client (the
// objects to sync, ManifestWorks), a typed client (kubeconfig Secrets) and
// discovery.
type syncerDeps struct {
	client    client.Client
	reader    client.Reader
	hub       dynamic.Interface
	kube      kubernetes.Interface
	discovery resourceDiscovery
}

// newSyncer returns a Syncer on deps; Start runs it.
func newSyncer(deps syncerDeps, opts Options, logger *slog.Logger) *Syncer {
	s := &Syncer{
		client:    deps.client,
		hub:       deps.hub,
		validator: &gvrValidator{discovery: deps.discovery, reader: deps.reader, writer: deps.client},
		opts:      opts,
		logger:    logger,
		events:    make(chan event.GenericEvent, eventBuffer),
		started:   make(chan struct{}),
		syncs:     map[string]*syncState{},
	}
	s.hubWatches = newInformerSet(func(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
		return dynamicinformer.NewFilteredDynamicInformer(deps.hub, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	}, s.enqueue)
	s.secrets = newKubeconfigSecrets(deps.kube, opts.Namespace, s.enqueue)
	return s
}

// syncState is what the Syncer keeps of one PolicySync between reconciles.
//
// mu guards every field. It is held by the PolicySync's reconcile for as
// long as it runs (validation on the hub, the stop of a worker and, when
// the PolicySync is deleted, the deletion of its copies included), and by
// Start when it stops the workers: nothing another PolicySync does waits
// for it.
type syncState struct {
	mu          sync.Mutex
	generation  int64
	validatedAt time.Time
	resources   []validatedGVR
	spokes      map[workerKey]*runningSpoke
	// copies caches the copy of each hub object by its uid, made at the
	// hub object's resourceVersion: a reconcile makes copies of the
	// objects that changed only.
	copies map[types.UID]cachedCopy
	// status writes the status, and stopStatus stops its goroutine; both
	// are set when the syncState is made, and never changed.
	status     *statusWriter
	stopStatus context.CancelFunc
}

// validatedGVR is an entry of spec.policiesToSync and why it cannot be
// synced (nil: it can).
type validatedGVR struct {
	gvr schema.GroupVersionResource
	err error
}

// Start runs the Syncer's watches and workers until ctx is done.
func (s *Syncer) Start(ctx context.Context) error {
	s.ctx = ctx
	close(s.started)
	<-ctx.Done()
	s.mu.Lock()
	states := slices.Collect(maps.Values(s.syncs))
	s.mu.Unlock()
	for _, st := range states {
		st.mu.Lock()
		for _, sp := range st.spokes {
			sp.stop()
		}
		st.mu.Unlock()
	}
	return nil
}

// NeedLeaderElection says the Syncer runs in the leader only.
func (s *Syncer) NeedLeaderElection() bool { return true }

// Reconcile brings one PolicySync's clusters and status up to date.
func (s *Syncer) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	select {
	case <-s.started:
	case <-ctx.Done():
		return ctrl.Result{}, ctx.Err()
	}
	var ps syncv1alpha1.PolicySync
	if err := s.client.Get(ctx, req.NamespacedName, &ps); err != nil {
		if apierrors.IsNotFound(err) {
			s.forget(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !ps.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, s.finalize(ctx, &ps)
	}
	if controllerutil.AddFinalizer(&ps, finalizer) {
		if err := s.client.Update(ctx, &ps); err != nil {
			return ctrl.Result{}, err
		}
	}

	return ctrl.Result{RequeueAfter: s.sync(ctx, &ps)}, nil
}

// state returns what the Syncer keeps of the PolicySync name, made (with
// its status writer running) if there was none.
func (s *Syncer) state(name string) *syncState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[name]
	if st == nil {
		st = &syncState{spokes: map[workerKey]*runningSpoke{}, status: newStatusWriter(s.client, name, s.logger)}
		var statusCtx context.Context
		statusCtx, st.stopStatus = context.WithCancel(s.ctx)
		go st.status.run(statusCtx)
		s.syncs[name] = st
	}
	return st
}

// take removes what the Syncer keeps of the PolicySync name and returns
// it, nil if there was none.
func (s *Syncer) take(name string) *syncState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[name]
	delete(s.syncs, name)
	return st
}

// sync brings the watches and the clusters' workers of ps up to date, and
// hands its status to its status writer. It returns when to look at ps
// again.
func (s *Syncer) sync(ctx context.Context, ps *syncv1alpha1.PolicySync) time.Duration {
	st := s.state(ps.Name)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.generation != ps.Generation || time.Since(st.validatedAt) > revalidateAfter {
		st.resources = s.validate(ctx, ps.Spec.PoliciesToSync)
		st.generation, st.validatedAt = ps.Generation, time.Now()
	}

	stores, synced := s.watchResources(ps.Name, st.resources)
	if !synced {
		return informerSyncPoll
	}
	desired, buildErr := desiredCopies(ps, st, stores)
	if buildErr == nil {
		s.runSpokes(ps.Name, st, &ps.Spec, desired)
	}

	st.status.set(policySyncStatus(ps, st.resources, clusterReports(&ps.Spec, st.spokes), buildErr))
	return revalidateAfter
}

// validate checks each resource of a PolicySync on the hub.
func (s *Syncer) validate(ctx context.Context, gvrs []syncv1alpha1.GroupVersionResource) []validatedGVR {
	out := make([]validatedGVR, 0, len(gvrs))
	for _, g := range gvrs {
		gvr := schema.GroupVersionResource{Group: g.Group, Version: g.Version, Resource: g.Resource}
		out = append(out, validatedGVR{gvr: gvr, err: s.validator.validate(ctx, gvr)})
	}
	return out
}

// watchResources makes sure the hub is watched for every valid resource
// of the PolicySync name and no longer on its behalf for the others. It
// returns the watches' caches, and whether every one has been filled.
func (s *Syncer) watchResources(name string, resources []validatedGVR) (map[schema.GroupVersionResource]cache.Store, bool) {
	want := map[schema.GroupVersionResource]bool{}
	stores := map[schema.GroupVersionResource]cache.Store{}
	synced := true
	for _, r := range resources {
		if r.err != nil || want[r.gvr] {
			continue
		}
		want[r.gvr] = true
		w := s.hubWatches.use(s.ctx, r.gvr, name)
		stores[r.gvr] = w.store
		synced = synced && w.synced
	}
	s.hubWatches.keepOnly(name, want)
	return stores, synced
}

func (s *Syncer) enqueue(name string) {
	select {
	case s.events <- event.GenericEvent{Object: &syncv1alpha1.PolicySync{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
	case <-s.ctx.Done():
	}
}

// runSpokes starts a worker for each cluster of the PolicySync name that
// has none, hands every worker the desired state (and a spoke its
// kubeconfig), and stops (after deleting their copies) the workers of
// clusters no longer named.
func (s *Syncer) runSpokes(name string, st *syncState, spec *syncv1alpha1.PolicySyncSpec, desired *desiredState) {
	changed := func() { s.enqueue(name) }
	named := map[workerKey]bool{}
	for _, c := range spec.Clusters {
		key := workerKey{cluster: c.Name}
		named[key] = true
		sp := st.spokes[key]
		secretName, secretErr := s.secrets.name(c.KubeconfigSecretRef)
		if sp != nil && sp.secret != secretName {
			s.secrets.release(sp.secret, name)
		}
		if sp == nil {
			direct := newSpoke(name, c.Name, s.opts.ResyncPeriod, s.opts.SpokeTimeout, s.logger, changed)
			sp = s.startWorker(direct)
			sp.direct = direct
			st.spokes[key] = sp
		}
		sp.secret = secretName
		if secretErr == nil {
			var kubeconfig []byte
			kubeconfig, secretErr = s.secrets.read(s.ctx, name, secretName, c.KubeconfigSecretRef.Key)
			if !errors.Is(secretErr, errSecretNotRead) {
				sp.direct.setKubeconfig(kubeconfig, secretErr)
			}
		} else {
			sp.direct.setKubeconfig(nil, secretErr)
		}
		sp.setDesired(desired)
	}
	if spec.Placement != nil {
		for _, cluster := range spec.Placement.ClusterNames {
			key := workerKey{ocm: true, cluster: cluster}
			named[key] = true
			sp := st.spokes[key]
			if sp == nil {
				sp = s.startWorker(newOCMCluster(name, cluster, s.hub, s.opts.ResyncPeriod, s.opts.SpokeTimeout, s.logger, changed))
				st.spokes[key] = sp
			}
			sp.setDesired(desired)
		}
	}
	for key, sp := range st.spokes {
		if named[key] {
			continue
		}
		delete(st.spokes, key)
		sp.stop()
		s.secrets.release(sp.secret, name)
		go func() {
			ctx, cancel := context.WithTimeout(s.ctx, s.opts.SpokeTimeout)
			defer cancel()
			if err := sp.cleanup(ctx); err != nil {
				s.logger.Warn("deleting the copies in a cluster no longer synced", "policySync", name, "cluster", key.cluster, "error", err)
			}
		}()
	}
}

// startWorker runs w in a goroutine of its own until it is stopped.
func (s *Syncer) startWorker(w clusterWorker) *runningSpoke {
	ctx, cancel := context.WithCancel(s.ctx)
	sp := &runningSpoke{clusterWorker: w, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(sp.done)
		sp.run(ctx)
	}()
	return sp
}

// clusterReports reads what the workers of spokes report of the clusters
// spec names, in its order.
func clusterReports(spec *syncv1alpha1.PolicySyncSpec, spokes map[workerKey]*runningSpoke) []clusterReport {
	var keys []workerKey
	for _, c := range spec.Clusters {
		keys = append(keys, workerKey{cluster: c.Name})
	}
	if spec.Placement != nil {
		for _, cluster := range spec.Placement.ClusterNames {
			keys = append(keys, workerKey{ocm: true, cluster: cluster})
		}
	}
	reports := make([]clusterReport, 0, len(keys))
	for _, key := range keys {
		r := clusterReport{name: key.cluster}
		if sp := spokes[key]; sp != nil {
			r.running = true
			r.status, r.reported = sp.clusterStatus()
		}
		reports = append(reports, r)
	}
	return reports
}

// finalize deletes the copies of a deleted PolicySync from every cluster
// that answers, then lets it go. Copies in clusters that cannot be reached
// within the spoke timeout are left, and logged: a cluster that is gone
// for good must not keep the PolicySync forever.
func (s *Syncer) finalize(ctx context.Context, ps *syncv1alpha1.PolicySync) error {
	if !controllerutil.ContainsFinalizer(ps, finalizer) {
		return nil
	}
	if st := s.take(ps.Name); st != nil {
		st.mu.Lock()
		var wg sync.WaitGroup
		for key, sp := range st.spokes {
			sp.stop()
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, s.opts.SpokeTimeout)
				defer cancel()
				if err := sp.cleanup(cctx); err != nil {
					s.logger.Warn("deleting the copies of a deleted PolicySync", "policySync", ps.Name, "cluster", key.cluster, "error", err)
				}
			})
		}
		wg.Wait()
		s.releaseAll(ps.Name, st)
		st.mu.Unlock()
	}
	controllerutil.RemoveFinalizer(ps, finalizer)
	return client.IgnoreNotFound(s.client.Update(ctx, ps))
}

// forget stops everything done for a PolicySync that no longer exists
// (deleted without its finalizer, or by a syncer that was not the leader).
func (s *Syncer) forget(name string) {
	st := s.take(name)
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, sp := range st.spokes {
		sp.stop()
	}
	s.releaseAll(name, st)
}

// releaseAll stops the status writer of the PolicySync name and releases
// its watches. Called with st.mu held.
func (s *Syncer) releaseAll(name string, st *syncState) {
	st.stopStatus()
	s.secrets.releaseAll(name)
	s.hubWatches.keepOnly(name, nil)
}
