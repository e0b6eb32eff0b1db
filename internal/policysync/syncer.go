package policysync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
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
// resources, hands each cluster's worker (spoke) the copies it should
// hold, and writes the PolicySync's status from what the workers report.
// It is a manager.Runnable that needs leader election: its watches and
// workers run only in the leader.
type Syncer struct {
	client    client.Client
	hub       dynamic.Interface
	kube      kubernetes.Interface
	validator *gvrValidator
	opts      Options
	logger    *slog.Logger
	// events carries the names of PolicySyncs to reconcile, from the hub
	// watches, the Secret watches and the workers.
	events chan event.GenericEvent

	started chan struct{}
	ctx     context.Context // the leader's context, set by Start

	mu      sync.Mutex
	watches map[schema.GroupVersionResource]*watch
	secrets map[string]*watch // by Secret name, in opts.Namespace
	syncs   map[string]*syncState
}

// watch is an informer on the hub shared by the PolicySyncs that use it,
// stopped when the last one stops using it.
type watch struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
	users    map[string]bool

	// failure is why the informer's last list or watch failed, nil if
	// none did; read only while the informer has not synced. Guarded by
	// Syncer.mu.
	failure error
}

// syncState is what the Syncer keeps of one PolicySync between reconciles.
type syncState struct {
	generation  int64
	validatedAt time.Time
	resources   []validatedGVR
	spokes      map[workerKey]*runningSpoke
	// copies caches the copy of each hub object by its uid, made at the
	// hub object's resourceVersion: a reconcile makes copies of the
	// objects that changed only.
	copies map[types.UID]cachedCopy
	// status writes the status, and stop stops its goroutine.
	status     *statusWriter
	stopStatus context.CancelFunc
}

type cachedCopy struct {
	resourceVersion string
	copy            spokeCopy
}

// validatedGVR is an entry of spec.policiesToSync and why it cannot be
// synced (nil: it can).
type validatedGVR struct {
	gvr schema.GroupVersionResource
	err error
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

// runningSpoke is a cluster's worker and its goroutine.
type runningSpoke struct {
	clusterWorker
	// direct is the worker when it is a spoke (direct transport), which
	// also takes a kubeconfig; nil for Open Cluster Management.
	direct *spoke
	secret string
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *runningSpoke) stop() {
	r.cancel()
	<-r.done
}

// Start runs the Syncer's watches and workers until ctx is done.
func (s *Syncer) Start(ctx context.Context) error {
	s.ctx = ctx
	close(s.started)
	<-ctx.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.syncs {
		for _, sp := range st.spokes {
			sp.stop()
		}
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

// sync brings the watches and the clusters' workers of ps up to date, and
// hands its status to its status writer. It returns when to look at ps
// again.
func (s *Syncer) sync(ctx context.Context, ps *syncv1alpha1.PolicySync) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[ps.Name]
	if st == nil {
		st = &syncState{spokes: map[workerKey]*runningSpoke{}, status: newStatusWriter(s.client, ps.Name, s.logger)}
		var statusCtx context.Context
		statusCtx, st.stopStatus = context.WithCancel(s.ctx)
		go st.status.run(statusCtx)
		s.syncs[ps.Name] = st
	}
	if st.generation != ps.Generation || time.Since(st.validatedAt) > revalidateAfter {
		st.resources = s.validate(ctx, ps.Spec.PoliciesToSync)
		st.generation, st.validatedAt = ps.Generation, time.Now()
	}

	synced := s.watchResources(ps.Name, st.resources)
	if !synced {
		return informerSyncPoll
	}
	desired, buildErr := s.desiredState(ps, st)
	if buildErr == nil {
		s.runSpokes(ps.Name, st, &ps.Spec, desired)
	}

	st.status.set(s.status(ps, st, buildErr))
	return revalidateAfter
}

// validate checks each resource of a PolicySync.
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
// says whether every watch has filled its cache.
func (s *Syncer) watchResources(name string, resources []validatedGVR) bool {
	want := map[schema.GroupVersionResource]bool{}
	for _, r := range resources {
		if r.err == nil {
			want[r.gvr] = true
		}
	}
	synced := true
	for gvr := range want {
		w := s.watches[gvr]
		if w == nil {
			w = s.startWatch(func(ctx context.Context) cache.SharedIndexInformer {
				return dynamicinformer.NewFilteredDynamicInformer(s.hub, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
			})
			s.watches[gvr] = w
		}
		w.users[name] = true
		synced = synced && w.informer.HasSynced()
	}
	for gvr, w := range s.watches {
		if !want[gvr] {
			s.release(w, name)
			if len(w.users) == 0 {
				delete(s.watches, gvr)
			}
		}
	}
	return synced
}

// startWatch starts an informer whose events reconcile its users.
func (s *Syncer) startWatch(newInformer func(context.Context) cache.SharedIndexInformer) *watch {
	ctx, cancel := context.WithCancel(s.ctx)
	w := &watch{informer: newInformer(ctx), stop: cancel, users: map[string]bool{}}
	notify := func(any) { s.notify(w) }
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, o any) { notify(o) },
		DeleteFunc: notify,
	})
	// A list refused (a Secret the syncer may not read) leaves the
	// informer unsynced and retrying: the failure is kept for the status.
	_ = w.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		s.mu.Lock()
		w.failure = err
		s.mu.Unlock()
		s.notify(w)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	go w.informer.RunWithContext(ctx)
	return w
}

