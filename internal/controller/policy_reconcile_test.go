package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// The Reconcile tests run the reconcilers on controller-runtime's fake
// client, an object store without an API server: no defaulting, no
// validation, no garbage collection, no generation bumps (the fixtures set
// metadata.generation themselves). Errors are injected with interceptors.
// test/cluster runs the same reconcilers against a real API server.

// testNamespace is the deployments namespace of the tests.
const testNamespace = "warden"

// newFakeClient returns a fake client holding objs, whose calls go through
// funcs first.
func newFakeClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&policiesv1.ClusterAdmissionPolicy{}, &policiesv1.AdmissionPolicy{},
			&policiesv1.ClusterAdmissionPolicyGroup{}, &policiesv1.AdmissionPolicyGroup{},
			&policiesv1.PolicyRevision{}, &policiesv1.PolicyServer{}).
		WithInterceptorFuncs(funcs).Build()
}

// failOn returns the error of an API call on an object of type T, nil
// otherwise: an interceptor injects it.
func failOn[T client.Object](obj client.Object, err error) error {
	if _, ok := obj.(T); ok {
		return err
	}
	return nil
}

// conflict is the API server's answer to a write at a stale resourceVersion.
func conflict(name string) error {
	return apierrors.NewConflict(schema.GroupResource{Group: policiesv1.GroupVersion.Group, Resource: "clusteradmissionpolicies"},
		name, errors.New("the object has been modified"))
}

// testPolicy is a ClusterAdmissionPolicy of PolicyServer "default" at
// generation 1.
func testPolicy(name string, change ...func(*policiesv1.ClusterAdmissionPolicy)) *policiesv1.ClusterAdmissionPolicy {
	p := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default",
			Module:       "registry://example.com/labels:v1",
			Mode:         policiesv1.PolicyModeProtect,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
	for _, f := range change {
		f(p)
	}
	return p
}

func testPolicyServer(replicas int32) *policiesv1.PolicyServer {
	return &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: 1},
		Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/policy-server:test", Replicas: replicas},
	}
}

// testCA is the CA Secret as the PolicyServer reconciler leaves it; the
// policy reconciler only copies its certificate into the webhooks.
func testCA() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: caSecretName},
		Data:       map[string][]byte{caCertKey: []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n")},
	}
}

func policyReconciler(c client.Client) *PolicyReconciler {
	return &PolicyReconciler{Client: c, Kind: policiesv1.KindClusterAdmissionPolicy, Namespace: testNamespace,
		RevisionHistoryLimit: 2, Log: logr.Discard()}
}

func reconcilePolicy(t *testing.T, r *PolicyReconciler, name string) (ctrl.Result, error) {
	t.Helper()
	return r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKey{Name: name}})
}

// reconciled reconciles the policy called name and fails the test on an
// error.
func reconciled(t *testing.T, r *PolicyReconciler, name string) {
	t.Helper()
	if _, err := reconcilePolicy(t, r, name); err != nil {
		t.Fatal(err)
	}
}

// toMonitorMode updates the policy called name to monitor mode, its
// generation 2, as the API server would.
func toMonitorMode(t *testing.T, c client.Client, name string) {
	t.Helper()
	var p policiesv1.ClusterAdmissionPolicy
	if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Mode = policiesv1.PolicyModeMonitor
	p.Generation = 2 // the API server's bump
	if err := c.Update(t.Context(), &p); err != nil {
		t.Fatal(err)
	}
}

// revisions returns the enabled flag of the revisions of the policy called
// name, by generation.
func revisions(t *testing.T, c client.Client, name string) map[int64]bool {
	t.Helper()
	var list policiesv1.PolicyRevisionList
	if err := c.List(t.Context(), &list, client.InNamespace(testNamespace)); err != nil {
		t.Fatal(err)
	}
	out := map[int64]bool{}
	for _, rev := range list.Items {
		if rev.Spec.ObjectReference.Name == name {
			out[rev.Spec.PolicyGeneration] = rev.Spec.Enabled
		}
	}
	return out
}

