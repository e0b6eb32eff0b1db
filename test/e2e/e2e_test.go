//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/controller"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/testkit"
	"github.com/wardenhq/warden/internal/wardenctl"
)

const (
	release   = "warden"
	namespace = "warden-system"
	// registryNamespace holds the registry the policies are pushed to.
	registryNamespace = "e2e-registry"
	// registryHost is the registry's name inside the cluster, where the
	// policy servers pull from.
	registryHost = "e2e-registry." + registryNamespace + ".svc.cluster.local:5000"
)

// env is the environment hack/e2e.sh sets (doc.go).
type env struct {
	kubeconfig, helm, tag, upgradeTag, registryImage, podImage string
}

func loadEnv(t *testing.T) env {
	t.Helper()
	e := env{
		kubeconfig:    os.Getenv("WARDEN_E2E_KUBECONFIG"),
		helm:          os.Getenv("WARDEN_E2E_HELM"),
		tag:           os.Getenv("WARDEN_E2E_TAG"),
		upgradeTag:    os.Getenv("WARDEN_E2E_UPGRADE_TAG"),
		registryImage: os.Getenv("WARDEN_E2E_REGISTRY_IMAGE"),
		podImage:      os.Getenv("WARDEN_E2E_POD_IMAGE"),
	}
	for name, v := range map[string]string{
		"WARDEN_E2E_KUBECONFIG": e.kubeconfig, "WARDEN_E2E_HELM": e.helm, "WARDEN_E2E_TAG": e.tag,
		"WARDEN_E2E_UPGRADE_TAG": e.upgradeTag, "WARDEN_E2E_REGISTRY_IMAGE": e.registryImage, "WARDEN_E2E_POD_IMAGE": e.podImage,
	} {
		if v == "" {
			t.Fatalf("%s is not set: run the suite with hack/e2e.sh (see doc.go)", name)
		}
	}
	return e
}

// suite is what the steps of TestE2E share.
type suite struct {
	env
	cfg       *rest.Config
	c         client.Client
	kube      *kubernetes.Clientset
	chartDir  string
	registry  string // the registry's ClusterIP:port, which the test pushes to
	timings   map[string]time.Duration
	timingsMu sync.Mutex
}

// TestE2E installs the chart and runs Kubewarden's end-to-end scenarios in
// order, each on what the previous left: a later step is skipped once an
// earlier one it needs has failed. The uninstall steps run last.
func TestE2E(t *testing.T) {
	s := newSuite(t)
	diagnosed := false
	diagnose := func() {
		if t.Failed() && !diagnosed {
			diagnosed = true
			s.dumpDiagnostics(t, namespace, registryNamespace, "e2e-protect", "e2e-monitor", "e2e-team", "e2e-context")
		}
	}
	t.Cleanup(func() {
		diagnose()
		s.logTimings(t)
	})
	steps := []struct {
		name string
		run  func(*testing.T)
	}{
		{"install", s.install},
		{"registry", s.startRegistry},
		{"basic", s.basic},
		{"monitor", s.monitor},
		{"mutating", s.mutating},
		{"namespaced", s.namespaced},
		{"context-aware", s.contextAware},
		{"settings-change", s.settingsChange},
		{"scaling", s.scaling},
		{"audit", s.audit},
		{"upgrade", s.upgrade},
		{"shared-cache", s.sharedCache},
	}
	for _, step := range steps {
		if !t.Run(step.name, step.run) {
			break
		}
	}
	diagnose() // while the pods that failed still run
	// Whatever happened above, the release goes, and must leave nothing.
	if !t.Run("uninstall", s.uninstall) || !t.Run("reinstall", s.reinstall) {
		diagnosed = false // what the uninstall or the reinstall left
		diagnose()
	}
}

