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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/controller"
	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/testkit"
)

const wardenNamespace = "warden"

// TestControllerEndToEnd runs the controller against a real API server and
// a policy server as a local process, started from the configuration and
// certificate the controller wrote; the API server calls it over TLS
// through the webhook configurations the controller wrote.
func TestControllerEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cl := startCluster(t)
	c := cl.Client
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardenNamespace}})

	port := testkit.FreePort(t)
	opts := controllerOptions(t)
	opts.PolicyServerURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	startController(t, cl, opts)

	startPolicyServers(t, cl, port, "default")

	mustCreate(t, c, &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 1},
	})

	module := "file://" + policybuild.ForTest(t, "../../examples/policies/pod-privileged")
	cap := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-privileged"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer:    "default",
			Module:          module,
			Rules:           podCreateRules(),
			BackgroundAudit: true,
		}},
	}
	mustCreate(t, c, cap)
	waitActive(t, c, cap)
	assertValidatingWebhook(t, c, "clusterwide-no-privileged", opts.PolicyServerURL+"/validate/clusterwide-no-privileged/1")
	// The API server calls the webhook once its informer of webhook
	// configurations has the new one, a moment after it is written.
	eventually(t, "the API server calls the policy's webhook", func() bool {
		return c.Create(ctx, pod("default", "privileged", true), client.DryRunAll) != nil
	})

	err := c.Create(ctx, pod("default", "privileged", true))
	if err == nil || !strings.Contains(err.Error(), "Privileged container is not allowed") {
		t.Fatalf("creating a privileged Pod: %v, want a denial with the policy's message", err)
	}
	mustCreate(t, c, pod("default", "unprivileged", false))

	// Protect to monitor is refused, with Kubewarden's message.
	cap = get(t, c, cap)
	cap.Spec.Mode = policiesv1.PolicyModeMonitor
	err = c.Update(ctx, cap)
	if err == nil || !strings.Contains(err.Error(), "spec.mode: Forbidden: field cannot transition from protect to monitor. Recreate instead.") {
		t.Fatalf("switching to monitor: %v, want the protect-to-monitor refusal", err)
	}

	// Deleting the policy removes its webhook, and the Pod is admitted:
	// once the API server's own informer of webhook configurations has
	// seen the deletion too, a moment after the object is gone.
	if err := c.Delete(ctx, cap); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the webhook configuration is removed", func() bool {
		err := c.Get(ctx, client.ObjectKey{Name: "clusterwide-no-privileged"}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
		return apierrors.IsNotFound(err)
	})
	eventually(t, "the API server admits the privileged Pod", func() bool {
		return c.Create(ctx, pod("default", "privileged-after-delete", true)) == nil
	})

	// A monitor policy admits what it would reject.
	monitor := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-privileged-monitor"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default",
			Mode:         policiesv1.PolicyModeMonitor,
			Module:       module,
			Rules:        podCreateRules(),
		}},
	}
	mustCreate(t, c, monitor)
	waitActive(t, c, monitor)
	mustCreate(t, c, pod("default", "privileged-monitored", true))
	if got := get(t, c, monitor).Status.PolicyMode; got != policiesv1.PolicyModeStatusMonitor {
		t.Errorf("status.mode = %q, want monitor", got)
	}

	// A namespaced AdmissionPolicy (native CEL) applies in its namespace only.
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	ap := &policiesv1.AdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app-label"},
		Spec: policiesv1.AdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default",
			Module:       "builtin://cel",
			Settings:     runtime.RawExtension{Raw: []byte(`{"validations":[{"expression":"has(object.metadata.labels) && 'app' in object.metadata.labels","message":"pods need an app label"}]}`)},
			Rules:        podCreateRules(),
		}},
	}
	mustCreate(t, c, ap)
	waitActive(t, c, ap)
	err = c.Create(ctx, pod("team", "unlabelled", false))
	if err == nil || !strings.Contains(err.Error(), "pods need an app label") {
		t.Fatalf("creating an unlabelled Pod in team: %v, want a denial", err)
	}
	mustCreate(t, c, pod("default", "unlabelled-elsewhere", false))

	// A cluster-wide group: the rejection message is the group's.
	group := &policiesv1.ClusterAdmissionPolicyGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-hardening"},
		Spec: policiesv1.ClusterAdmissionPolicyGroupSpec{ClusterPolicyGroupSpec: policiesv1.ClusterPolicyGroupSpec{
			GroupSpec: policiesv1.GroupSpec{
				PolicyServer: "default", Rules: podCreateRules(),
				Expression: "no_privileged() && named()", Message: "the pod is not hardened",
			},
			Policies: policiesv1.PolicyGroupMembersWithContext{
				"no_privileged": {PolicyGroupMember: policiesv1.PolicyGroupMember{Module: module}},
				"named": {PolicyGroupMember: policiesv1.PolicyGroupMember{Module: "builtin://cel",
					Settings: runtime.RawExtension{Raw: []byte(`{"validations":[{"expression":"object.metadata.name != 'forbidden'"}]}`)}}},
			},
		}},
	}
	mustCreate(t, c, group)
	waitActive(t, c, group)
	err = c.Create(ctx, pod("default", "forbidden", false))
	if err == nil || !strings.Contains(err.Error(), "the pod is not hardened") {
		t.Fatalf("creating a Pod the group rejects: %v, want the group's message", err)
	}
	mustCreate(t, c, pod("default", "allowed-by-group", false))

	// The CA deleted by hand comes back; the webhooks trust the new one and
	// the policy server serves a certificate it issued.
	var oldCA corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: wardenNamespace, Name: "kubewarden-ca"}, &oldCA); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &oldCA); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the webhooks trust the new CA", func() bool {
		var ca corev1.Secret
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if c.Get(ctx, client.ObjectKey{Namespace: wardenNamespace, Name: "kubewarden-ca"}, &ca) != nil ||
			c.Get(ctx, client.ObjectKey{Name: "namespaced-team-app-label"}, &cfg) != nil {
			return false
		}
		return ca.UID != oldCA.UID && strings.Contains(string(cfg.Webhooks[0].ClientConfig.CABundle), strings.TrimSpace(string(ca.Data["ca.crt"])))
	})
	eventually(t, "the API server reaches the policy server with the new certificate", func() bool {
		err := c.Create(ctx, pod("team", "unlabelled-after-rotation", false))
		return err != nil && strings.Contains(err.Error(), "pods need an app label")
	})
}