// markReady reports the revision of generation g of the policy called name
// Ready on replicas 0..replicas-1, as the policy servers do once they serve
// it.
func markReady(t *testing.T, c client.Client, name string, g int64, replicas int32) {
	t.Helper()
	var list policiesv1.PolicyRevisionList
	if err := c.List(t.Context(), &list, client.InNamespace(testNamespace)); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		rev := &list.Items[i]
		if rev.Spec.ObjectReference.Name != name || rev.Spec.PolicyGeneration != g {
			continue
		}
		for replica := range replicas {
			policiesv1.SetPolicyStatusCondition(&rev.Status.Conditions, policiesv1.PolicyStatusCondition{
				Type: policiesv1.PolicyReady, Status: metav1.ConditionTrue, Replica: &replica, Reason: "PolicyReady"})
		}
		if err := c.Status().Update(t.Context(), rev); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no revision of generation %d of %s", g, name)
}

// webhookPath returns the path the validating webhook of the policy called
// name calls, and "" when there is no such webhook.
func webhookPath(t *testing.T, c client.Client, name string) string {
	t.Helper()
	var hook admissionregistrationv1.ValidatingWebhookConfiguration
	err := c.Get(t.Context(), client.ObjectKey{Name: policiesv1.ClusterPolicyUniqueName(name)}, &hook)
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(hook.Webhooks) != 1 || hook.Webhooks[0].ClientConfig.Service == nil || hook.Webhooks[0].ClientConfig.Service.Path == nil {
		t.Fatalf("webhook configuration %s: %+v", hook.Name, hook.Webhooks)
	}
	return *hook.Webhooks[0].ClientConfig.Service.Path
}

// policyState is what the tests check of a policy's status.
type policyState struct {
	status policiesv1.PolicyStatusEnum
	// active is the PolicyActive condition: its status and reason.
	active, activeReason string
}

func (s policyState) String() string {
	return fmt.Sprintf("status %q, PolicyActive %s (%s)", s.status, s.active, s.activeReason)
}

func stateOf(t *testing.T, c client.Client, name string) policyState {
	t.Helper()
	var p policiesv1.ClusterAdmissionPolicy
	if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	s := policyState{status: p.Status.PolicyStatus}
	if cond := policiesv1.FindPolicyStatusCondition(p.Status.Conditions, policiesv1.PolicyActive, nil); cond != nil {
		s.active, s.activeReason = string(cond.Status), cond.Reason
	}
	return s
}

// conditionOf returns the condition of type ct of the policy called name;
// the test fails when there is none.
func conditionOf(t *testing.T, c client.Client, name string, ct policiesv1.PolicyConditionType) policiesv1.PolicyStatusCondition {
	t.Helper()
	var p policiesv1.ClusterAdmissionPolicy
	if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	cond := policiesv1.FindPolicyStatusCondition(p.Status.Conditions, ct, nil)
	if cond == nil {
		t.Fatalf("policy %s has no %s condition", name, ct)
	}
	return *cond
}

// A new policy is Pending, with no webhook, until every replica of its
// PolicyServer serves its revision; then it gets its webhook and is
// active.
func TestPolicyReconcileSchedules(t *testing.T) {
	c := newFakeClient(t, interceptor.Funcs{}, testPolicy("psp"), testPolicyServer(2), testCA())
	r := policyReconciler(c)

	res, err := reconcilePolicy(t, r, "psp")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stateOf(t, c, "psp"), (policyState{policiesv1.PolicyStatusPending, "False", "PolicyServerNotReady"}); got != want {
		t.Errorf("before the replicas serve it: %v, want %v", got, want)
	}
	if res.RequeueAfter != pendingRequeue {
		t.Errorf("a pending policy is requeued after %v, want %v", res.RequeueAfter, pendingRequeue)
	}
	if got := revisions(t, c, "psp"); len(got) != 1 || !got[1] {
		t.Errorf("revisions %v, want generation 1 enabled", got)
	}
	if path := webhookPath(t, c, "psp"); path != "" {
		t.Errorf("a webhook calls %s before the replicas serve the policy", path)
	}

	markReady(t, c, "psp", 1, 1)
	reconciled(t, r, "psp")
	if path := webhookPath(t, c, "psp"); path != "" {
		t.Errorf("a webhook calls %s while one of two replicas serves the policy", path)
	}

	markReady(t, c, "psp", 1, 2)
	res, err = reconcilePolicy(t, r, "psp")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stateOf(t, c, "psp"), (policyState{policiesv1.PolicyStatusActive, "True", "PolicyActive"}); got != want {
		t.Errorf("once every replica serves it: %v, want %v", got, want)
	}
	if path := webhookPath(t, c, "psp"); path != "/validate/clusterwide-psp/1" {
		t.Errorf("the webhook calls %q, want generation 1", path)
	}
	if res != (ctrl.Result{}) {
		t.Errorf("an active policy is requeued: %+v", res)
	}
}