func newSuite(t *testing.T) *suite {
	e := loadEnv(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	scheme, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	root := policybuild.RepoRootForTest(t)
	return &suite{env: e, cfg: cfg, c: c, kube: kube, chartDir: filepath.Join(root, "charts", "warden"), timings: map[string]time.Duration{}}
}

// helm runs the helm CLI against the cluster and returns its output.
func (s *suite) helm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), s.env.helm, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// imageArgs are the helm flags that set every Warden image's tag; the
// other values are the chart's defaults.
func imageArgs(tag string) []string {
	return []string{
		"--set", "controller.image.tag=" + tag,
		"--set", "policyServer.image.tag=" + tag,
		"--set", "auditScanner.image.tag=" + tag,
	}
}

func (s *suite) record(name string, d time.Duration) {
	s.timingsMu.Lock()
	defer s.timingsMu.Unlock()
	s.timings[name] = d
}

func (s *suite) logTimings(t *testing.T) {
	s.timingsMu.Lock()
	defer s.timingsMu.Unlock()
	names := make([]string, 0, len(s.timings))
	for n := range s.timings {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("timing: %s: %s", n, s.timings[n].Round(time.Millisecond))
	}
}

func (s *suite) install(t *testing.T) {
	start := time.Now()
	args := append([]string{"install", release, s.chartDir, "--namespace", namespace, "--create-namespace", "--wait", "--timeout", "5m"}, imageArgs(s.tag)...)
	s.helm(t, args...)
	s.waitPolicyServerReady(t, 1)
	s.record("helm install to the default PolicyServer ready", time.Since(start))
}

// waitPolicyServerReady waits until the default PolicyServer's StatefulSet
// has replicas ready pods, all of the current revision.
func (s *suite) waitPolicyServerReady(t *testing.T, replicas int32) {
	t.Helper()
	testkit.Eventually(t, 5*time.Minute, fmt.Sprintf("policy-server-default has %d ready replicas", replicas), func() bool {
		var sts appsv1.StatefulSet
		if s.c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: "policy-server-default"}, &sts) != nil {
			return false
		}
		st := sts.Status
		return st.ObservedGeneration == sts.Generation && st.ReadyReplicas == replicas && st.Replicas == replicas &&
			st.UpdatedReplicas == replicas && ptr.Deref(sts.Spec.Replicas, 1) == replicas
	})
}

// startRegistry runs hack/e2eregistry in the cluster, pushes the test
// policies to it from this machine with wardenctl, and lets the default
// PolicyServer pull from it over plain HTTP.
func (s *suite) startRegistry(t *testing.T) {
	ctx := t.Context()
	mustCreate(t, s.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: registryNamespace}})
	labels := map[string]string{"app": "e2e-registry"}
	mustCreate(t, s.c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: registryNamespace, Name: "e2e-registry"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "registry", Image: s.registryImage, ImagePullPolicy: corev1.PullNever,
					Ports: []corev1.ContainerPort{{ContainerPort: 5000}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/v2/", Port: intOrString(5000)},
					}, PeriodSeconds: 1},
				}}},
			},
		},
	})
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: registryNamespace, Name: "e2e-registry"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 5000, TargetPort: intOrString(5000)}}},
	}
	mustCreate(t, s.c, svc)
	testkit.Eventually(t, 3*time.Minute, "the registry is ready", func() bool {
		var d appsv1.Deployment
		return s.c.Get(ctx, client.ObjectKeyFromObject(svc), &d) == nil && d.Status.ReadyReplicas == 1
	})
	s.registry = fmt.Sprintf("%s:5000", svc.Spec.ClusterIP)
	// kube-proxy refuses connections to a Service until it has synced the
	// Service's endpoints.
	testkit.Eventually(t, time.Minute, "the registry answers at its ClusterIP", func() bool {
		resp, err := http.Get("http://" + s.registry + "/v2/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// wardenctl reaches the registry at its ClusterIP, through kube-proxy's
	// rules on this machine.
	sources := filepath.Join(t.TempDir(), "sources.yml")
	if err := os.WriteFile(sources, fmt.Appendf(nil, "insecure_sources: [%q]\n", s.registry), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"pod-privileged":     "../../examples/policies/pod-privileged",
		"default-team-label": "../../examples/policies/default-team-label",
		"list-resources":     "list-resources",
	} {
		module := policybuild.ForTest(t, path)
		s.wardenctl(t, "push", "--sources-path", sources, module, "registry://"+s.registry+"/policies/"+name+":v1")
	}

	// The policy servers pull by the Service's name, over plain HTTP.
	ps := &policiesv1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	patch := fmt.Appendf(nil, `{"spec":{"insecureSources":[%q]}}`, registryHost)
	if err := s.c.Patch(ctx, ps, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	s.waitPolicyServerReady(t, 1)
}

// wardenctl runs wardenctl in this process.
func (s *suite) wardenctl(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	home := t.TempDir()
	getenv := func(k string) string {
		if k == "HOME" {
			return home
		}
		return os.Getenv(k)
	}
	if code := wardenctl.Main(t.Context(), args, strings.NewReader(""), &stdout, &stderr, getenv); code != 0 {
		t.Fatalf("wardenctl %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func registryModule(name string) string {
	return "registry://" + registryHost + "/policies/" + name + ":v1"
}

// testNamespace creates a namespace whose label key selects the policies
// of one step.
func (s *suite) testNamespace(t *testing.T, name, label string) {
	t.Helper()
	mustCreate(t, s.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}}})
}

func selector(label string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}}
}

