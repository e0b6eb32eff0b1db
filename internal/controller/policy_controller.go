package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	before := p.GetStatus().DeepCopy()
	result, err := r.schedule(ctx, p)
	if !equalPolicyStatus(before, p.GetStatus()) {
		if serr := r.Client.Status().Update(ctx, p); serr != nil && err == nil {
			err = fmt.Errorf("writing the status: %w", serr)
		}
	}
	return result, err
}

// schedule computes the policy's status and its webhook.
func (r *PolicyReconciler) schedule(ctx context.Context, p policiesv1.Policy) (ctrl.Result, error) {
	status := p.GetStatus()
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

	var cm corev1.ConfigMap
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: ps.NameWithPrefix()}, &cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("reading the policy server configuration: %w", err)
	}
	mode, configured := configuredMode([]byte(cm.Data[policiesKey]), p.GetUniqueName())
	if !configured {
		p.SetPolicyModeStatus(policiesv1.PolicyModeStatusUnknown)
	} else {
		p.SetPolicyModeStatus(policiesv1.PolicyModeStatus(mode))
	}
	r.setCondition(p, policiesv1.PolicyServerConfigurationUpToDate, configured,
		map[bool]string{true: "ConfigurationVersionMatch", false: "ConfigurationVersionMismatch"}[configured], "")

	reachable, why, err := uniquelyReachable(ctx, r.Client, &ps, r.Namespace, cm.ResourceVersion)
	if err != nil {
		return ctrl.Result{}, err
	}
	reachable = reachable && configured
	r.setCondition(p, policiesv1.PolicyUniquelyReachable, reachable,
		map[bool]string{true: "LatestReplicaSetIsUniquelyReachable", false: "LatestReplicaSetIsNotUniquelyReachable"}[reachable], why)
	if !reachable {
		if status.PolicyStatus != policiesv1.PolicyStatusActive {
			p.SetStatus(policiesv1.PolicyStatusPending)
			r.setActive(p, false, "PolicyServerNotReady", why)
		}
		return ctrl.Result{RequeueAfter: pendingRequeue}, nil
	}

	bundle, err := caBundle(ctx, r.Client, r.Namespace)
	if errors.Is(err, errNoCA) {
		// The PolicyServer reconciler makes it; its creation wakes us.
		return ctrl.Result{RequeueAfter: pendingRequeue}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	target := webhookTarget{namespace: r.Namespace, policyServer: ps.Name, caBundle: bundle, url: r.PolicyServerURL}
	if err := r.applyWebhook(ctx, p, target); err != nil {
		return ctrl.Result{}, err
	}
	p.SetStatus(policiesv1.PolicyStatusActive)
	r.setActive(p, true, "PolicyActive", "")
	return ctrl.Result{}, nil
}

// applyWebhook writes the webhook configuration of p, of the kind p needs,
// and removes one of the other kind.
func (r *PolicyReconciler) applyWebhook(ctx context.Context, p policiesv1.Policy, t webhookTarget) error {
	name := p.GetUniqueName()
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	var want, other client.Object
	var mutate controllerutil.MutateFn
	if p.IsMutating() {
		want, other = mutating, validating
		mutate = func() error { desiredMutatingWebhook(mutating, p, t); return nil }
	} else {
		want, other = validating, mutating
		mutate = func() error { desiredValidatingWebhook(validating, p, t); return nil }
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

// uniquelyReachable reports whether every pod of the policy server runs the
// configuration at configVersion and is ready, and there are as many as it
// has replicas: then every request reaches a replica that has the policy.
// Without a kubelet (tests), pods and their readiness come from whoever
// writes them.
func uniquelyReachable(ctx context.Context, c client.Client, ps *policiesv1.PolicyServer, namespace, configVersion string) (bool, string, error) {
	if configVersion == "" {
		return false, "the policy server has no configuration yet", nil
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{policyServerLabel: ps.Name}); err != nil {
		return false, "", fmt.Errorf("listing the policy server pods: %w", err)
	}
	ready := 0
	for _, pod := range pods.Items {
		if !pod.DeletionTimestamp.IsZero() {
			continue
		}
		if pod.Labels[configVersionLabel] != configVersion {
			return false, fmt.Sprintf("pod %s runs another configuration", pod.Name), nil
		}
		if !podReady(&pod) {
			return false, fmt.Sprintf("pod %s is not ready", pod.Name), nil
		}
		ready++
	}
	if ready == 0 || ready < int(ps.Spec.Replicas) {
		return false, fmt.Sprintf("%d of %d replicas are ready", ready, ps.Spec.Replicas), nil
	}
	return true, "", nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
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
// when the policy's PolicyServer, the policy server's pods or ConfigMap, or
// the CA change.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(r.Kind).
		For(policiesv1.NewPolicy(r.Kind)).
		Watches(&policiesv1.PolicyServer{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.requestsFor(ctx, o.GetName())
		})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.byPolicyServerLabel)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.byPolicyServerLabel)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			if o.GetNamespace() != r.Namespace || o.GetName() != caSecretName {
				return nil
			}
			return r.requestsFor(ctx, "")
		})).
		Complete(r)
}

// byPolicyServerLabel maps an object of a policy server to its policies.
func (r *PolicyReconciler) byPolicyServerLabel(ctx context.Context, o client.Object) []reconcile.Request {
	name, ok := o.GetLabels()[policyServerLabel]
	if !ok || o.GetNamespace() != r.Namespace {
		return nil
	}
	return r.requestsFor(ctx, name)
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