// A policy whose PolicyServer does not exist is scheduled, and gets no
// webhook.
func TestPolicyWithoutItsPolicyServer(t *testing.T) {
	ctx := t.Context()
	cl := startCluster(t)
	c := cl.Client
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardenNamespace}})
	startController(t, cl, controllerOptions(t))

	cap := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "missing", Module: "builtin://cel", Rules: podCreateRules(),
		}},
	}
	mustCreate(t, c, cap)
	eventually(t, "the policy is scheduled", func() bool {
		return get(t, c, cap).Status.PolicyStatus == policiesv1.PolicyStatusScheduled
	})
	err := c.Get(ctx, client.ObjectKey{Name: "clusterwide-orphan"}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("webhook configuration of a policy without PolicyServer: %v, want not found", err)
	}
	if got := get(t, c, cap).GetFinalizers(); len(got) != 1 || got[0] != policiesv1.Finalizer {
		t.Errorf("finalizers = %v, want [%s]", got, policiesv1.Finalizer)
	}
}

// The API server refuses what the CRDs' schemas and CEL rules forbid.
func TestInvalidResourcesAreRefused(t *testing.T) {
	cl := startCluster(t)
	intOrString := intstr.FromInt32(1)
	tests := []struct {
		name string
		obj  client.Object
		want string
	}{
		{
			name: "PolicyServer with minAvailable and maxUnavailable",
			obj: &policiesv1.PolicyServer{
				ObjectMeta: metav1.ObjectMeta{Name: "both"},
				Spec:       policiesv1.PolicyServerSpec{Image: "x", Replicas: 1, MinAvailable: &intOrString, MaxUnavailable: &intOrString},
			},
			want: "minAvailable and maxUnavailable cannot be both set",
		},
		{
			name: "policy without rules",
			obj: &policiesv1.ClusterAdmissionPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: "no-rules"},
				Spec:       policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{Module: "builtin://cel", Rules: []admissionregistrationv1.RuleWithOperations{}}},
			},
			want: "spec.rules",
		},
		{
			name: "rule without operations",
			obj: &policiesv1.ClusterAdmissionPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: "no-operations"},
				Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{Module: "builtin://cel",
					Rules: []admissionregistrationv1.RuleWithOperations{{Rule: admissionregistrationv1.Rule{APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}},
			},
			want: "every rule must list at least one operation",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := cl.Client.Create(t.Context(), tc.obj)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// startCluster starts an API server with Warden's CRDs installed.
func startCluster(t *testing.T) *clustertest.Cluster {
	t.Helper()
	scheme, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return clustertest.Start(t, clustertest.WithScheme(scheme), clustertest.WithCRDDirectory("../../config/crd/bases"))
}

// controllerOptions are the controller's options for a test: policy servers
// in wardenNamespace, no metrics or probe listeners, and the controller's
// own webhooks on a free port of 127.0.0.1, which the API server calls by
// URL (it cannot resolve the webhook Service).
func controllerOptions(t *testing.T) controller.Options {
	opts := controller.DefaultOptions()
	opts.DeploymentsNamespace = wardenNamespace
	opts.MetricsBindAddress, opts.HealthProbeBindAddress = "0", "0"
	opts.WebhookServerPort = testkit.FreePort(t)
	opts.WebhookURL = fmt.Sprintf("https://127.0.0.1:%d", opts.WebhookServerPort)
	return opts
}

// startController runs the controller against cl until the test ends, and
// returns once its webhooks answer the API server; its logs are shown if
// the test fails.
func startController(t *testing.T, cl *clustertest.Cluster, opts controller.Options) {
	t.Helper()
	startControllerWithConfig(t, cl.Config, opts)
	waitForControllerWebhooks(t, cl.Client)
}

// startControllerWithConfig runs the controller, talking to the API server
// with cfg, until the test ends.
func startControllerWithConfig(t *testing.T, cfg *rest.Config, opts controller.Options) {
	t.Helper()
	var logs logtest.Buffer
	mgr, err := controller.NewManager(cfg, opts, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runManager(t, "controller", mgr, &logs)
}

// runManager starts mgr until the test ends; the logs of name are shown if
// the test fails.
func runManager(t *testing.T, name string, mgr manager.Manager, logs *logtest.Buffer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, logs.String())
		}
	})
}