func podRules() []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}
}

// pod is a pod of the pod image, privileged or not.
func (s *suite) pod(ns, name string, privileged bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "app", Image: s.podImage, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(privileged)},
			}},
		},
	}
}

// createPolicy creates p and waits until it is active.
func (s *suite) createPolicy(t *testing.T, p policiesv1.Policy) {
	t.Helper()
	start := time.Now()
	mustCreate(t, s.c, p)
	s.waitActive(t, p)
	s.record(p.GetName()+" active after creation", time.Since(start))
}

func (s *suite) waitActive(t *testing.T, p policiesv1.Policy) {
	t.Helper()
	testkit.Eventually(t, 3*time.Minute, p.GetName()+" is active", func() bool {
		got := p.DeepCopyPolicy()
		if err := s.c.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
			return false
		}
		return got.GetStatus().PolicyStatus == policiesv1.PolicyStatusActive
	})
}

// assertDenied checks that creating pod is refused with message.
func (s *suite) assertDenied(t *testing.T, pod *corev1.Pod, message string) {
	t.Helper()
	err := s.c.Create(t.Context(), pod, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), message) {
		t.Fatalf("creating pod %s/%s: %v, want a denial with %q", pod.Namespace, pod.Name, err, message)
	}
}

func (s *suite) assertAdmitted(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if err := s.c.Create(t.Context(), pod, client.DryRunAll); err != nil {
		t.Fatalf("creating pod %s/%s: %v, want it admitted", pod.Namespace, pod.Name, err)
	}
}

func (s *suite) basic(t *testing.T) {
	s.testNamespace(t, "e2e-protect", "e2e/protect")
	start := time.Now()
	s.createPolicy(t, &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged-pods"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{
			PolicySpec:        policiesv1.PolicySpec{Module: registryModule("pod-privileged"), Rules: podRules(), BackgroundAudit: true},
			NamespaceSelector: selector("e2e/protect"),
		},
	})
	// A real pod, run by the kubelet: the audit step reads it.
	if err := s.c.Create(t.Context(), s.pod("e2e-protect", "unprivileged", false)); err != nil {
		t.Fatalf("creating an unprivileged pod: %v", err)
	}
	s.assertDenied(t, s.pod("e2e-protect", "privileged", true), "Privileged container is not allowed")
	s.record("policy created to first rejected pod", time.Since(start))
}

