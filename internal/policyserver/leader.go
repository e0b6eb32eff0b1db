package policyserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/policyconfig"
	"github.com/wardenhq/warden/internal/policyfetch"
)

// Reasons of the Initialized condition the leader sets on a revision.
const (
	reasonInitialized       = "PolicyInitialized"
	reasonPullError         = "PullError"
	reasonVerificationError = "VerificationError"
	reasonCompileError      = "CompileError"
	reasonSettingsInvalid   = "SettingsInvalid"
)

// The leader Lease's timings: a leader that dies without releasing it is
// replaced within leaseDuration.
const (
	leaseDuration = 15 * time.Second
	leaseRenew    = 10 * time.Second
	leaseRetry    = 2 * time.Second
)

// retryFailedInit is how long the leader waits before it initialises again
// a revision that failed (the registry may be back).
const retryFailedInit = 30 * time.Second

// elect takes part, until ctx is done, in the election of the replica that
// initialises revisions: the holder of the Lease policy-server-<name>.
func (r *revisions) elect(ctx context.Context) {
	// The Lease is all the election touches: its typed client alone, not a
	// clientset that builds a client for every API group.
	leases, err := coordinationv1.NewForConfig(r.s.opts.Kube)
	if err != nil {
		r.logger.ErrorContext(ctx, "cannot take part in the leader election: this replica never initialises revisions", observability.KeyError, err)
		return
	}
	// The pod name says which replica leads; the suffix tells a restarted
	// process from its predecessor, whose lease must expire first.
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: r.ns, Name: "policy-server-" + r.name},
		Client:     leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: r.pod + "_" + hex.EncodeToString(suffix)},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   leaseDuration,
			RenewDeadline:   leaseRenew,
			RetryPeriod:     leaseRetry,
			ReleaseOnCancel: true,
			Name:            lock.LeaseMeta.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: r.lead,
				OnStoppedLeading: func() {
					r.logger.InfoContext(ctx, "no longer the leader: another replica initialises revisions")
				},
			},
		})
		if err != nil {
			r.logger.ErrorContext(ctx, "cannot take part in the leader election", observability.KeyError, err)
			return
		}
		le.Run(ctx)
	}
}

// lead initialises revisions while this replica holds the Lease (ctx), and
// removes from the shared cache the code no revision needs any more.
func (r *revisions) lead(ctx context.Context) {
	r.logger.InfoContext(ctx, "leading: this replica initialises PolicyRevisions", "lease", "policy-server-"+r.name)
	l := leaderState{failedAt: map[string]time.Time{}, digests: map[string][]string{}}
	ticker := time.NewTicker(revisionResync)
	defer ticker.Stop()
	for {
		r.initializeAll(ctx, &l)
		r.collectBlobs(ctx, &l)
		select {
		case <-ctx.Done():
			return
		case <-r.leaderWake:
		case <-ticker.C:
		}
	}
}

// leaderState is what a leader remembers while it leads.
type leaderState struct {
	failedAt map[string]time.Time // revision name -> its last failed initialisation
	// digests are the module digests of the revisions initialised here,
	// by revision name: the watch may not show their status yet.
	digests map[string][]string
}

// initializeAll initialises every enabled revision not Initialized yet,
// and those that failed more than retryFailedInit ago.
func (r *revisions) initializeAll(ctx context.Context, l *leaderState) {
	var list policiesv1.PolicyRevisionList
	if err := r.cache.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		r.logger.WarnContext(ctx, "cannot list PolicyRevisions", observability.KeyError, err)
		return
	}
	for i := range list.Items {
		rev := &list.Items[i]
		cond := policiesv1.FindPolicyStatusCondition(rev.Status.Conditions, policiesv1.PolicyInitialized, nil)
		if !rev.Spec.Enabled || cond != nil && cond.Status == metav1.ConditionTrue {
			continue
		}
		if at, ok := l.failedAt[rev.Name]; ok && time.Since(at) < retryFailedInit {
			continue
		}
		start := time.Now()
		result, digests := r.initialize(ctx, rev)
		if ctx.Err() != nil {
			return // leadership lost: the next leader starts over
		}
		if result.Status == metav1.ConditionTrue {
			delete(l.failedAt, rev.Name)
			l.digests[rev.Name] = digests
			r.logger.InfoContext(ctx, "PolicyRevision initialised", "revision", rev.Name, "duration", time.Since(start).Round(time.Millisecond))
		} else {
			l.failedAt[rev.Name] = time.Now()
			r.logger.WarnContext(ctx, "PolicyRevision failed to initialise", "revision", rev.Name, "reason", result.Reason, observability.KeyError, result.Message)
		}
		r.updateStatus(ctx, rev, string(result.Type), func(st *policiesv1.PolicyRevisionStatus) bool {
			changed := policiesv1.SetPolicyStatusCondition(&st.Conditions, result)
			if result.Status == metav1.ConditionTrue && !slices.Equal(st.ModuleDigests, digests) {
				st.ModuleDigests, changed = digests, true
			}
			return changed
		})
	}
}