// notify reconciles the users of a watch.
func (s *Syncer) notify(w *watch) {
	s.mu.Lock()
	users := slices.Collect(maps.Keys(w.users))
	s.mu.Unlock()
	for _, name := range users {
		s.enqueue(name)
	}
}

func (s *Syncer) enqueue(name string) {
	select {
	case s.events <- event.GenericEvent{Object: &syncv1alpha1.PolicySync{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
	case <-s.ctx.Done():
	}
}

// release stops using w on behalf of the PolicySync name, and stops w
// when nobody uses it any more.
func (s *Syncer) release(w *watch, name string) {
	delete(w.users, name)
	if len(w.users) == 0 {
		w.stop()
	}
}

// desiredState builds the copies the PolicySync wants in every cluster
// from the hub watches' caches.
func (s *Syncer) desiredState(ps *syncv1alpha1.PolicySync, st *syncState) (*desiredState, error) {
	selector := labels.Everything()
	if ps.Spec.Selector != nil {
		var err error
		if selector, err = metav1.LabelSelectorAsSelector(ps.Spec.Selector); err != nil {
			return nil, fmt.Errorf("spec.selector: %w", err)
		}
	}
	if _, err := compileFeedback(ps.Spec.StatusFeedback); err != nil {
		return nil, err
	}
	d := &desiredState{copies: map[objectKey]spokeCopy{}, feedback: ps.Spec.StatusFeedback}
	hash := sha256.New()
	copies := make(map[types.UID]cachedCopy, len(st.copies))
	for _, r := range st.resources {
		if r.err != nil {
			continue
		}
		d.gvrs = append(d.gvrs, r.gvr)
		fmt.Fprintf(hash, "gvr %s\n", r.gvr)
		for _, item := range s.watches[r.gvr].informer.GetStore().List() {
			obj, ok := item.(*unstructured.Unstructured)
			if !ok || !selector.Matches(labels.Set(obj.GetLabels())) {
				continue
			}
			cached, ok := st.copies[obj.GetUID()]
			if !ok || cached.resourceVersion != obj.GetResourceVersion() {
				c, err := makeCopy(r.gvr, obj, ps.Name)
				if err != nil {
					return nil, err
				}
				cached = cachedCopy{resourceVersion: obj.GetResourceVersion(), copy: c}
			}
			copies[obj.GetUID()] = cached
			d.copies[cached.copy.key] = cached.copy
		}
	}
	st.copies = copies
	keys := slices.SortedFunc(maps.Keys(d.copies), compareKeys)
	for _, k := range keys {
		fmt.Fprintf(hash, "%s %d %s\n", k, d.copies[k].hubGeneration, d.copies[k].digest)
	}
	for _, f := range ps.Spec.StatusFeedback {
		fmt.Fprintf(hash, "feedback %q %q\n", f.Name, f.JSONPath)
	}
	d.digest = hex.EncodeToString(hash.Sum(nil))
	return d, nil
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
		secretName, secretErr := s.secretName(c.KubeconfigSecretRef)
		if sp != nil && sp.secret != secretName {
			s.releaseSecret(sp.secret, name)
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
			kubeconfig, secretErr = s.readKubeconfig(name, secretName, c.KubeconfigSecretRef.Key)
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
		s.releaseSecret(sp.secret, name)
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

// secretName checks that a kubeconfig Secret is in the syncer's namespace:
// a PolicySync may not make the syncer read Secrets elsewhere.
func (s *Syncer) secretName(ref syncv1alpha1.SecretKeySelector) (string, error) {
	if ref.Namespace != "" && ref.Namespace != s.opts.Namespace {
		return "", fmt.Errorf("the kubeconfig Secret %s/%s is not in the syncer's namespace %s", ref.Namespace, ref.Name, s.opts.Namespace)
	}
	return ref.Name, nil
}

// errSecretNotRead: the watch of a kubeconfig Secret has not filled its
// cache yet; its first event reconciles the PolicySync again.
var errSecretNotRead = errors.New("the kubeconfig Secret is not read yet")

// readKubeconfig returns a kubeconfig from the watched Secret name, which
// it starts watching for the PolicySync user.
func (s *Syncer) readKubeconfig(user, name, key string) ([]byte, error) {
	w := s.secrets[name]
	if w == nil {
		w = s.startWatch(func(ctx context.Context) cache.SharedIndexInformer {
			lw := cache.NewListWatchFromClient(s.kube.CoreV1().RESTClient(), "secrets", s.opts.Namespace,
				fields.OneTermEqualSelector("metadata.name", name))
			return cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{})
		})
		s.secrets[name] = w
	}
	w.users[user] = true
	if key == "" {
		key = "kubeconfig"
	}
	if !w.informer.HasSynced() {
		if w.failure != nil {
			return nil, fmt.Errorf("reading the kubeconfig Secret %s/%s: %w", s.opts.Namespace, name, w.failure)
		}
		return nil, errSecretNotRead
	}
	item, ok, _ := w.informer.GetStore().GetByKey(s.opts.Namespace + "/" + name)
	if !ok {
		return nil, fmt.Errorf("the kubeconfig Secret %s/%s does not exist", s.opts.Namespace, name)
	}
	data, ok := item.(*corev1.Secret).Data[key]
	if !ok {
		return nil, fmt.Errorf("the kubeconfig Secret %s/%s has no key %q", s.opts.Namespace, name, key)
	}
	return data, nil
}

func (s *Syncer) releaseSecret(name, user string) {
	if w := s.secrets[name]; w != nil {
		s.release(w, user)
		if len(w.users) == 0 {
			delete(s.secrets, name)
		}
	}
}

// finalize deletes the copies of a deleted PolicySync from every cluster
// that answers, then lets it go. Copies in clusters that cannot be reached
// within the spoke timeout are left, and logged: a cluster that is gone
// for good must not keep the PolicySync forever.
func (s *Syncer) finalize(ctx context.Context, ps *syncv1alpha1.PolicySync) error {
	if !controllerutil.ContainsFinalizer(ps, finalizer) {
		return nil
	}
	s.mu.Lock()
	st := s.syncs[ps.Name]
	delete(s.syncs, ps.Name)
	s.mu.Unlock()
	if st != nil {
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
		s.mu.Lock()
		s.releaseAll(ps.Name, st)
		s.mu.Unlock()
	}
	controllerutil.RemoveFinalizer(ps, finalizer)
	return client.IgnoreNotFound(s.client.Update(ctx, ps))
}

// forget stops everything done for a PolicySync that no longer exists
// (deleted without its finalizer, or by a syncer that was not the leader).
func (s *Syncer) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[name]
	if st == nil {
		return
	}
	delete(s.syncs, name)
	for _, sp := range st.spokes {
		sp.stop()
	}
	s.releaseAll(name, st)
}

// releaseAll stops the status writer of the PolicySync name and releases
// its watches.
func (s *Syncer) releaseAll(name string, st *syncState) {
	st.stopStatus()
	for _, sp := range st.spokes {
		s.releaseSecret(sp.secret, name)
	}
	for gvr, w := range s.watches {
		if w.users[name] {
			s.release(w, name)
			if len(w.users) == 0 {
				delete(s.watches, gvr)
			}
		}
	}
}

// status builds a PolicySync's status from its validation and its
// workers' reports.
func (s *Syncer) status(ps *syncv1alpha1.PolicySync, st *syncState, buildErr error) syncv1alpha1.PolicySyncStatus {
	status := syncv1alpha1.PolicySyncStatus{
		ObservedGeneration: ps.Generation,
		Conditions:         slices.Clone(ps.Status.Conditions),
	}
	var invalid []string
	for _, r := range st.resources {
		g := syncv1alpha1.GVRStatus{Group: r.gvr.Group, Version: r.gvr.Version, Resource: r.gvr.Resource, Valid: r.err == nil}
		if r.err != nil {
			g.Message = r.err.Error()
			invalid = append(invalid, displayGVR(r.gvr))
		}
		status.PoliciesToSync = append(status.PoliciesToSync, g)
	}

	var keys []workerKey
	for _, c := range ps.Spec.Clusters {
		keys = append(keys, workerKey{cluster: c.Name})
	}
	if ps.Spec.Placement != nil {
		for _, cluster := range ps.Spec.Placement.ClusterNames {
			keys = append(keys, workerKey{ocm: true, cluster: cluster})
		}
	}
	var unreachable, conflicting, failing, pending []string
	for _, key := range keys {
		sp := st.spokes[key]
		if sp == nil {
			pending = append(pending, key.cluster)
			continue
		}
		cs, reported := sp.clusterStatus()
		if !reported {
			pending = append(pending, key.cluster)
			cs = syncv1alpha1.ClusterStatus{Name: key.cluster}
		}
		status.Clusters = append(status.Clusters, cs)
		switch {
		case !reported:
		case !cs.Reachable:
			unreachable = append(unreachable, key.cluster)
		default:
			if len(cs.Conflicts) > 0 {
				conflicting = append(conflicting, key.cluster)
			}
			// A message on a reachable cluster is a ManifestWork the hub
			// refused, which may hold no object (deleting it was refused).
			if cs.Message != "" || slices.ContainsFunc(cs.Objects, func(o syncv1alpha1.ObjectStatus) bool { return !o.Synced }) {
				failing = append(failing, key.cluster)
			}
		}
	}

	ready := metav1.Condition{Type: syncv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: syncv1alpha1.ReasonSynced,
		Message: "every object is synced to every cluster", ObservedGeneration: ps.Generation}
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
	meta.SetStatusCondition(&status.Conditions, ready)
	return status
}