func (s *suite) monitor(t *testing.T) {
	s.testNamespace(t, "e2e-monitor", "e2e/monitor")
	s.createPolicy(t, &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged-pods-monitor"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{
			PolicySpec: policiesv1.PolicySpec{
				Module: registryModule("pod-privileged"), Rules: podRules(), Mode: policiesv1.PolicyModeMonitor, BackgroundAudit: true,
			},
			NamespaceSelector: selector("e2e/monitor"),
		},
	})
	// Stored, so that the audit step finds a pod that fails the policy.
	if err := s.c.Create(t.Context(), s.pod("e2e-monitor", "privileged", true)); err != nil {
		t.Fatalf("creating a privileged pod under a monitor policy: %v", err)
	}
}

func (s *suite) mutating(t *testing.T) {
	s.testNamespace(t, "e2e-mutate", "e2e/mutate")
	s.createPolicy(t, &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default-team-label"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{
			PolicySpec: policiesv1.PolicySpec{
				Module: registryModule("default-team-label"), Rules: podRules(), Mutating: true,
				Settings: runtime.RawExtension{Raw: []byte(`{"default_team":"e2e"}`)},
			},
			NamespaceSelector: selector("e2e/mutate"),
		},
	})
	pod := s.pod("e2e-mutate", "unlabelled", false)
	if err := s.c.Create(t.Context(), pod); err != nil {
		t.Fatalf("creating a pod: %v", err)
	}
	var got corev1.Pod
	if err := s.c.Get(t.Context(), client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	if got.Labels["team"] != "e2e" {
		t.Errorf("the stored pod's labels are %v, want team=e2e from the policy's patch", got.Labels)
	}
}

func (s *suite) namespaced(t *testing.T) {
	for _, ns := range []string{"e2e-team", "e2e-other"} {
		s.testNamespace(t, ns, "e2e/"+ns)
	}
	s.createPolicy(t, &policiesv1.AdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "e2e-team", Name: "app-label"},
		Spec: policiesv1.AdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			Module:   "builtin://cel",
			Settings: appLabelSettings("pods need an app label"),
			Rules:    podRules(),
		}},
	})
	s.assertDenied(t, s.pod("e2e-team", "unlabelled", false), "pods need an app label")
	s.assertAdmitted(t, s.pod("e2e-other", "unlabelled", false))
}

func appLabelSettings(message string) runtime.RawExtension {
	return runtime.RawExtension{Raw: fmt.Appendf(nil,
		`{"validations":[{"expression":"has(object.metadata.labels) && 'app' in object.metadata.labels","message":%q}]}`, message)}
}

// contextAware runs a policy that lists the ConfigMaps of a namespace
// through the kubernetes host capability, answered from the policy
// server's reflectors: a pod is admitted once there are enough of them.
func (s *suite) contextAware(t *testing.T) {
	ctx := t.Context()
	s.testNamespace(t, "e2e-context", "e2e/context")
	// kube-controller-manager publishes kube-root-ca.crt into every new
	// namespace a moment after it is created: count only once it is there,
	// or it arrives after the count and admits the pod meant to be denied.
	testkit.Eventually(t, time.Minute, "kube-root-ca.crt is published in e2e-context", func() bool {
		return s.c.Get(ctx, client.ObjectKey{Namespace: "e2e-context", Name: "kube-root-ca.crt"}, &corev1.ConfigMap{}) == nil
	})
	var cms corev1.ConfigMapList
	if err := s.c.List(ctx, &cms, client.InNamespace("e2e-context")); err != nil {
		t.Fatal(err)
	}
	want := len(cms.Items) + 1
	s.createPolicy(t, &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "enough-configmaps"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{
			PolicySpec: policiesv1.PolicySpec{
				Module: registryModule("list-resources"), Rules: podRules(),
				Settings: runtime.RawExtension{Raw: fmt.Appendf(nil,
					`{"call":"namespace","namespace":"e2e-context","api_version":"v1","kind":"ConfigMap","scan":true,"min_items":%d}`, want)},
			},
			NamespaceSelector:     selector("e2e/context"),
			ContextAwareResources: []policiesv1.ContextAwareResource{{APIVersion: "v1", Kind: "ConfigMap"}},
		},
	})
	s.assertDenied(t, s.pod("e2e-context", "early", false), fmt.Sprintf("want at least %d", want))
	mustCreate(t, s.c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "e2e-context", Name: "one-more"}})
	testkit.Eventually(t, time.Minute, "the policy sees the new ConfigMap", func() bool {
		return s.c.Create(ctx, s.pod("e2e-context", "late", false), client.DryRunAll) == nil
	})
}

