//go:build cluster

package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/controller"
	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/testkit"
)

// TestUninstall runs the chart's pre-delete hook (controller.Uninstall)
// against a running Warden: a controller, a policy server and policies of
// two kinds. The controller's finalizers remove the policies and the
// PolicyServer, and the hook leaves nothing of Warden's but the CRDs.
//
// The test cluster has no kube-controller-manager and no kubelet, so the
// test stands in for them where the hook waits on them: it keeps a Pod
// object for the controller's Deployment and, when the hook scales the
// Deployment to zero, stops the controller and deletes that Pod.
func TestUninstall(t *testing.T) {
	cl := startCluster(t)
	c := cl.Client
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardenNamespace}})
	port := testkit.FreePort(t)
	opts := controllerOptions(t)
	opts.PolicyServerURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	opts.LeaderElect = true
	stopController := startStoppableController(t, cl, opts)
	startPolicyServers(t, cl, port, "default")
	deployment := standInControllerDeployment(t, c, stopController)

	mustCreate(t, c, &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 1},
	})
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	for _, p := range []policiesv1.Policy{
		&policiesv1.ClusterAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "blocked"},
			Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
				Module: "builtin://cel", Settings: celLabelSettings("blocked cluster-wide"), Rules: podCreateRules(),
			}},
		},
		&policiesv1.AdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "blocked"},
			Spec: policiesv1.AdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
				Module: "builtin://cel", Settings: celLabelSettings("blocked in team"), Rules: podCreateRules(),
			}},
		},
	} {
		mustCreate(t, c, p)
		waitActive(t, c, p)
	}
	assertDenied(t, c, "blocked cluster-wide")
	eventually(t, "the policy server holds its Lease", func() bool {
		return c.Get(t.Context(), client.ObjectKey{Namespace: wardenNamespace, Name: "policy-server-default"}, &coordinationv1.Lease{}) == nil
	})

	logs := runUninstall(t, c, controller.UninstallOptions{ControllerDeployment: deployment, GracePeriod: time.Minute})
	if strings.Contains(logs, "removing finalizers") {
		t.Errorf("the uninstall removed finalizers while the controller ran:\n%s", logs)
	}
	assertNothingLeft(t, c)
	if err := c.Create(t.Context(), blockedPod("after-uninstall")); err != nil {
		t.Errorf("creating a Pod after the uninstall: %v", err)
	}
}

// TestUninstallWithoutController runs the hook when the controller is gone
// and its webhook configurations are not: every change to a policy or a
// PolicyServer is refused, removing a finalizer included, since the
// webhooks fail closed. The hook still leaves nothing behind.
func TestUninstallWithoutController(t *testing.T) {
	cl := startCluster(t)
	c := cl.Client
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardenNamespace}})
	opts := controllerOptions(t)
	opts.PolicyServerURL = fmt.Sprintf("https://127.0.0.1:%d", testkit.FreePort(t))
	stopController := startStoppableController(t, cl, opts)

	ps := &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 1},
	}
	mustCreate(t, c, ps)
	policy := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "orphaned"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			Module: "builtin://cel", Settings: celLabelSettings("blocked"), Rules: podCreateRules(),
		}},
	}
	mustCreate(t, c, policy)
	eventually(t, "the policy has a revision and both have the finalizer", func() bool {
		var revisions policiesv1.PolicyRevisionList
		if c.List(t.Context(), &revisions, client.InNamespace(wardenNamespace)) != nil || len(revisions.Items) == 0 {
			return false
		}
		return len(get(t, c, policy).Finalizers) > 0 && len(get(t, c, ps).Finalizers) > 0
	})
	stopController()

	// The state the hook is for: nothing can be changed by hand.
	p := get(t, c, policy)
	p.Finalizers = nil
	if err := c.Update(t.Context(), p); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("removing the finalizer with the controller gone: %v, want the webhook's failure", err)
	}

	logs := runUninstall(t, c, controller.UninstallOptions{GracePeriod: 2 * time.Second})
	if !strings.Contains(logs, "removing finalizers") {
		t.Errorf("the uninstall did not say it removed finalizers:\n%s", logs)
	}
	assertNothingLeft(t, c)
}

