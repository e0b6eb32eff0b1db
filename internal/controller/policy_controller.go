package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// pendingRequeue is how often a policy waiting for its policy server is
// checked again, besides the watches that wake it.
const pendingRequeue = 5 * time.Second

// PolicyReconciler reconciles the policies of one kind: it schedules each
// onto its PolicyServer, and once every replica of that policy server
// serves the policy, points a webhook configuration at it.
type PolicyReconciler struct {
	Client client.Client
	// Kind is the policy kind reconciled (policiesv1.KindClusterAdmissionPolicy, ...).
	Kind string
	// Namespace is where policy servers run (--deployments-namespace).
	Namespace string
	// PolicyServerURL, for development, makes webhooks call this URL
	// instead of the policy server's Service.
	PolicyServerURL string
	// RevisionHistoryLimit is how many disabled PolicyRevisions of a
	// policy are kept for rollback (--revision-history-limit).
	RevisionHistoryLimit int
	Log                  logr.Logger
	// Events records what a user asked for and did not get (a refused
	// rollback) on the policy; nil records nothing.
	Events events.EventRecorder
}

// Reconcile implements reconcile.Reconciler.
func (r *PolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := policiesv1.NewPolicy(r.Kind)
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, r.reconcileDeletion(ctx, p)
	}
	if controllerutil.AddFinalizer(p, policiesv1.Finalizer) {
		if err := r.Client.Update(ctx, p); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	if rolledBack, err := r.rollback(ctx, p); rolledBack || err != nil {
		return ctrl.Result{}, err // the update brings the policy back
	}
	before := p.GetStatus().DeepCopy()
	result, err := r.schedule(ctx, p)
	if !equalPolicyStatus(before, p.GetStatus()) {
		if serr := r.Client.Status().Update(ctx, p); serr != nil && err == nil {
			err = fmt.Errorf("writing the status: %w", serr)
		}
	}
	if err != nil {
		result = ctrl.Result{} // the error requeues
	}
	return result, err
}

// statefulSetOf is the StatefulSet of the PolicyServer, nil while there is
// none.
func (r *PolicyReconciler) statefulSetOf(ctx context.Context, ps *policiesv1.PolicyServer) (*appsv1.StatefulSet, error) {
	var sts appsv1.StatefulSet
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: ps.NameWithPrefix()}, &sts)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the StatefulSet of PolicyServer %q: %w", ps.Name, err)
	}
	return &sts, nil
}

// replicasServing is how many replicas of a PolicyServer that wants want
// may answer its policies' webhooks: those it asks for, and the extra one
// its StatefulSet (nil if there is none yet) runs while a lone replica's
// template changes (rolloutReplicas). A generation served before every one
// of them loads it would be answered "not found" by the one that has not.
func replicasServing(want int32, sts *appsv1.StatefulSet) int32 {
	if sts == nil || sts.Spec.Replicas == nil {
		return want
	}
	return max(want, *sts.Spec.Replicas)
}

// awaitingFirstReadyPod reports whether no pod of the StatefulSet is ready
// yet. A replica reports a revision Ready once it has loaded it, which can
// be before the kubelet's readiness probe has put its pod behind the
// Service: a policy's first webhook, which fails closed, written then made
// the API server refuse what it matched ("no endpoints available for
// service") for the second or so after `helm install`. A StatefulSet whose
// status no controller has written (a test cluster without one) is not
// waited for, as in rolloutReplicas.
func awaitingFirstReadyPod(sts *appsv1.StatefulSet) bool {
	return sts != nil && sts.Status.ObservedGeneration > 0 && sts.Status.ReadyReplicas == 0
}

