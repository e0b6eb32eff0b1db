package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// The PolicyRevisions of RFC 000: one per generation of a policy, in the
// deployments namespace, which the policy servers load and report on. A
// policy's revisions are found by their spec.objectReference, not by owner
// references: an owner reference cannot cross namespaces (a revision of an
// AdmissionPolicy lives in the deployments namespace, not the policy's),
// nor point from a namespaced object to a cluster-scoped one (a
// ClusterAdmissionPolicy). So deleting a policy deletes its revisions
// explicitly, under the policy's finalizer.

// Annotations of a policy's webhook configuration saying which generation
// it calls, and since when: the generation it called before stays enabled
// for drainDelay after the switch, for the requests the API server sent
// before it saw the switch.
const (
	servedGenerationAnnotation   = "warden.io/served-generation"
	previousGenerationAnnotation = "warden.io/previous-generation"
	switchedAtAnnotation         = "warden.io/switched-at"
)

// drainDelay is how long the generation a webhook called before a switch
// stays served.
const drainDelay = 10 * time.Second

// Reasons of the conditions the controller writes.
const (
	reasonScheduled = "PolicyScheduled"
	reasonPending   = "PolicyPending"
)

// revisionsOf returns the revisions of p, oldest generation first.
func (r *PolicyReconciler) revisionsOf(ctx context.Context, p policiesv1.Policy) ([]*policiesv1.PolicyRevision, error) {
	var list policiesv1.PolicyRevisionList
	if err := r.Client.List(ctx, &list, client.InNamespace(r.Namespace)); err != nil {
		return nil, fmt.Errorf("listing PolicyRevisions: %w", err)
	}
	ref := policiesv1.NewPolicyReference(p)
	var out []*policiesv1.PolicyRevision
	for i := range list.Items {
		got := list.Items[i].Spec.ObjectReference
		if got.Kind == ref.Kind && got.Name == ref.Name && got.Namespace == ref.Namespace {
			out = append(out, &list.Items[i])
		}
	}
	slices.SortFunc(out, func(a, b *policiesv1.PolicyRevision) int {
		return int(a.Spec.PolicyGeneration - b.Spec.PolicyGeneration)
	})
	return out, nil
}

// revisionOf returns the revision of generation g among revs, or nil.
func revisionOf(revs []*policiesv1.PolicyRevision, g int64) *policiesv1.PolicyRevision {
	for _, rev := range revs {
		if rev.Spec.PolicyGeneration == g {
			return rev
		}
	}
	return nil
}

// revisionName is the name of the revision of p at its generation: its
// unique name and the generation, shortened with a hash when too long
// for an object name.
func revisionName(p policiesv1.Policy) string {
	name := fmt.Sprintf("%s-%d", p.GetUniqueName(), p.GetGeneration())
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:5])
	return name[:validation.DNS1123SubdomainMaxLength-len(suffix)] + suffix
}

// ensureRevision returns the revision of p's current generation, creating
// it (enabled, Scheduled) when there is none.
func (r *PolicyReconciler) ensureRevision(ctx context.Context, p policiesv1.Policy, revs []*policiesv1.PolicyRevision) (*policiesv1.PolicyRevision, error) {
	if rev := revisionOf(revs, p.GetGeneration()); rev != nil {
		return rev, nil
	}
	data, err := policiesv1.NewPolicyRevisionData(p)
	if err != nil {
		return nil, err
	}
	rev := &policiesv1.PolicyRevision{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: r.Namespace,
			Name:      revisionName(p),
			Labels:    map[string]string{policiesv1.PolicyServerLabel: p.GetPolicyServer()},
		},
		Spec: policiesv1.PolicyRevisionSpec{
			ObjectReference:  policiesv1.NewPolicyReference(p),
			PolicyGeneration: p.GetGeneration(),
			Enabled:          true,
			Data:             data,
		},
	}
	switch err := r.Client.Create(ctx, rev); {
	case apierrors.IsAlreadyExists(err):
		// Created by an earlier reconcile the cache has not seen yet.
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(rev), rev); err != nil {
			return nil, err
		}
		return rev, nil
	case err != nil:
		return nil, fmt.Errorf("creating PolicyRevision %s: %w", rev.Name, err)
	}
	policiesv1.SetPolicyStatusCondition(&rev.Status.Conditions, policiesv1.PolicyStatusCondition{
		Type: policiesv1.PolicyScheduled, Status: metav1.ConditionTrue, Reason: reasonScheduled,
		Message: fmt.Sprintf("generation %d is to be served by PolicyServer %q", p.GetGeneration(), p.GetPolicyServer()),
	})
	if err := r.Client.Status().Update(ctx, rev); err != nil {
		return nil, fmt.Errorf("writing the status of PolicyRevision %s: %w", rev.Name, err)
	}
	return rev, nil
}