// settingsChange changes a policy's settings: the new ones are in effect
// without a restart of any policy-server pod.
func (s *suite) settingsChange(t *testing.T) {
	ctx := t.Context()
	before := s.policyServerPods(t)
	p := &policiesv1.AdmissionPolicy{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: "e2e-team", Name: "app-label"}, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Settings = appLabelSettings("the app label is missing")
	start := time.Now()
	if err := s.c.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 2*time.Minute, "the new message is in effect", func() bool {
		err := s.c.Create(ctx, s.pod("e2e-team", "unlabelled", false), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "the app label is missing")
	})
	s.record("settings change to in effect", time.Since(start))
	if after := s.policyServerPods(t); after != before {
		t.Errorf("policy-server pods (uid/restarts) before the change: %s, after: %s", before, after)
	}
}

// policyServerPods describes the default policy server's pods: name, UID
// and restart count of each.
func (s *suite) policyServerPods(t *testing.T) string {
	t.Helper()
	var pods corev1.PodList
	if err := s.c.List(t.Context(), &pods, client.InNamespace(namespace), client.MatchingLabels{"kubewarden/policy-server": "default"}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		restarts := int32(0)
		for _, cs := range p.Status.ContainerStatuses {
			restarts += cs.RestartCount
		}
		out = append(out, fmt.Sprintf("%s/%s/%d", p.Name, p.UID, restarts))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// admissionLoad creates a pod (server-side dry run, through every webhook)
// every 200 ms until stopped, and counts what failed: every one must get
// the answer its namespace's policies give.
type admissionLoad struct {
	total, failed atomic.Int64
	mu            sync.Mutex
	errs          []string
	stop          func()
}

func (s *suite) startAdmissionLoad(t *testing.T) *admissionLoad {
	t.Helper()
	l := &admissionLoad{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ns := "e2e-protect"
			privileged := i%2 == 1
			err := s.c.Create(ctx, s.pod(ns, fmt.Sprintf("load-%d", i), privileged), client.DryRunAll)
			if ctx.Err() != nil {
				return
			}
			l.total.Add(1)
			ok := err == nil
			if privileged {
				ok = err != nil && strings.Contains(err.Error(), "Privileged container is not allowed")
			}
			if !ok {
				l.failed.Add(1)
				l.mu.Lock()
				l.errs = append(l.errs, fmt.Sprintf("pod %d (privileged %v): %v", i, privileged, err))
				l.mu.Unlock()
			}
		}
	}()
	l.stop = func() {
		cancel()
		<-done
	}
	return l
}

// check stops the load and fails t if any admission failed.
func (l *admissionLoad) check(t *testing.T, what string) {
	t.Helper()
	l.stop()
	t.Logf("%s: %d admissions, %d failed", what, l.total.Load(), l.failed.Load())
	if l.total.Load() == 0 {
		t.Errorf("%s: no admission was made", what)
	}
	if n := l.failed.Load(); n > 0 {
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Errorf("%s: %d of %d admissions failed, the first: %s", what, n, l.total.Load(), l.errs[0])
	}
}

func (s *suite) scalePolicyServer(t *testing.T, replicas int32) {
	t.Helper()
	ps := &policiesv1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if err := s.c.Patch(t.Context(), ps, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	s.waitPolicyServerReady(t, replicas)
}

func (s *suite) scaling(t *testing.T) {
	load := s.startAdmissionLoad(t)
	s.scalePolicyServer(t, 3)
	// Every replica serves every policy before the scale-down.
	s.assertDenied(t, s.pod("e2e-team", "unlabelled", false), "the app label is missing")
	s.scalePolicyServer(t, 1)
	time.Sleep(2 * time.Second) // a few more admissions on the one replica left
	load.check(t, "scaling 1 -> 3 -> 1")
}

// audit runs the audit scanner's CronJob now, as NOTES.txt says, and reads
// the reports it writes for the pods already in the cluster.
func (s *suite) audit(t *testing.T) {
	ctx := t.Context()
	var cron batchv1.CronJob
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-audit-scanner"}, &cron); err != nil {
		t.Fatal(err)
	}
	// As `kubectl create job --from=cronjob/...` makes it: owned by the
	// CronJob, so that it goes with the release.
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "e2e-audit-now",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: cron.Name, UID: cron.UID}}},
		Spec: cron.Spec.JobTemplate.Spec,
	}
	start := time.Now()
	mustCreate(t, s.c, job)
	testkit.Eventually(t, 5*time.Minute, "the audit Job completes", func() bool {
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false
		}
		if job.Status.Failed > 0 {
			t.Fatalf("the audit Job failed: %+v", job.Status)
		}
		return job.Status.Succeeded > 0
	})
	s.record("audit run", time.Since(start))

	// The privileged pod stored under the monitor policy fails it; the
	// unprivileged one passes the protect policy.
	for _, tc := range []struct {
		ns, pod, policy, result string
	}{
		{"e2e-monitor", "privileged", "clusterwide-privileged-pods-monitor", "fail"},
		{"e2e-protect", "unprivileged", "clusterwide-privileged-pods", "pass"},
	} {
		if got := s.reportResult(t, tc.ns, tc.pod, tc.policy); got != tc.result {
			t.Errorf("the report of pod %s/%s says %q for %s, want %q", tc.ns, tc.pod, got, tc.policy, tc.result)
		}
	}
}

