package policyserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/policyconfig"
)

// Reasons of the Ready condition a replica reports on a PolicyRevision.
const (
	reasonLoaded    = "PolicyLoaded"
	reasonLoadError = "LoadError"
)

// revisionResync is how often the replica looks at its revisions without
// being told of a change, and retryFailedLoad how long a revision that
// failed to load here waits before it is tried again.
const (
	revisionResync  = 10 * time.Second
	retryFailedLoad = 30 * time.Second
)

// revisions is the replica side of cluster mode (RFC 000): it serves the
// enabled, Initialized PolicyRevisions of its PolicyServer through the
// server's environment, each generation of a policy under
// <unique name>/<generation> and the newest loaded one under
// <unique name>, and reports on each revision a Ready condition carrying
// its replica ordinal. The leader side, which initialises revisions, is in
// leader.go.
type revisions struct {
	s       *Server
	logger  *slog.Logger
	cache   cache.Cache   // the PolicyServer's revisions, watched
	client  client.Client // reads and writes the API server directly
	ns      string
	name    string // of the PolicyServer
	pod     string
	replica int32
	caps    []string
	wake    chan struct{} // a revision changed: sync
	// leaderWake tells the leader loop of a change, apart from wake so
	// that neither loop takes the other's signal.
	leaderWake chan struct{}
	stop       context.CancelFunc

	mu      sync.Mutex           // serialises sync
	failed  map[string]time.Time // revision ids that failed to load here, and when
	aliases map[string]string
	// pending are the reports of start, made by run: a replica says it
	// serves a revision only once it does.
	pending []readyReport
	// served are the generations apply left served, for the metrics
	// (generations.go), which must not wait for a sync.
	served atomic.Pointer[[]observability.PolicyGeneration]
}

// newRevisions connects to the API server and waits until the revisions
// of the PolicyServer are listed.
func newRevisions(ctx context.Context, s *Server) (*revisions, error) {
	opts := s.opts
	ordinal, err := replicaOrdinal(opts.PodName)
	if err != nil {
		return nil, err
	}
	if opts.Kube == nil {
		return nil, errors.New("cluster mode needs a Kubernetes configuration (KUBECONFIG, ~/.kube/config or in-cluster)")
	}
	scheme := runtime.NewScheme()
	if err := policiesv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	selector := labels.SelectorFromSet(labels.Set{policiesv1.PolicyServerLabel: opts.PolicyServerName})
	c, err := cache.New(opts.Kube, cache.Options{
		Scheme:            scheme,
		DefaultNamespaces: map[string]cache.Config{opts.PodNamespace: {}},
		ByObject:          map[client.Object]cache.ByObject{&policiesv1.PolicyRevision{}: {Label: selector}},
	})
	if err != nil {
		return nil, fmt.Errorf("watching PolicyRevisions: %w", err)
	}
	direct, err := client.New(opts.Kube, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	r := &revisions{
		s: s, logger: s.logger, cache: c, client: direct,
		ns: opts.PodNamespace, name: opts.PolicyServerName, pod: opts.PodName, replica: ordinal,
		caps: opts.NamespacedCapabilities, wake: make(chan struct{}, 1), leaderWake: make(chan struct{}, 1),
		failed: map[string]time.Time{}, aliases: map[string]string{},
	}
	if err := s.metrics.ObservePolicyGenerations(r.generations); err != nil {
		return nil, err
	}
	informer, err := c.GetInformer(ctx, &policiesv1.PolicyRevision{})
	if err != nil {
		return nil, fmt.Errorf("watching PolicyRevisions: %w", err)
	}
	poke := func(any) { r.poke() }
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(any, any) { r.poke() }, DeleteFunc: poke,
	}); err != nil {
		return nil, err
	}
	cacheCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = stop
	go func() {
		if err := c.Start(cacheCtx); err != nil {
			r.logger.Error("watching PolicyRevisions stopped", observability.KeyError, err)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		stop()
		return nil, fmt.Errorf("listing the PolicyRevisions of PolicyServer %q in %s: %w", r.name, r.ns, context.Cause(ctx))
	}
	return r, nil
}

// replicaOrdinal is the ordinal a StatefulSet gives a pod: the number its
// name ends with.
func replicaOrdinal(pod string) (int32, error) {
	i := strings.LastIndexByte(pod, '-')
	n, err := strconv.ParseUint(pod[i+1:], 10, 31)
	if i < 0 || err != nil {
		return 0, fmt.Errorf("pod name %q does not end in a replica ordinal (-0, -1, ...)", pod)
	}
	return int32(n), nil
}