// An update moves the webhook once every replica serves the new generation;
// the old one stays enabled while it drains.
func TestPolicyReconcileMovesWebhook(t *testing.T) {
	c := newFakeClient(t, interceptor.Funcs{}, testPolicy("psp"), testPolicyServer(1), testCA())
	r := policyReconciler(c)
	reconciled(t, r, "psp")
	markReady(t, c, "psp", 1, 1)
	reconciled(t, r, "psp")

	toMonitorMode(t, c, "psp")
	reconciled(t, r, "psp")
	if path := webhookPath(t, c, "psp"); path != "/validate/clusterwide-psp/1" {
		t.Errorf("before generation 2 is served the webhook calls %q, want generation 1", path)
	}
	if got, want := stateOf(t, c, "psp"), (policyState{policiesv1.PolicyStatusActive, "True", "PolicyActive"}); got != want {
		t.Errorf("while generation 1 is served: %v, want %v", got, want)
	}

	markReady(t, c, "psp", 2, 1)
	res, err := reconcilePolicy(t, r, "psp")
	if err != nil {
		t.Fatal(err)
	}
	if path := webhookPath(t, c, "psp"); path != "/validate/clusterwide-psp/2" {
		t.Errorf("once generation 2 is served the webhook calls %q", path)
	}
	if got := revisions(t, c, "psp"); !got[1] || !got[2] {
		t.Errorf("revisions %v, want generation 1 enabled while it drains, and 2", got)
	}
	if res.RequeueAfter != drainDelay {
		t.Errorf("requeued after %v, want the drain delay %v", res.RequeueAfter, drainDelay)
	}
}

// A policy whose PolicyServer does not exist, or that names none, has no
// webhook, and its status says why.
func TestPolicyReconcileWithoutPolicyServer(t *testing.T) {
	for _, tc := range []struct {
		name         string
		policyServer string
		want         policyState
	}{
		{"a PolicyServer that does not exist", "missing", policyState{policiesv1.PolicyStatusScheduled, "False", "PolicyServerMissing"}},
		{"no PolicyServer", "", policyState{policiesv1.PolicyStatusUnscheduled, "False", "NoPolicyServer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy("psp", func(p *policiesv1.ClusterAdmissionPolicy) { p.Spec.PolicyServer = tc.policyServer })
			// A webhook left from when its PolicyServer served it.
			stale := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: p.GetUniqueName()}}
			desiredValidatingWebhook(stale, p, webhookTarget{namespace: testNamespace, service: "policy-server-default", generation: 1})
			c := newFakeClient(t, interceptor.Funcs{}, p, testPolicyServer(1), testCA(), stale)
			reconciled(t, policyReconciler(c), "psp")
			if got := stateOf(t, c, "psp"); got != tc.want {
				t.Errorf("%v, want %v", got, tc.want)
			}
			if path := webhookPath(t, c, "psp"); path != "" {
				t.Errorf("the webhook was kept")
			}
		})
	}
}