// reportResult returns the result of policy in the OpenReports Report of
// pod, "" when there is none.
func (s *suite) reportResult(t *testing.T, ns, podName, policy string) string {
	t.Helper()
	var pod corev1.Pod
	if err := s.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: podName}, &pod); err != nil {
		t.Fatal(err)
	}
	var report unstructured.Unstructured
	report.SetAPIVersion("openreports.io/v1alpha1")
	report.SetKind("Report")
	if err := s.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: string(pod.UID)}, &report); err != nil {
		t.Logf("the report of pod %s/%s: %v", ns, podName, err)
		return ""
	}
	results, _, _ := unstructured.NestedSlice(report.Object, "results")
	for _, r := range results {
		m, _ := r.(map[string]any)
		if m["policy"] == policy {
			result, _ := m["result"].(string)
			return result
		}
	}
	return ""
}

// upgrade moves the release to other image tags under a stream of pod
// creations: none fails.
func (s *suite) upgrade(t *testing.T) {
	load := s.startAdmissionLoad(t)
	start := time.Now()
	args := append([]string{"upgrade", release, s.chartDir, "--namespace", namespace, "--wait", "--timeout", "5m"}, imageArgs(s.upgradeTag)...)
	s.helm(t, args...)
	testkit.Eventually(t, 5*time.Minute, "the policy server runs the new image", func() bool {
		var sts appsv1.StatefulSet
		if s.c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: "policy-server-default"}, &sts) != nil {
			return false
		}
		return strings.HasSuffix(sts.Spec.Template.Spec.Containers[0].Image, ":"+s.upgradeTag)
	})
	s.waitPolicyServerReady(t, 1)
	s.record("helm upgrade to the policy server rolled", time.Since(start))
	time.Sleep(2 * time.Second)
	load.check(t, "helm upgrade")
}

