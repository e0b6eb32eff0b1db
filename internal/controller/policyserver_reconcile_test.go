package controller

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

func policyServerReconciler(t *testing.T, c client.Client) *PolicyServerReconciler {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return &PolicyServerReconciler{Client: c, Scheme: scheme, Namespace: testNamespace, Now: time.Now}
}

func reconcilePolicyServer(t *testing.T, r *PolicyServerReconciler) (ctrl.Result, error) {
	t.Helper()
	return r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "default"}})
}

// conditionsOf returns the conditions of PolicyServer "default", type to
// status, and their messages.
func conditionsOf(t *testing.T, c client.Client) (map[string]metav1.ConditionStatus, map[string]string) {
	t.Helper()
	var ps policiesv1.PolicyServer
	if err := c.Get(t.Context(), client.ObjectKey{Name: "default"}, &ps); err != nil {
		t.Fatal(err)
	}
	status, messages := map[string]metav1.ConditionStatus{}, map[string]string{}
	for _, cond := range ps.Status.Conditions {
		status[cond.Type], messages[cond.Type] = cond.Status, cond.Message
	}
	return status, messages
}

// objectVersions returns the resourceVersion of each object a PolicyServer
// runs on, by kind, "" for those that do not exist.
func objectVersions(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	for kind, o := range map[string]client.Object{
		"CA":     &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: caSecretName}},
		"Secret": &corev1.Secret{}, "ConfigMap": &corev1.ConfigMap{}, "StatefulSet": &appsv1.StatefulSet{},
		"Service": &corev1.Service{}, "PodDisruptionBudget": &policyv1.PodDisruptionBudget{},
	} {
		name := o.GetName()
		if name == "" {
			name = "policy-server-default"
		}
		err := c.Get(t.Context(), client.ObjectKey{Namespace: testNamespace, Name: name}, o)
		switch {
		case apierrors.IsNotFound(err):
			out[kind] = ""
		case err != nil:
			t.Fatal(err)
		default:
			out[kind] = o.GetResourceVersion()
		}
	}
	return out
}

var allReconciled = map[string]metav1.ConditionStatus{
	string(policiesv1.CARootSecretReconciled): metav1.ConditionTrue, string(policiesv1.PolicyServerCertSecretReconciled): metav1.ConditionTrue,
	string(policiesv1.PolicyServerConfigMapReconciled): metav1.ConditionTrue, string(policiesv1.PolicyServerDeploymentReconciled): metav1.ConditionTrue,
	string(policiesv1.PolicyServerServiceReconciled): metav1.ConditionTrue, string(policiesv1.PolicyServerPodDisruptionBudgetReconciled): metav1.ConditionTrue,
}

// A PolicyServer becomes its CA, Secret, ConfigMap, StatefulSet and Service
// (no PodDisruptionBudget unless asked), each step in its conditions; a
// second reconcile writes nothing.
func TestPolicyServerReconcileCreatesObjects(t *testing.T) {
	c := newFakeClient(t, interceptor.Funcs{}, testPolicyServer(2))
	r := policyServerReconciler(t, c)
	if _, err := reconcilePolicyServer(t, r); err != nil {
		t.Fatal(err)
	}
	versions := objectVersions(t, c)
	for kind, rv := range versions {
		if want := kind != "PodDisruptionBudget"; (rv != "") != want {
			t.Errorf("%s exists: %t, want %t", kind, rv != "", want)
		}
	}
	if got, _ := conditionsOf(t, c); !maps.Equal(got, allReconciled) {
		t.Errorf("conditions %v, want every step reconciled", got)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: testNamespace, Name: "policy-server-default"}, &sts); err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(&sts); owner == nil || owner.Kind != "PolicyServer" || owner.Name != "default" {
		t.Errorf("the StatefulSet's controller is %+v, want PolicyServer default", owner)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 2 {
		t.Errorf("the StatefulSet runs %v replicas, want 2", sts.Spec.Replicas)
	}
	var ps policiesv1.PolicyServer
	if err := c.Get(t.Context(), client.ObjectKey{Name: "default"}, &ps); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(ps.Finalizers, ","), policiesv1.Finalizer) {
		t.Errorf("finalizers %v, want %s", ps.Finalizers, policiesv1.Finalizer)
	}

	if _, err := reconcilePolicyServer(t, r); err != nil {
		t.Fatal(err)
	}
	if again := objectVersions(t, c); !maps.Equal(again, versions) {
		t.Errorf("a second reconcile wrote: resourceVersions %v, then %v", versions, again)
	}
}