// API errors: the reconcile returns them (controller-runtime requeues with
// backoff), and what was written before the error stays.
func TestPolicyReconcileAPIErrors(t *testing.T) {
	boom := errors.New("etcd is down")
	t.Run("the webhook cannot be written", func(t *testing.T) {
		var failing bool
		c := newFakeClient(t, interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if err := failOn[*admissionregistrationv1.ValidatingWebhookConfiguration](obj, boom); failing && err != nil {
					return err
				}
				return c.Create(ctx, obj, opts...)
			},
		}, testPolicy("psp"), testPolicyServer(1), testCA())
		r := policyReconciler(c)
		reconciled(t, r, "psp")
		markReady(t, c, "psp", 1, 1)
		failing = true
		_, err := reconcilePolicy(t, r, "psp")
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "writing the webhook configuration") {
			t.Errorf("Reconcile = %v, want the webhook write's error", err)
		}
		// The status does not claim the policy active, and says why:
		// the write failed, with the API's message.
		if got, want := stateOf(t, c, "psp"), (policyState{policiesv1.PolicyStatusPending, "False", "WebhookConfigurationFailed"}); got != want {
			t.Errorf("after the failed write: %v, want %v", got, want)
		}
		if msg := conditionOf(t, c, "psp", policiesv1.PolicyActive).Message; !strings.Contains(msg, boom.Error()) {
			t.Errorf("PolicyActive's message %q does not give the API's %q", msg, boom.Error())
		}
		if path := webhookPath(t, c, "psp"); path != "" {
			t.Errorf("a webhook calls %s", path)
		}
		failing = false
		reconciled(t, r, "psp")
		if got := stateOf(t, c, "psp"); got.status != policiesv1.PolicyStatusActive || webhookPath(t, c, "psp") == "" {
			t.Errorf("the next reconcile: %v, webhook %q, want active with its webhook", got, webhookPath(t, c, "psp"))
		}
	})

	t.Run("the webhook cannot be moved to a new generation", func(t *testing.T) {
		var failing bool
		c := newFakeClient(t, interceptor.Funcs{
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if err := failOn[*admissionregistrationv1.ValidatingWebhookConfiguration](obj, boom); failing && err != nil {
					return err
				}
				return c.Update(ctx, obj, opts...)
			},
		}, testPolicy("psp"), testPolicyServer(1), testCA())
		r := policyReconciler(c)
		reconciled(t, r, "psp")
		markReady(t, c, "psp", 1, 1)
		reconciled(t, r, "psp")
		toMonitorMode(t, c, "psp")
		reconciled(t, r, "psp")
		markReady(t, c, "psp", 2, 1)
		failing = true
		if _, err := reconcilePolicy(t, r, "psp"); !errors.Is(err, boom) {
			t.Errorf("Reconcile = %v, want the webhook write's error", err)
		}
		// Generation 1 is still served through the webhook: the policy
		// stays active, and its status says that it is not up to date
		// and why.
		if path := webhookPath(t, c, "psp"); path != "/validate/clusterwide-psp/1" {
			t.Errorf("the webhook calls %q, want generation 1", path)
		}
		if got, want := stateOf(t, c, "psp"), (policyState{policiesv1.PolicyStatusActive, "True", "PolicyActive"}); got != want {
			t.Errorf("after the failed move: %v, want %v", got, want)
		}
		if cond := conditionOf(t, c, "psp", policiesv1.PolicyServerConfigurationUpToDate); cond.Status != metav1.ConditionFalse {
			t.Errorf("%s is %s, want False", cond.Type, cond.Status)
		}
		if cond := conditionOf(t, c, "psp", policiesv1.PolicyUniquelyReachable); cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, boom.Error()) {
			t.Errorf("%s is %s (%q), want False with the API's message", cond.Type, cond.Status, cond.Message)
		}
		failing = false
		reconciled(t, r, "psp")
		if path := webhookPath(t, c, "psp"); path != "/validate/clusterwide-psp/2" {
			t.Errorf("the retry: the webhook calls %q, want generation 2", path)
		}
		if cond := conditionOf(t, c, "psp", policiesv1.PolicyUniquelyReachable); cond.Status != metav1.ConditionTrue {
			t.Errorf("the retry: %s is %s, want True", cond.Type, cond.Status)
		}
	})

	t.Run("the status write conflicts", func(t *testing.T) {
		var failing bool
		c := newFakeClient(t, interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if err := failOn[*policiesv1.ClusterAdmissionPolicy](obj, conflict(obj.GetName())); failing && err != nil {
					return err
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}, testPolicy("psp"), testPolicyServer(1), testCA())
		r := policyReconciler(c)
		reconciled(t, r, "psp")
		markReady(t, c, "psp", 1, 1)
		failing = true
		_, err := reconcilePolicy(t, r, "psp")
		if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "writing the status") {
			t.Errorf("Reconcile = %v, want the status write's conflict", err)
		}
		// The webhook was written before the status: the API server
		// serves the policy although its status still says Pending.
		if path := webhookPath(t, c, "psp"); path != "/validate/clusterwide-psp/1" {
			t.Errorf("the webhook calls %q, want generation 1", path)
		}
		if got := stateOf(t, c, "psp"); got.status != policiesv1.PolicyStatusPending {
			t.Errorf("after the conflict: %v, want the status as it was (pending)", got)
		}
		failing = false
		reconciled(t, r, "psp")
		if got, want := stateOf(t, c, "psp"), (policyState{policiesv1.PolicyStatusActive, "True", "PolicyActive"}); got != want {
			t.Errorf("the retry: %v, want %v", got, want)
		}
	})

	t.Run("the PolicyServer cannot be read", func(t *testing.T) {
		c := newFakeClient(t, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if err := failOn[*policiesv1.PolicyServer](obj, boom); err != nil {
					return err
				}
				return c.Get(ctx, key, obj, opts...)
			},
		}, testPolicy("psp"), testPolicyServer(1), testCA())
		if _, err := reconcilePolicy(t, policyReconciler(c), "psp"); !errors.Is(err, boom) {
			t.Errorf("Reconcile = %v, want the read's error", err)
		}
		if got := revisions(t, c, "psp"); len(got) != 0 {
			t.Errorf("revisions %v written without the PolicyServer", got)
		}
	})

	t.Run("the policy is gone", func(t *testing.T) {
		c := newFakeClient(t, interceptor.Funcs{})
		if res, err := reconcilePolicy(t, policyReconciler(c), "psp"); err != nil || res != (ctrl.Result{}) {
			t.Errorf("Reconcile = %+v, %v, want nothing to do", res, err)
		}
	})
}