func (r *revisions) poke() {
	for _, ch := range []chan struct{}{r.wake, r.leaderWake} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// revisionID is the id a generation of a policy is served under.
func revisionID(p policiesv1.Policy) string {
	return p.GetUniqueName() + "/" + strconv.FormatInt(p.GetGeneration(), 10)
}

// servable is one enabled, Initialized revision, decoded.
type servable struct {
	rev    *policiesv1.PolicyRevision
	id     string
	unique string
	gen    int64
	config *engine.PolicyConfig
	err    error // why it cannot be decoded
}

// servables returns the enabled, Initialized revisions of the PolicyServer.
func (r *revisions) servables(ctx context.Context) ([]servable, error) {
	var list policiesv1.PolicyRevisionList
	if err := r.cache.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return nil, err
	}
	return servablesOf(list.Items, r.caps), nil
}

// servablesOf returns the enabled, Initialized revisions of items, decoded
// and converted to engine configurations with the namespaced policies'
// capabilities caps.
func servablesOf(items []policiesv1.PolicyRevision, caps []string) []servable {
	var out []servable
	for i := range items {
		rev := &items[i]
		if !rev.Spec.Enabled || !policiesv1.IsPolicyStatusConditionTrue(rev.Status.Conditions, policiesv1.PolicyInitialized, nil) {
			continue
		}
		sv := servable{rev: rev}
		p, err := rev.DecodePolicy()
		if err == nil {
			sv.id, sv.unique, sv.gen = revisionID(p), p.GetUniqueName(), p.GetGeneration()
			sv.config, err = policyconfig.Config(p, caps)
			if err == nil {
				sv.config.Name = sv.unique // every generation's metrics under one name
			}
		}
		sv.err = err
		out = append(out, sv)
	}
	return out
}

// newestAliases maps each policy's unique name to the id of its newest
// generation among list that loaded says is served.
func newestAliases(list []servable, loaded func(id string) bool) map[string]string {
	newest := map[string]servable{}
	for _, sv := range list {
		if sv.err != nil || !loaded(sv.id) {
			continue
		}
		if cur, ok := newest[sv.unique]; !ok || sv.gen > cur.gen {
			newest[sv.unique] = sv
		}
	}
	aliases := make(map[string]string, len(newest))
	for unique, sv := range newest {
		aliases[unique] = sv.id
	}
	return aliases
}

// run keeps the environment in step with the revisions until ctx is done,
// and takes part in the election of the replica that initialises them.
func (r *revisions) run(ctx context.Context) {
	// run returns once the election has given up the Lease: a replica
	// that exits holding it would keep a new leader, and every revision
	// created meanwhile, waiting leaseDuration.
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		r.elect(ctx)
	}()
	defer func() { <-elected }()
	r.mu.Lock()
	for _, rep := range r.pending {
		r.report(ctx, rep.rev, rep.cond)
	}
	r.pending = nil
	r.mu.Unlock()
	ticker := time.NewTicker(revisionResync)
	defer ticker.Stop()
	for {
		r.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-ticker.C:
		}
	}
}

// sync loads the servable revisions that are new, drops those no longer
// enabled, and reports each servable revision's state on this replica.
func (r *revisions) sync(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	list, err := r.servables(ctx)
	if err != nil {
		r.logger.WarnContext(ctx, "cannot list PolicyRevisions", observability.KeyError, err)
		return
	}
	for _, rep := range r.apply(ctx, list, false) {
		r.report(ctx, rep.rev, rep.cond)
	}
}

// start is the first sync, which the replica makes before it serves: it
// loads every servable revision it can, and keeps the Ready condition of
// each for run to report once the replica serves. A revision that cannot
// be loaded (its module cannot be fetched, verified or compiled, or the
// revision cannot be decoded) is reported LoadError and not served, and
// is tried again after retryFailedLoad, as after a change: it never keeps
// the replica from starting and serving the others (RFC 000: a policy that
// cannot load is reported, the others are served). It returns how many
// revisions are served and how many failed; only a failure to list the
// revisions is an error.
func (r *revisions) start(ctx context.Context) (loaded, failed int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	list, err := r.servables(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("listing the PolicyRevisions of PolicyServer %q: %w", r.name, err)
	}
	r.pending = r.apply(ctx, list, true)
	for _, rep := range r.pending {
		if rep.cond.Status == metav1.ConditionTrue {
			loaded++
		} else {
			failed++
		}
	}
	return loaded, failed, nil
}

// readyReport is the Ready condition this replica reports on a revision.
type readyReport struct {
	rev  *policiesv1.PolicyRevision
	cond policiesv1.PolicyStatusCondition
}