// schedule keeps a PolicyRevision of the policy's current generation,
// points its webhook at the newest generation that every replica of its
// PolicyServer serves (decideRouting, RFC 000), and sets the policy's
// status in memory: decidePolicyStatus says what it reports once the
// policy has a PolicyServer.
func (r *PolicyReconciler) schedule(ctx context.Context, p policiesv1.Policy) (ctrl.Result, error) {
	wasActive := p.GetStatus().PolicyStatus == policiesv1.PolicyStatusActive
	if p.GetPolicyServer() == "" {
		p.SetStatus(policiesv1.PolicyStatusUnscheduled)
		r.setActive(p, false, "NoPolicyServer", "the policy names no PolicyServer")
		return ctrl.Result{}, r.deleteWebhooks(ctx, p)
	}
	var ps policiesv1.PolicyServer
	err := r.Client.Get(ctx, types.NamespacedName{Name: p.GetPolicyServer()}, &ps)
	if apierrors.IsNotFound(err) || (err == nil && !ps.DeletionTimestamp.IsZero()) {
		p.SetStatus(policiesv1.PolicyStatusScheduled)
		r.setActive(p, false, "PolicyServerMissing", fmt.Sprintf("PolicyServer %q does not exist", p.GetPolicyServer()))
		return ctrl.Result{}, r.deleteWebhooks(ctx, p)
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading the PolicyServer: %w", err)
	}

	revs, err := r.revisionsOf(ctx, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	current, err := r.ensureRevision(ctx, p, revs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if revisionOf(revs, current.Spec.PolicyGeneration) == nil {
		revs = append(revs, current)
	}
	sts, err := r.statefulSetOf(ctx, &ps)
	if err != nil {
		return ctrl.Result{}, err
	}
	replicas := replicasServing(ps.Spec.Replicas, sts)
	if err := r.pruneReplicas(ctx, revs, replicas); err != nil {
		return ctrl.Result{}, err
	}
	propagateConditions(p, current, replicas)

	hook, err := r.existingWebhook(ctx, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	facts := routingFacts{
		current:          current.Spec.PolicyGeneration,
		currentReady:     readyOnAll(current, replicas),
		revisions:        map[int64]bool{},
		awaitingFirstPod: r.PolicyServerURL == "" && awaitingFirstReadyPod(sts),
	}
	facts.served, facts.previous, facts.switchedAt = servedGeneration(hook.GetAnnotations())
	for _, rev := range revs {
		facts.revisions[rev.Spec.PolicyGeneration] = rev.Spec.Enabled
	}
	route := decideRouting(facts, time.Now())
	if err := r.setEnabled(ctx, revs, route.enabled); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.collectRevisions(ctx, revs); err != nil {
		return ctrl.Result{}, err
	}

	sf := statusFacts{
		route:        route,
		served:       facts.served,
		current:      current.Spec.PolicyGeneration,
		replicas:     replicas,
		policyServer: ps.Name,
		wasActive:    wasActive,
		hasWebhook:   hook.GetName() != "",
	}
	if route.target == 0 {
		err = r.deleteWebhooks(ctx, p)
	} else {
		sf.webhook, sf.mode, err = r.writeWebhook(ctx, &ps, revs, route)
		if sf.webhook == webhookRefused {
			sf.writeErr = err
		}
	}
	decided := decidePolicyStatus(sf)
	r.setPolicyStatus(p, decided)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: decided.requeueAfter}, nil
}

// writeWebhook points the webhook configuration of the policy at
// route.target, a generation among revs, through the Service of ps, and
// says what became of it: webhookUntouched while there is no CA (without
// an error: the CA's creation wakes the reconciler) or on an error before
// the write, webhookRefused with the API server's error, or
// webhookWritten with the mode of the policy served.
func (r *PolicyReconciler) writeWebhook(ctx context.Context, ps *policiesv1.PolicyServer, revs []*policiesv1.PolicyRevision, route routing) (webhookWrite, policiesv1.PolicyModeStatus, error) {
	bundle, err := caBundle(ctx, r.Client, r.Namespace)
	if errors.Is(err, errNoCA) {
		return webhookUntouched, "", nil
	}
	if err != nil {
		return webhookUntouched, "", err
	}
	servedPolicy, err := revisionOf(revs, route.target).DecodePolicy()
	if err != nil {
		return webhookUntouched, "", err
	}
	t := webhookTarget{namespace: r.Namespace, service: ps.NameWithPrefix(), caBundle: bundle, url: r.PolicyServerURL, generation: route.target}
	annotations := map[string]string{
		servedGenerationAnnotation:   strconv.FormatInt(route.target, 10),
		previousGenerationAnnotation: strconv.FormatInt(route.previous, 10),
		switchedAtAnnotation:         route.switchedAt.UTC().Format(time.RFC3339),
	}
	if err := r.applyWebhook(ctx, servedPolicy, t, annotations); err != nil {
		return webhookRefused, "", err
	}
	return webhookWritten, policiesv1.PolicyModeStatus(servedPolicy.GetPolicyMode()), nil
}

// setPolicyStatus writes the decision s into p's status, in memory.
func (r *PolicyReconciler) setPolicyStatus(p policiesv1.Policy, s policyStatus) {
	r.setCondition(p, policiesv1.PolicyServerConfigurationUpToDate, s.upToDate,
		map[bool]string{true: "ConfigurationVersionMatch", false: "ConfigurationVersionMismatch"}[s.upToDate], "")
	r.setCondition(p, policiesv1.PolicyUniquelyReachable, s.upToDate,
		map[bool]string{true: "LatestReplicaSetIsUniquelyReachable", false: "LatestReplicaSetIsNotUniquelyReachable"}[s.upToDate], s.why)
	if s.mode != "" {
		p.SetPolicyModeStatus(s.mode)
	}
	if s.status != "" {
		p.SetStatus(s.status)
		r.setActive(p, s.active.ok, s.active.reason, s.active.message)
	}
}

// existingWebhook returns the webhook configuration of p, of either kind,
// or an empty object when it has none.
func (r *PolicyReconciler) existingWebhook(ctx context.Context, p policiesv1.Policy) (client.Object, error) {
	key := client.ObjectKey{Name: p.GetUniqueName()}
	for _, o := range []client.Object{
		&admissionregistrationv1.ValidatingWebhookConfiguration{},
		&admissionregistrationv1.MutatingWebhookConfiguration{},
	} {
		err := r.Client.Get(ctx, key, o)
		if err == nil {
			return o, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the webhook configuration: %w", err)
		}
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{}, nil
}

// applyWebhook writes the webhook configuration of p, of the kind p needs,
// and removes one of the other kind.
func (r *PolicyReconciler) applyWebhook(ctx context.Context, p policiesv1.Policy, t webhookTarget, annotations map[string]string) error {
	name := p.GetUniqueName()
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	var want, other client.Object
	var mutate controllerutil.MutateFn
	if p.IsMutating() {
		want, other = mutating, validating
		mutate = func() error {
			desiredMutatingWebhook(mutating, p, t)
			maps.Copy(mutating.Annotations, annotations)
			return nil
		}
	} else {
		want, other = validating, mutating
		mutate = func() error {
			desiredValidatingWebhook(validating, p, t)
			maps.Copy(validating.Annotations, annotations)
			return nil
		}
	}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, want, mutate); err != nil {
		return fmt.Errorf("writing the webhook configuration: %w", err)
	}
	if err := r.Client.Delete(ctx, other); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the webhook configuration: %w", err)
	}
	return nil
}

// deleteWebhooks removes the webhook configurations of p.
func (r *PolicyReconciler) deleteWebhooks(ctx context.Context, p policiesv1.Policy) error {
	meta := metav1.ObjectMeta{Name: p.GetUniqueName()}
	for _, o := range []client.Object{
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: meta},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: meta},
	} {
		if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the webhook configuration: %w", err)
		}
	}
	return nil
}