// initialize pulls the revision's modules, verifies their signatures when
// the server verifies, compiles them and has the policy validate its
// settings, in an environment of its own that is thrown away: the
// condition it returns says whether every replica may load the revision,
// and the digests name the modules it pulled. The compiled code stays in
// the compilation cache, and in the shared cache when there is one.
func (r *revisions) initialize(ctx context.Context, rev *policiesv1.PolicyRevision) (policiesv1.PolicyStatusCondition, []string) {
	cond := policiesv1.PolicyStatusCondition{Type: policiesv1.PolicyInitialized, Status: metav1.ConditionTrue,
		Reason: reasonInitialized, Message: fmt.Sprintf("pulled, compiled and validated by %s", r.pod)}
	fail := func(reason string, err error) (policiesv1.PolicyStatusCondition, []string) {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, reason, err.Error()
		return cond, nil
	}
	p, err := rev.DecodePolicy()
	if err != nil {
		return fail(reasonSettingsInvalid, err)
	}
	config, err := policyconfig.Config(p, r.caps)
	if err != nil {
		return fail(reasonSettingsInvalid, err)
	}
	scratch, err := engine.NewEnvironment(r.s.engineOpts)
	if err != nil {
		return fail(reasonCompileError, err)
	}
	defer scratch.Close(context.WithoutCancel(ctx))
	for _, ch := range scratch.Apply(ctx, map[string]*engine.PolicyConfig{revisionID(p): config}) {
		if ch.Err != nil {
			return fail(initReason(ch.Err), ch.Err)
		}
	}
	var digests []string
	for _, st := range scratch.Status() {
		for _, d := range st.Digests {
			if strings.HasPrefix(d, "sha256:") && !slices.Contains(digests, d) {
				digests = append(digests, d)
			}
		}
	}
	return cond, digests
}

// collectBlobs removes from the shared cache the code of the modules no
// revision of the PolicyServer names. It does nothing while a revision
// initialised by an older Warden, which did not record its modules, is
// there: its code cannot be told from garbage.
func (r *revisions) collectBlobs(ctx context.Context, l *leaderState) {
	if r.s.shared == nil || ctx.Err() != nil {
		return
	}
	var list policiesv1.PolicyRevisionList
	if err := r.cache.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return
	}
	keep := map[string]bool{}
	exists := map[string]bool{}
	for _, rev := range list.Items {
		exists[rev.Name] = true
		digests := rev.Status.ModuleDigests
		if mine, ok := l.digests[rev.Name]; ok {
			digests = mine
		} else if len(digests) == 0 && policiesv1.IsPolicyStatusConditionTrue(rev.Status.Conditions, policiesv1.PolicyInitialized, nil) {
			r.logger.DebugContext(ctx, "not collecting the shared cache: a revision does not name its modules", "revision", rev.Name)
			return
		}
		for _, d := range digests {
			keep[strings.TrimPrefix(d, "sha256:")] = true
		}
	}
	maps.DeleteFunc(l.digests, func(name string, _ []string) bool { return !exists[name] })
	removed, err := r.s.shared.Collect(keep)
	if len(removed) > 0 {
		r.logger.InfoContext(ctx, "removed the compiled code of modules no revision names from the shared cache", "modules", removed)
	}
	if err != nil {
		r.logger.WarnContext(ctx, "cannot collect the shared cache", observability.KeyError, err)
	}
}

// initReason is the Initialized reason of a failed load.
func initReason(err error) string {
	var refused *policyfetch.VerificationError
	switch engine.FailedStage(err) {
	case engine.StageFetch:
		if errors.As(err, &refused) {
			return reasonVerificationError
		}
		return reasonPullError
	case engine.StageSettings:
		return reasonSettingsInvalid
	default:
		return reasonCompileError
	}
}