// runUninstall runs the hook in wardenNamespace and returns its logs.
func runUninstall(t *testing.T, c client.Client, opts controller.UninstallOptions) string {
	t.Helper()
	defaults := controller.DefaultUninstallOptions()
	opts.DeploymentsNamespace = wardenNamespace
	opts.AuditScannerClientCertSecretName = defaults.AuditScannerClientCertSecretName
	opts.Timeout = opts.GracePeriod + 2*time.Minute
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	if err := controller.Uninstall(t.Context(), c, opts, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, logs.String())
	}
	return logs.String()
}

// assertNothingLeft checks that no object of Warden's is left but the CRDs.
func assertNothingLeft(t *testing.T, c client.Client) {
	t.Helper()
	ctx := t.Context()
	lists := map[string]client.ObjectList{
		"ClusterAdmissionPolicies":        &policiesv1.ClusterAdmissionPolicyList{},
		"AdmissionPolicies":               &policiesv1.AdmissionPolicyList{},
		"ClusterAdmissionPolicyGroups":    &policiesv1.ClusterAdmissionPolicyGroupList{},
		"AdmissionPolicyGroups":           &policiesv1.AdmissionPolicyGroupList{},
		"PolicyServers":                   &policiesv1.PolicyServerList{},
		"PolicyRevisions":                 &policiesv1.PolicyRevisionList{},
		"ValidatingWebhookConfigurations": &admissionregistrationv1.ValidatingWebhookConfigurationList{},
		"MutatingWebhookConfigurations":   &admissionregistrationv1.MutatingWebhookConfigurationList{},
		"StatefulSets":                    &appsv1.StatefulSetList{},
		"Leases":                          &coordinationv1.LeaseList{},
		"Secrets":                         &corev1.SecretList{},
		"Services":                        &corev1.ServiceList{},
		"ConfigMaps":                      &corev1.ConfigMapList{},
		"Pods":                            &corev1.PodList{},
	}
	for kind, l := range lists {
		if err := c.List(ctx, l); err != nil {
			t.Fatalf("listing %s: %v", kind, err)
		}
		items, err := clustertest.Items(l)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, o := range items {
			if o.GetNamespace() == wardenNamespace || o.GetNamespace() == "" || o.GetNamespace() == "team" {
				if kind == "ConfigMaps" && o.GetName() == "kube-root-ca.crt" {
					continue // the API server's, in every namespace
				}
				left = append(left, strings.TrimPrefix(o.GetNamespace()+"/"+o.GetName(), "/"))
			}
		}
		if len(left) > 0 {
			t.Errorf("%s left after the uninstall: %v", kind, left)
		}
	}
}

// startStoppableController runs the controller until the returned function
// is called or the test ends.
func startStoppableController(t *testing.T, cl *clustertest.Cluster, opts controller.Options) (stop func()) {
	t.Helper()
	var logs logtest.Buffer
	mgr, err := controller.NewManager(cl.Config, opts, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("controller: %v", err)
		}
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("controller logs:\n%s", logs.String())
		}
	})
	waitForControllerWebhooks(t, cl.Client)
	return stop
}

// standInControllerDeployment creates the controller's Deployment and a
// Pod of it, and plays the Deployment controller and the kubelet for them:
// once the Deployment is scaled to zero, it calls stop and deletes the Pod.
// It returns the Deployment's name.
func standInControllerDeployment(t *testing.T, c client.Client, stop func()) string {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": "warden-controller"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: wardenNamespace, Name: "warden-controller"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "ghcr.io/wardenhq/warden-controller:test"}}},
			},
		},
	}
	mustCreate(t, c, d)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: wardenNamespace, Name: "warden-controller-0", Labels: labels},
		Spec:       d.Spec.Template.Spec,
	}
	mustCreate(t, c, pod)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var got appsv1.Deployment
			if err := c.Get(ctx, client.ObjectKeyFromObject(d), &got); err == nil && ptr.Deref(got.Spec.Replicas, 1) == 0 {
				stop()
				if err := c.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting the controller's Pod: %v", err)
				}
				// The test's Deployment would outlive the uninstall, which
				// Helm deletes with the release.
				if err := c.Delete(ctx, &got); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting the controller's Deployment: %v", err)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return d.Name
}