func (r *PolicyReconciler) reconcileDeletion(ctx context.Context, p policiesv1.Policy) error {
	if err := r.deleteWebhooks(ctx, p); err != nil {
		return err
	}
	if err := r.deleteRevisions(ctx, p); err != nil {
		return err
	}
	removed := controllerutil.RemoveFinalizer(p, policiesv1.Finalizer)
	removed = controllerutil.RemoveFinalizer(p, policiesv1.LegacyFinalizer) || removed
	if removed {
		if err := r.Client.Update(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing the finalizer: %w", err)
		}
	}
	return nil
}

func (r *PolicyReconciler) setActive(p policiesv1.Policy, active bool, reason, message string) {
	r.setCondition(p, policiesv1.PolicyActive, active, reason, message)
}

func (r *PolicyReconciler) setCondition(p policiesv1.Policy, t policiesv1.PolicyConditionType, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	policiesv1.SetPolicyStatusCondition(&p.GetStatus().Conditions, policiesv1.PolicyStatusCondition{
		Type: t, Status: status, Reason: reason, Message: message, ObservedGeneration: p.GetGeneration(),
	})
}

// equalPolicyStatus compares statuses without transition times.
func equalPolicyStatus(a, b *policiesv1.PolicyStatus) bool {
	if a.PolicyStatus != b.PolicyStatus || a.PolicyMode != b.PolicyMode || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message ||
			x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}

// SetupWithManager registers the reconciler. Besides its own kind it runs
// when the policy's PolicyServer, its StatefulSet, one of its
// PolicyRevisions, or the CA changes.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(r.Kind).
		For(policiesv1.NewPolicy(r.Kind)).
		Watches(&policiesv1.PolicyServer{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.requestsFor(ctx, o.GetName())
		})).
		Watches(&policiesv1.PolicyRevision{}, handler.EnqueueRequestsFromMapFunc(r.revisionPolicy)).
		// A policy waits for its PolicyServer's first ready pod.
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			name, ok := o.GetLabels()[policyServerLabel]
			if o.GetNamespace() != r.Namespace || !ok {
				return nil
			}
			return r.requestsFor(ctx, name)
		})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			if o.GetNamespace() != r.Namespace || o.GetName() != caSecretName {
				return nil
			}
			return r.requestsFor(ctx, "")
		})).
		Complete(r)
}

// revisionPolicy maps a PolicyRevision of this kind to its policy.
func (r *PolicyReconciler) revisionPolicy(_ context.Context, o client.Object) []reconcile.Request {
	rev, ok := o.(*policiesv1.PolicyRevision)
	if !ok || o.GetNamespace() != r.Namespace || rev.Spec.ObjectReference.Kind != r.Kind {
		return nil
	}
	ref := rev.Spec.ObjectReference
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}}}
}

// requestsFor returns requests for the policies of this kind bound to the
// PolicyServer called name, or for all of them when name is empty.
func (r *PolicyReconciler) requestsFor(ctx context.Context, name string) []reconcile.Request {
	list := newPolicyList(r.Kind)
	var opts []client.ListOption
	if name != "" {
		opts = append(opts, client.MatchingFields{policyServerIndex: name})
	}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range policiesOf(list) {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.GetNamespace(), Name: p.GetName()}})
	}
	return reqs
}