// API errors: the reconcile returns them, stops at the failed step, and
// the PolicyServer's conditions say which step failed.
func TestPolicyServerReconcileAPIErrors(t *testing.T) {
	boom := errors.New("etcd is down")
	t.Run("the StatefulSet cannot be written", func(t *testing.T) {
		c := newFakeClient(t, interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if err := failOn[*appsv1.StatefulSet](obj, boom); err != nil {
					return err
				}
				return c.Create(ctx, obj, opts...)
			},
		}, testPolicyServer(1))
		if _, err := reconcilePolicyServer(t, policyServerReconciler(t, c)); !errors.Is(err, boom) {
			t.Errorf("Reconcile = %v, want the StatefulSet write's error", err)
		}
		status, messages := conditionsOf(t, c)
		want := map[string]metav1.ConditionStatus{
			string(policiesv1.CARootSecretReconciled): metav1.ConditionTrue, string(policiesv1.PolicyServerCertSecretReconciled): metav1.ConditionTrue,
			string(policiesv1.PolicyServerConfigMapReconciled): metav1.ConditionTrue, string(policiesv1.PolicyServerDeploymentReconciled): metav1.ConditionFalse,
		}
		if !maps.Equal(status, want) {
			t.Errorf("conditions %v, want %v", status, want)
		}
		if msg := messages[string(policiesv1.PolicyServerDeploymentReconciled)]; !strings.Contains(msg, boom.Error()) {
			t.Errorf("DeploymentReconciled says %q, want the error", msg)
		}
		if v := objectVersions(t, c); v["Service"] != "" {
			t.Error("the Service was written after the StatefulSet failed")
		}
	})

	t.Run("the client CA ConfigMap does not exist", func(t *testing.T) {
		c := newFakeClient(t, interceptor.Funcs{}, testPolicyServer(1))
		r := policyServerReconciler(t, c)
		r.Pods.ClientCAConfigMap = "client-ca"
		if _, err := reconcilePolicyServer(t, r); !apierrors.IsNotFound(err) {
			t.Errorf("Reconcile = %v, want NotFound", err)
		}
		status, messages := conditionsOf(t, c)
		if msg := messages[string(policiesv1.PolicyServerDeploymentReconciled)]; status[string(policiesv1.PolicyServerDeploymentReconciled)] != metav1.ConditionFalse ||
			!strings.Contains(msg, `client CA ConfigMap "client-ca"`) {
			t.Errorf("DeploymentReconciled %s %q, want False naming the ConfigMap", status[string(policiesv1.PolicyServerDeploymentReconciled)], msg)
		}
		if v := objectVersions(t, c); v["StatefulSet"] != "" {
			t.Error("a StatefulSet mounting a missing ConfigMap was written")
		}
	})

	t.Run("the status write conflicts", func(t *testing.T) {
		c := newFakeClient(t, interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if err := failOn[*policiesv1.PolicyServer](obj, conflict(obj.GetName())); err != nil {
					return err
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}, testPolicyServer(1))
		if _, err := reconcilePolicyServer(t, policyServerReconciler(t, c)); !apierrors.IsConflict(err) {
			t.Errorf("Reconcile = %v, want the conflict", err)
		}
		// The objects were written; the retry writes the status.
		if v := objectVersions(t, c); v["StatefulSet"] == "" || v["Service"] == "" {
			t.Errorf("objects %v, want the StatefulSet and Service written", v)
		}
		if status, _ := conditionsOf(t, c); len(status) != 0 {
			t.Errorf("conditions %v, want none written", status)
		}
	})

	t.Run("the PolicyServer is gone", func(t *testing.T) {
		c := newFakeClient(t, interceptor.Funcs{})
		if res, err := reconcilePolicyServer(t, policyServerReconciler(t, c)); err != nil || res != (ctrl.Result{}) {
			t.Errorf("Reconcile = %+v, %v, want nothing to do", res, err)
		}
	})
}

// A deleted PolicyServer waits until no webhook of its policies remains,
// then lets go of its finalizer.
func TestPolicyServerReconcileDeletion(t *testing.T) {
	ps := testPolicyServer(1)
	ps.Finalizers = []string{policiesv1.Finalizer}
	hook := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
		Name: "clusterwide-psp", Labels: map[string]string{policyServerLabel: "default"}}}
	c := newFakeClient(t, interceptor.Funcs{}, ps, hook)
	r := policyServerReconciler(t, c)
	if err := c.Delete(t.Context(), testPolicyServer(1)); err != nil {
		t.Fatal(err)
	}

	res, err := reconcilePolicyServer(t, r)
	if err != nil || res.RequeueAfter == 0 {
		t.Errorf("Reconcile = %+v, %v, want a requeue while a webhook remains", res, err)
	}
	status, messages := conditionsOf(t, c)
	if cond := string(policiesv1.PolicyServerPolicyWebhooksCleanedUp); status[cond] != metav1.ConditionFalse || !strings.Contains(messages[cond], "1 webhook") {
		t.Errorf("%s %s %q, want False counting the webhook", cond, status[cond], messages[cond])
	}

	if err := c.Delete(t.Context(), hook); err != nil {
		t.Fatal(err)
	}
	if _, err := reconcilePolicyServer(t, r); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKey{Name: "default"}, &policiesv1.PolicyServer{}); !apierrors.IsNotFound(err) {
		t.Errorf("the PolicyServer is still there (%v): its finalizer was not removed", err)
	}
}