// readyOnAll reports whether every replica 0..replicas-1 reports the
// revision Ready.
func readyOnAll(rev *policiesv1.PolicyRevision, replicas int32) bool {
	if rev == nil || replicas < 1 {
		return false
	}
	for i := range replicas {
		if !policiesv1.IsPolicyStatusConditionTrue(rev.Status.Conditions, policiesv1.PolicyReady, &i) {
			return false
		}
	}
	return true
}

// pruneReplicas removes from the revisions the Ready conditions of
// replicas the PolicyServer no longer has (scale down).
func (r *PolicyReconciler) pruneReplicas(ctx context.Context, revs []*policiesv1.PolicyRevision, replicas int32) error {
	for _, rev := range revs {
		kept := slices.DeleteFunc(slices.Clone(rev.Status.Conditions), func(c policiesv1.PolicyStatusCondition) bool {
			return c.Replica != nil && *c.Replica >= replicas
		})
		if len(kept) == len(rev.Status.Conditions) {
			continue
		}
		rev.Status.Conditions = kept
		if err := r.Client.Status().Update(ctx, rev); err != nil {
			return fmt.Errorf("removing the conditions of removed replicas from PolicyRevision %s: %w", rev.Name, err)
		}
	}
	return nil
}

// setEnabled enables the revisions of the generations in enabled and
// disables the others.
func (r *PolicyReconciler) setEnabled(ctx context.Context, revs []*policiesv1.PolicyRevision, enabled map[int64]bool) error {
	for _, rev := range revs {
		want := enabled[rev.Spec.PolicyGeneration]
		if rev.Spec.Enabled == want {
			continue
		}
		patch := client.MergeFrom(rev.DeepCopy())
		rev.Spec.Enabled = want
		if err := r.Client.Patch(ctx, rev, patch); err != nil {
			return fmt.Errorf("setting enabled=%t on PolicyRevision %s: %w", want, rev.Name, err)
		}
	}
	return nil
}

// collectRevisions deletes the oldest disabled revisions beyond
// RevisionHistoryLimit.
func (r *PolicyReconciler) collectRevisions(ctx context.Context, revs []*policiesv1.PolicyRevision) error {
	var disabled []*policiesv1.PolicyRevision
	for _, rev := range revs {
		if !rev.Spec.Enabled {
			disabled = append(disabled, rev)
		}
	}
	for len(disabled) > r.RevisionHistoryLimit {
		if err := r.Client.Delete(ctx, disabled[0]); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting PolicyRevision %s: %w", disabled[0].Name, err)
		}
		disabled = disabled[1:]
	}
	return nil
}

// deleteRevisions deletes every revision of p.
func (r *PolicyReconciler) deleteRevisions(ctx context.Context, p policiesv1.Policy) error {
	revs, err := r.revisionsOf(ctx, p)
	if err != nil {
		return err
	}
	for _, rev := range revs {
		if err := r.Client.Delete(ctx, rev); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting PolicyRevision %s: %w", rev.Name, err)
		}
	}
	return nil
}