// apply makes the environment serve the revisions of list that can be
// served: it loads those that are new (not those that failed here less
// than retryFailedLoad ago), drops those no longer listed, points each
// policy's unique name at its newest loaded generation, and returns the
// Ready condition of every revision whose state it learnt. The failures
// are logged and counted as reloads; at start (the first apply) the
// successes are not, since nothing changed. The caller holds r.mu.
func (r *revisions) apply(ctx context.Context, list []servable, start bool) []readyReport {
	desired := map[string]*engine.PolicyConfig{}
	now := time.Now()
	for _, sv := range list {
		if sv.err != nil {
			if start {
				r.logger.ErrorContext(ctx, "PolicyRevision cannot be decoded: it is not served", "revision", sv.rev.Name, observability.KeyError, sv.err)
			}
			continue
		}
		// A revision's spec never changes, so one that failed here (and
		// is not served) is only worth trying again after a while.
		if at, failed := r.failed[sv.id]; failed && now.Sub(at) < retryFailedLoad {
			continue
		}
		delete(r.failed, sv.id)
		desired[sv.id] = sv.config
	}
	r.s.startReflectors(ctx, desired)
	loadErrs := map[string]error{}
	changes := r.s.env.Apply(ctx, desired)
	for _, ch := range changes {
		if !start || ch.Err != nil {
			r.s.recordReload(ctx, ch)
		}
		if ch.Err != nil {
			r.failed[ch.ID] = now
			loadErrs[ch.ID] = ch.Err
		}
	}
	r.s.retainReflectors(ctx)
	if !start && loadedModules(changes) {
		// As after a reload of policies.yml (Server.Reload); the start
		// gives its garbage back in New.
		debug.FreeOSMemory()
	}
	served := func(id string) bool { _, ok := desired[id]; return ok && loadErrs[id] == nil }
	aliases := newestAliases(list, served)
	generations := servedGenerations(list, served)
	r.served.Store(&generations)
	if !maps.Equal(aliases, r.aliases) {
		r.s.env.SetAliases(aliases)
		r.aliases = aliases
	}
	var reports []readyReport
	for _, sv := range list {
		cond := policiesv1.PolicyStatusCondition{Type: policiesv1.PolicyReady, Status: metav1.ConditionTrue, Reason: reasonLoaded,
			Message: fmt.Sprintf("replica %d serves the policy", r.replica)}
		err := sv.err // an undecodable revision is never in desired
		if err == nil {
			err = loadErrs[sv.id]
		}
		switch {
		case err != nil:
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, reasonLoadError, err.Error()
		case desired[sv.id] == nil:
			continue // failed earlier and not retried yet: the report stands
		}
		reports = append(reports, readyReport{rev: sv.rev, cond: cond})
	}
	return reports
}

// report sets cond, as this replica's, on the revision, unless the revision
// already says so.
func (r *revisions) report(ctx context.Context, rev *policiesv1.PolicyRevision, cond policiesv1.PolicyStatusCondition) {
	replica := r.replica
	cond.Replica = &replica
	r.setCondition(ctx, rev, cond)
}

// setCondition writes cond on the revision's status, unless the revision
// already says so.
func (r *revisions) setCondition(ctx context.Context, rev *policiesv1.PolicyRevision, cond policiesv1.PolicyStatusCondition) {
	if cur := policiesv1.FindPolicyStatusCondition(rev.Status.Conditions, cond.Type, cond.Replica); cur != nil &&
		cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
		return
	}
	r.updateStatus(ctx, rev, string(cond.Type), func(st *policiesv1.PolicyRevisionStatus) bool {
		return policiesv1.SetPolicyStatusCondition(&st.Conditions, cond)
	})
}

// updateStatus applies change to the revision's status as the API server
// has it, read again on a conflict, and writes it when change says it
// changed something. what names the change in the log.
func (r *revisions) updateStatus(ctx context.Context, rev *policiesv1.PolicyRevision, what string, change func(*policiesv1.PolicyRevisionStatus) bool) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fresh policiesv1.PolicyRevision
		if err := r.client.Get(ctx, client.ObjectKeyFromObject(rev), &fresh); err != nil {
			return err
		}
		if !change(&fresh.Status) {
			return nil
		}
		return r.client.Status().Update(ctx, &fresh)
	})
	if err != nil && ctx.Err() == nil {
		r.logger.WarnContext(ctx, "cannot report on a PolicyRevision", "revision", rev.Name,
			"condition", what, observability.KeyError, err)
	}
}

// close stops watching.
func (r *revisions) close() {
	if r.stop != nil {
		r.stop()
	}
}