// waitForControllerWebhooks waits until the controller's webhook
// configurations exist and the API server gets answers through them: a
// dry-run create passes the webhooks without storing anything.
func waitForControllerWebhooks(t *testing.T, c client.Client) {
	t.Helper()
	eventually(t, "the controller's webhooks answer", func() bool {
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if c.Get(t.Context(), client.ObjectKey{Name: "kubewarden-controller-validating-webhook-configuration"}, &cfg) != nil {
			return false
		}
		probe := &policiesv1.PolicyServer{
			ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe"},
			Spec:       policiesv1.PolicyServerSpec{Image: "x", Replicas: 1},
		}
		return c.Create(t.Context(), probe, client.DryRunAll) == nil
	})
}

func podCreateRules() []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
		},
	}}
}

func pod(namespace, name string, privileged bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1",
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(privileged)},
		}}},
	}
}

func waitActive(t *testing.T, c client.Client, p policiesv1.Policy) {
	t.Helper()
	eventually(t, p.GetName()+" is active", func() bool {
		got := p.DeepCopyPolicy()
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
			return false
		}
		return got.GetStatus().PolicyStatus == policiesv1.PolicyStatusActive
	})
}

func assertValidatingWebhook(t *testing.T, c client.Client, name, url string) {
	t.Helper()
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(cfg.Webhooks))
	}
	w := cfg.Webhooks[0]
	if w.Name != name+".kubewarden.admission" || w.ClientConfig.URL == nil || *w.ClientConfig.URL != url || len(w.ClientConfig.CABundle) == 0 {
		t.Errorf("webhook %s: name %q, url %v, caBundle %d bytes", name, w.Name, w.ClientConfig.URL, len(w.ClientConfig.CABundle))
	}
	if cfg.Labels["app.kubernetes.io/part-of"] != "kubewarden" || cfg.Annotations["kubewardenPolicyName"] == "" {
		t.Errorf("labels %v, annotations %v", cfg.Labels, cfg.Annotations)
	}
}

func get[T client.Object](t *testing.T, c client.Client, o T) T {
	t.Helper()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
		t.Fatal(err)
	}
	return o
}

func mustCreate(t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Create(t.Context(), o); err != nil {
		t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// eventually waits, as long as the cluster tier waits for anything, until
// cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 90*time.Second, what, cond)
}