// rollback handles RollbackAnnotation: it copies the spec of the named
// generation's revision into p and removes the annotation, in one update
// (which makes a new generation). It reports whether it updated p. A
// generation without a revision is logged and its annotation removed.
func (r *PolicyReconciler) rollback(ctx context.Context, p policiesv1.Policy) (bool, error) {
	value, ok := p.GetAnnotations()[policiesv1.RollbackAnnotation]
	if !ok {
		return false, nil
	}
	annotations := p.GetAnnotations()
	delete(annotations, policiesv1.RollbackAnnotation)
	p.SetAnnotations(annotations)
	g, err := strconv.ParseInt(value, 10, 64)
	var rev *policiesv1.PolicyRevision
	if err == nil {
		revs, err := r.revisionsOf(ctx, p)
		if err != nil {
			return false, err
		}
		rev = revisionOf(revs, g)
	}
	refused := ""
	switch {
	case rev == nil:
		refused = fmt.Sprintf("rollback to generation %q refused: the policy has no revision of that generation (the oldest ones are collected beyond --revision-history-limit)", value)
		r.Log.Info(refused, "policy", p.GetUniqueName())
	case g == p.GetGeneration():
		// Already there: only the annotation goes.
	default:
		if err := rev.ApplyTo(p); err != nil {
			return false, fmt.Errorf("rolling back to generation %d: %w", g, err)
		}
	}
	if err := r.Client.Update(ctx, p); err != nil {
		return false, fmt.Errorf("rolling back to generation %s: %w", value, err)
	}
	if refused != "" && r.Events != nil {
		r.Events.Eventf(p, nil, corev1.EventTypeWarning, "RollbackRefused", "Rollback", "%s", refused)
	}
	return true, nil
}

// servedGeneration reads from a webhook configuration's annotations the
// generation it calls, the one it called before, and when it switched.
func servedGeneration(annotations map[string]string) (served, previous int64, switchedAt time.Time) {
	served, _ = strconv.ParseInt(annotations[servedGenerationAnnotation], 10, 64)
	previous, _ = strconv.ParseInt(annotations[previousGenerationAnnotation], 10, 64)
	switchedAt, _ = time.Parse(time.RFC3339, annotations[switchedAtAnnotation])
	return served, previous, switchedAt
}

// propagateConditions copies the current revision's conditions (Scheduled,
// Initialized, and Ready per replica) onto the policy, replicas kept; a
// replica that has not reported yet is Ready Unknown.
func propagateConditions(p policiesv1.Policy, rev *policiesv1.PolicyRevision, replicas int32) {
	conds := &p.GetStatus().Conditions
	*conds = slices.DeleteFunc(*conds, func(c policiesv1.PolicyStatusCondition) bool {
		return c.Type == policiesv1.PolicyReady && c.Replica != nil && *c.Replica >= replicas
	})
	for _, t := range []policiesv1.PolicyConditionType{policiesv1.PolicyScheduled, policiesv1.PolicyInitialized} {
		if c := policiesv1.FindPolicyStatusCondition(rev.Status.Conditions, t, nil); c != nil {
			cc := *c
			cc.ObservedGeneration = p.GetGeneration()
			policiesv1.SetPolicyStatusCondition(conds, cc)
		} else {
			policiesv1.RemovePolicyStatusCondition(conds, t, nil)
		}
	}
	for i := range replicas {
		c := policiesv1.FindPolicyStatusCondition(rev.Status.Conditions, policiesv1.PolicyReady, &i)
		cc := policiesv1.PolicyStatusCondition{Type: policiesv1.PolicyReady, Status: metav1.ConditionUnknown, Replica: &i,
			Reason: reasonPending, Message: fmt.Sprintf("replica %d has not loaded generation %d yet", i, rev.Spec.PolicyGeneration)}
		if c != nil {
			cc = *c
		}
		cc.ObservedGeneration = p.GetGeneration()
		policiesv1.SetPolicyStatusCondition(conds, cc)
	}
}