// Without the CA the webhook cannot be written: the policy waits, without
// an error, for the PolicyServer reconciler to make it.
func TestPolicyReconcileWaitsForCA(t *testing.T) {
	c := newFakeClient(t, interceptor.Funcs{}, testPolicy("psp"), testPolicyServer(1))
	r := policyReconciler(c)
	reconciled(t, r, "psp")
	markReady(t, c, "psp", 1, 1)
	res, err := reconcilePolicy(t, r, "psp")
	if err != nil || res.RequeueAfter != pendingRequeue {
		t.Errorf("Reconcile = %+v, %v, want a requeue after %v", res, err, pendingRequeue)
	}
	if path := webhookPath(t, c, "psp"); path != "" {
		t.Errorf("a webhook without a CA bundle calls %s", path)
	}
}

// A deleted policy loses its webhook and revisions, then its finalizer.
func TestPolicyReconcileDeletion(t *testing.T) {
	c := newFakeClient(t, interceptor.Funcs{}, testPolicy("psp"), testPolicyServer(1), testCA())
	r := policyReconciler(c)
	reconciled(t, r, "psp")
	markReady(t, c, "psp", 1, 1)
	reconciled(t, r, "psp")
	if webhookPath(t, c, "psp") == "" {
		t.Fatal("no webhook before the deletion")
	}
	// The finalizer holds the policy: it gets a deletionTimestamp.
	if err := c.Delete(t.Context(), testPolicy("psp")); err != nil {
		t.Fatal(err)
	}
	reconciled(t, r, "psp")
	err := c.Get(t.Context(), client.ObjectKey{Name: "psp"}, &policiesv1.ClusterAdmissionPolicy{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the policy is still there (%v): its finalizer was not removed", err)
	}
	if path := webhookPath(t, c, "psp"); path != "" {
		t.Errorf("the webhook of the deleted policy calls %s", path)
	}
	if got := revisions(t, c, "psp"); len(got) != 0 {
		t.Errorf("revisions %v of the deleted policy", got)
	}
}