// sharedCache gives the policy servers the chart's shared policy cache, a
// ReadWriteMany claim of the node's default StorageClass, and two replicas:
// one compiles each module and stores it, signed, the other copies it
// (docs/lifecycle.md).
func (s *suite) sharedCache(t *testing.T) {
	args := []string{"upgrade", release, s.chartDir, "--namespace", namespace, "--reuse-values", "--wait", "--timeout", "5m",
		"--set", "policyServer.policyCache.create=true", "--set", "policyServer.replicas=2"}
	s.helm(t, args...)
	s.waitPolicyServerReady(t, 2)
	testkit.Eventually(t, 3*time.Minute, "one replica stored a compiled module in the shared cache and the other copied it", func() bool {
		logs := s.policyServerLogs(t)
		stored, copied := 0, 0
		for _, l := range logs {
			if strings.Contains(l, "compiled module stored in the shared cache") {
				stored++
			}
			if strings.Contains(l, "compiled module copied from the shared cache") {
				copied++
			}
		}
		return stored > 0 && copied > 0
	})
	s.assertDenied(t, s.pod("e2e-protect", "privileged", true), "Privileged container is not allowed")
}

// policyServerLogs returns the logs of each of the default policy server's
// pods.
func (s *suite) policyServerLogs(t *testing.T) []string {
	t.Helper()
	pods, err := s.kube.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "kubewarden/policy-server=default"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		b, err := s.kube.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "policy-server"}).DoRaw(t.Context())
		if err == nil {
			out = append(out, string(b))
		}
	}
	return out
}

// uninstall removes the release with policies of every step present: the
// pre-delete hook leaves nothing of Warden's but the CRDs.
func (s *suite) uninstall(t *testing.T) {
	start := time.Now()
	s.helm(t, "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "5m")
	s.record("helm uninstall", time.Since(start))
	s.assertNothingLeft(t)
	// No webhook is left to refuse anything.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-after-uninstall"}}
	if err := s.c.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	s.assertAdmitted(t, s.pod(ns.Name, "privileged-after-uninstall", true))
}

// reinstall installs the chart again right after the uninstall, checks a
// policy works, and uninstalls it.
func (s *suite) reinstall(t *testing.T) {
	args := append([]string{"install", release, s.chartDir, "--namespace", namespace, "--wait", "--timeout", "5m"}, imageArgs(s.tag)...)
	s.helm(t, args...)
	s.waitPolicyServerReady(t, 1)
	s.createPolicy(t, &policiesv1.AdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "e2e-team", Name: "app-label"},
		Spec: policiesv1.AdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			Module: "builtin://cel", Settings: appLabelSettings("reinstalled"), Rules: podRules(),
		}},
	})
	s.assertDenied(t, s.pod("e2e-team", "unlabelled", false), "reinstalled")
	s.helm(t, "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "5m")
	s.assertNothingLeft(t)
}

// assertNothingLeft checks that no webhook configuration, policy,
// PolicyServer, revision, policy-server workload, Secret or Lease of
// Warden's is left, and no object held by a finalizer. Pods and what the
// garbage collector removes may take a while after helm returns: what is
// left is looked for until a minute has passed.
func (s *suite) assertNothingLeft(t *testing.T) {
	t.Helper()
	var left []string
	deadline := time.Now().Add(time.Minute)
	for {
		left = s.leftovers(t)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(left) > 0 {
		t.Errorf("left after helm uninstall: %v", left)
	}
}

// leftovers lists what assertNothingLeft looks for, as "kind namespace/name".
func (s *suite) leftovers(t *testing.T) []string {
	t.Helper()
	ctx := t.Context()
	var left []string
	check := func(kind string, l client.ObjectList, opts ...client.ListOption) {
		t.Helper()
		if err := s.c.List(ctx, l, opts...); err != nil {
			left = append(left, fmt.Sprintf("%s (listing: %v)", kind, err))
			return
		}
		items, err := clustertest.Items(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range items {
			if kind == "Secret" && strings.HasPrefix(o.GetName(), "sh.helm.release.") {
				continue // the release's own record, gone with the release
			}
			left = append(left, kind+" "+strings.TrimPrefix(o.GetNamespace()+"/"+o.GetName(), "/"))
		}
	}
	inNS := client.InNamespace(namespace)
	partOf := client.MatchingLabels{"app.kubernetes.io/part-of": "kubewarden"}
	check("ValidatingWebhookConfiguration", &admissionregistrationv1.ValidatingWebhookConfigurationList{}, partOf)
	check("MutatingWebhookConfiguration", &admissionregistrationv1.MutatingWebhookConfigurationList{}, partOf)
	for _, name := range []string{"kubewarden-controller-validating-webhook-configuration", "kubewarden-controller-mutating-webhook-configuration"} {
		if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.ValidatingWebhookConfiguration{}); !apierrors.IsNotFound(err) {
			left = append(left, "ValidatingWebhookConfiguration "+name)
		}
		if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.MutatingWebhookConfiguration{}); !apierrors.IsNotFound(err) {
			left = append(left, "MutatingWebhookConfiguration "+name)
		}
	}
	check("ClusterAdmissionPolicy", &policiesv1.ClusterAdmissionPolicyList{})
	check("AdmissionPolicy", &policiesv1.AdmissionPolicyList{})
	check("ClusterAdmissionPolicyGroup", &policiesv1.ClusterAdmissionPolicyGroupList{})
	check("AdmissionPolicyGroup", &policiesv1.AdmissionPolicyGroupList{})
	check("PolicyServer", &policiesv1.PolicyServerList{})
	check("PolicyRevision", &policiesv1.PolicyRevisionList{})
	check("StatefulSet", &appsv1.StatefulSetList{}, inNS)
	check("Deployment", &appsv1.DeploymentList{}, inNS)
	check("Job", &batchv1.JobList{}, inNS)
	check("Pod", &corev1.PodList{}, inNS)
	check("Lease", &coordinationv1.LeaseList{}, inNS)
	check("PersistentVolumeClaim", &corev1.PersistentVolumeClaimList{}, inNS)
	check("Secret", &corev1.SecretList{}, inNS)
	return left
}

// dumpDiagnostics logs the pods' logs and the events of the namespaces.
func (s *suite) dumpDiagnostics(t *testing.T, namespaces ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ns := range namespaces {
		pods, err := s.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("listing the pods of %s: %v", ns, err)
			continue
		}
		for _, p := range pods.Items {
			status, _ := json.Marshal(p.Status.ContainerStatuses)
			t.Logf("pod %s/%s: phase %s, containers %s", ns, p.Name, p.Status.Phase, status)
			for _, c := range p.Spec.Containers {
				for _, previous := range []bool{false, true} {
					req := s.kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, Previous: previous, TailLines: ptr.To[int64](200)})
					rc, err := req.Stream(ctx)
					if err != nil {
						continue
					}
					logs, _ := io.ReadAll(rc)
					rc.Close()
					t.Logf("logs of %s/%s %s (previous: %v):\n%s", ns, p.Name, c.Name, previous, logs)
				}
			}
		}
		events, err := s.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("listing the events of %s: %v", ns, err)
			continue
		}
		sort.Slice(events.Items, func(i, j int) bool { return events.Items[i].LastTimestamp.Before(&events.Items[j].LastTimestamp) })
		for _, e := range events.Items {
			t.Logf("event %s %s/%s: %s %s: %s", ns, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
		}
	}
}

func mustCreate(t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Create(t.Context(), o); err != nil {
		t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

func intOrString(port int) intstr.IntOrString { return intstr.FromInt32(int32(port)) }
