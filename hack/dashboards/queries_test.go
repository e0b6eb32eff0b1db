//go:build cluster

package dashboards

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/controller"
	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policyserver"
	"github.com/wardenhq/warden/internal/testkit"
)

// The scrapes are stored at these timestamps, whatever the time it took
// to make them: a quiet hour of accepted requests scraped every five
// minutes, then a burst of rejections scraped every 15 seconds, the
// interval the dashboard's $__rate_interval (1m) is chosen for. The
// rejection alert compares the burst with the hour before it.
const (
	quietRounds   = 15
	quietInterval = 5 * time.Minute
	burstRounds   = 8
	burstInterval = 15 * time.Second
)

// start is the timestamp of the first scrape.
var start = time.Unix(1_800_000_000, 0)

// Target labels, as the chart's PodMonitor and ServiceMonitor give them to
// the policy servers' and the controller's series (the policy_server label
// is the chart's relabeling; job, namespace, pod and service are the
// Prometheus Operator's).
var (
	policyServerTarget = map[string]string{
		"job": "kubewarden/warden-policy-servers", "namespace": "kubewarden",
		"pod": "policy-server-default-0", "container": "policy-server", "policy_server": "default",
	}
	controllerTarget = map[string]string{
		"job": "warden-controller-metrics", "service": "warden-controller-metrics", "namespace": "kubewarden",
		"pod": "warden-controller-5d8f7c9b4-x2x7q", "container": "controller", "endpoint": "metrics",
	}
)

// TestQueriesReturnData runs a policy server with the example policies and
// a context-aware policy, the controller with a few policies, and a
// replica in cluster mode that serves those policies' revisions, on one
// API server; sends the policy server accepted, rejected, mutated,
// monitor-mode, failing, refused (a body over the limit) and audit
// requests and a hot reload, and rolls out a policy's second generation;
// scrapes the three, and evaluates every query of
// the dashboard and every alert with Prometheus's engine: each panel query
// and variable must return a value, and each alert must fire exactly when
// the requests call for it.
func TestQueriesReturnData(t *testing.T) {
	cl := startCluster(t)
	controllerMetrics := startController(t, cl)
	replicaMetrics := startClusterReplica(t, cl.Config)
	ps := startPolicyServer(t, cl.Config)
	st := teststorage.New(t)
	s := &scraper{storage: st}
	psMetrics := metricsURL(ps.readiness)
	psTarget := withInstance(policyServerTarget, ps.readiness)
	replicaTarget := withInstance(policyServerTarget, replicaMetrics)
	replicaTarget["pod"] = clusterReplica
	ctrlTarget := withInstance(controllerTarget, controllerMetrics)

	now := start
	round := func(burst bool) {
		ps.traffic(t, burst)
		s.scrape(t, psMetrics, psTarget, now)
		s.scrape(t, metricsURL(replicaMetrics), replicaTarget, now)
		s.scrape(t, metricsURL(controllerMetrics), ctrlTarget, now)
	}
	for range quietRounds {
		round(false)
		now = now.Add(quietInterval)
	}
	for i := range burstRounds {
		if i == burstRounds/2 {
			ps.reload(t)
			rollout(t, cl.Client, replicaMetrics)
		}
		round(true)
		if i < burstRounds-1 {
			now = now.Add(burstInterval)
		}
	}
	end := now

	engine := promql.NewEngine(promql.EngineOpts{
		Logger: slog.New(slog.DiscardHandler), MaxSamples: 1_000_000, Timeout: time.Minute,
		LookbackDelta: 5 * time.Minute, EnableAtModifier: true, EnableNegativeOffset: true,
	})
	panels, variables := loadDashboard(t)
	for _, q := range append(panels, variables...) {
		t.Run(q.name, func(t *testing.T) {
			// A range query over the burst, as the panel's graph asks.
			qry, err := engine.NewRangeQuery(t.Context(), st, nil, q.expr, end.Add(-time.Duration(burstRounds-1)*burstInterval), end, burstInterval)
			if err != nil {
				t.Fatalf("%v\n%s", err, q.expr)
			}
			defer qry.Close()
			r := qry.Exec(t.Context())
			if r.Err != nil {
				t.Fatalf("%v\n%s", r.Err, q.expr)
			}
			if !hasValue(r.Value) {
				t.Errorf("no data:\n%s", q.expr)
			}
		})
	}

	// The alerts: their expressions, without their for clauses, at the end
	// of the burst.
	wantFiring := map[string]bool{
		"WardenPolicyServerDown":         false, // every scrape succeeded
		"WardenControllerDown":           false,
		"WardenPolicyEvaluationsFailing": true,  // the policy loop always times out
		"WardenRejectionsJump":           true,  // the burst of privileged pods
		"WardenPolicyReloadFailing":      true,  // a policy added by the reload fails to load
		"WardenReflectorNotSynced":       false, // the reflector of Namespaces lists them
		"WardenPolicyGenerationBehind":   false, // one replica serves revisions: none is behind another
	}
	for _, rule := range loadRules(t) {
		t.Run("alert "+rule.Alert, func(t *testing.T) {
			want, known := wantFiring[rule.Alert]
			if !known {
				t.Fatalf("the test does not know when %s should fire", rule.Alert)
			}
			checkSelectorsMatch(t, st, rule.Expr, end)
			qry, err := engine.NewInstantQuery(t.Context(), st, nil, rule.Expr, end)
			if err != nil {
				t.Fatalf("%v\n%s", err, rule.Expr)
			}
			defer qry.Close()
			r := qry.Exec(t.Context())
			if r.Err != nil {
				t.Fatalf("%v\n%s", r.Err, rule.Expr)
			}
			if got := hasValue(r.Value); got != want {
				t.Errorf("firing = %v, want %v: %v\n%s", got, want, r.Value, rule.Expr)
			}
		})
	}
}

// hasValue says whether a query result holds at least one value that is a
// number (histogram_quantile of empty buckets gives NaN).
func hasValue(v parser.Value) bool {
	switch v := v.(type) {
	case promql.Matrix:
		for _, s := range v {
			for _, p := range s.Floats {
				if !math.IsNaN(p.F) {
					return true
				}
			}
		}
	case promql.Vector:
		for _, s := range v {
			if !math.IsNaN(s.F) {
				return true
			}
		}
	case promql.Scalar:
		return !math.IsNaN(v.V)
	}
	return false
}

// checkSelectorsMatch fails unless every series selector of expr matches a
// series stored before at: an alert that does not fire must not be quiet
// because it names a label value that never exists.
func checkSelectorsMatch(t *testing.T, st storage.Queryable, expr string, at time.Time) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Fatal(err)
	}
	q, err := st.Querier(math.MinInt64, at.UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if set := q.Select(context.Background(), false, nil, vs.LabelMatchers...); !set.Next() {
			t.Errorf("selector %s matches no series (%v)", vs, set.Err())
		}
		return nil
	})
}

// withInstance returns target's labels with instance, the scraped address.
func withInstance(target map[string]string, addr fmt.Stringer) map[string]string {
	out := maps.Clone(target)
	out["instance"] = addr.String()
	return out
}

// policyServer is a policy server, run by policyserver.Main in the test's
// process against the test's API server, on the example policies
// (examples/policies.yml), plus:
//   - loop, a policy that never returns, so that every evaluation times out;
//   - broken, a CEL policy whose settings do not compile, so that it answers
//     every request with its load error (--continue-on-errors);
//   - namespaces-listed, a context-aware policy that lists the Namespaces,
//     which a reflector copies.
//
// Request bodies over 64 KiB are refused (--max-request-body-bytes).
type policyServer struct {
	client    *http.Client
	url       string
	readiness net.Addr // of /readiness and /metrics
	policies  string   // the policies file
	doc       string   // its contents
}

// maxBody is the policy server's --max-request-body-bytes.
const maxBody = 64 << 10

func startPolicyServer(t *testing.T, cfg *rest.Config) *policyServer {
	t.Helper()
	root := policybuild.RepoRootForTest(t)
	build := func(dir string) string {
		module, err := policybuild.Build(t.Context(), filepath.Join(root, dir), policybuild.Options{})
		if err != nil {
			t.Fatalf("building %s: %v", dir, err)
		}
		return "file://" + filepath.ToSlash(module)
	}
	examples, err := os.ReadFile(filepath.Join(root, "examples", "policies.yml"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(examples)
	for _, name := range []string{"pod-privileged", "default-team-label", "deny-latest-tag"} {
		doc = strings.ReplaceAll(doc, "file://examples/build/"+name+".wasm", build(filepath.Join("examples", "policies", name)))
	}
	if strings.Contains(doc, "file://examples/build/") {
		t.Fatalf("examples/policies.yml names a module the test does not build:\n%s", doc)
	}
	doc += fmt.Sprintf(`
loop:
  module: %s
broken:
  module: builtin://cel
  settings:
    validations: [{expression: "nonsense((("}]
namespaces-listed:
  module: %s
  settings: {call: all, api_version: v1, kind: Namespace}
  hostCapabilities: ["kubernetes/*"]
  contextAwareResources: [{apiVersion: v1, kind: Namespace}]
`, build(filepath.Join("testdata", "policies", "loop")), build(filepath.Join("testdata", "policies", "list-resources")))

	dir := t.TempDir()
	p := &policyServer{policies: filepath.Join(dir, "policies.yml"), doc: doc, client: &http.Client{Timeout: time.Minute}}
	if err := os.WriteFile(p.policies, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, clustertest.Kubeconfig(t, cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	port, readiness := testkit.FreePort(t), testkit.FreePort(t)
	p.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	p.readiness = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: readiness}
	env := map[string]string{"KUBECONFIG": kubeconfig, "HOME": dir}
	args := []string{"--addr", "127.0.0.1", "--port", fmt.Sprint(port), "--readiness-probe-port", fmt.Sprint(readiness),
		"--policies", p.policies, "--policies-download-dir", dir, "--sigstore-cache-dir", filepath.Join(dir, "sigstore"), "--cache-dir", "",
		"--workers", "2", "--policy-timeout", "250ms", "--continue-on-errors", "--max-request-body-bytes", fmt.Sprint(maxBody)}
	done, logs := runPolicyServer(t, "policy server", args, env)
	// Ready once every policy loaded and the reflector listed the
	// Namespaces.
	testkit.Eventually(t, 2*time.Minute, "the policy server is ready", func() bool {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("the policy server stopped: exit %d\n%s", code, logs.String())
		default:
		}
		resp, err := http.Get("http://" + p.readiness.String() + "/readiness")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// A pod's variants, as the example policies see them.
const (
	goodPod       = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"shop","labels":{"team":"shop"}},"spec":{"containers":[{"name":"web","image":"nginx:1.27"}]}}`
	unlabelledPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"shop"},"spec":{"containers":[{"name":"web","image":"nginx:1.27"}]}}`
	privilegedPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"debug","namespace":"ops","labels":{"team":"sre"}},"spec":{"containers":[{"name":"debug","image":"busybox:1.36","securityContext":{"privileged":true}}]}}`
	latestPod     = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"app","namespace":"dev","labels":{"team":"dev"}},"spec":{"containers":[{"name":"app","image":"app:latest"}]}}`
)

// traffic sends one round of requests: accepted, mutated and rejected ones,
// monitor mode, the failing policies, the context-aware one, one refused
// for its size and the audit scanner's; a burst round adds a flood of
// privileged pods.
func (p *policyServer) traffic(t *testing.T, burst bool) {
	t.Helper()
	send := func(route, policy, pod string, n int) {
		for range n {
			p.review(t, route, policy, pod)
		}
	}
	for _, policy := range []string{"pod-privileged", "pod-privileged-monitor", "deny-latest-tag", "pod-team-label", "pod-hardening"} {
		send("validate", policy, goodPod, 3)
	}
	send("validate", "default-team-label", unlabelledPod, 2) // mutated
	send("validate", "default-team-label", goodPod, 1)
	send("validate", "pod-team-label", unlabelledPod, 1) // rejected
	send("validate", "deny-latest-tag", latestPod, 1)    // rejected
	send("validate", "pod-privileged-monitor", privilegedPod, 1)
	send("validate", "loop", goodPod, 1)              // times out
	send("validate", "broken", goodPod, 1)            // its load error
	send("validate", "namespaces-listed", goodPod, 1) // lists the reflector's copy
	p.tooLarge(t)
	send("audit", "pod-privileged", privilegedPod, 1)
	send("audit", "pod-team-label", unlabelledPod, 1)
	send("audit", "deny-latest-tag", goodPod, 1)
	if burst {
		send("validate", "pod-privileged", privilegedPod, 10)
		send("validate", "pod-hardening", privilegedPod, 2)
	}
}

// review sends the CREATE of pod to /route/policy and checks that it is
// answered.
func (p *policyServer) review(t *testing.T, route, policy, pod string) {
	t.Helper()
	body := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
		"uid":"0c1d6f8a-6a4e-4b8e-9a52-1f3c2d4e5f60","kind":{"group":"","version":"v1","kind":"Pod"},
		"resource":{"group":"","version":"v1","resource":"pods"},"requestKind":{"group":"","version":"v1","kind":"Pod"},
		"name":"x","namespace":%q,"operation":"CREATE","userInfo":{"username":"alice"},
		"object":%s}}`, podNamespace(pod), pod)
	resp, err := p.client.Post(p.url+"/"+route+"/"+policy, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s/%s: %v", route, policy, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(answer, []byte(`"response"`)) {
		t.Fatalf("%s/%s: %s %s", route, policy, resp.Status, answer)
	}
}

// tooLarge sends a review over the policy server's body limit, which it
// refuses unread: 413, warden_policy_server_refused_requests_total.
func (p *policyServer) tooLarge(t *testing.T) {
	t.Helper()
	resp, err := p.client.Post(p.url+"/validate/pod-privileged", "application/json", bytes.NewReader(make([]byte, maxBody+1)))
	if err != nil {
		t.Fatalf("a body over the limit: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		answer, _ := io.ReadAll(resp.Body)
		t.Fatalf("a body over the limit: %s %s, want 413", resp.Status, answer)
	}
}

func podNamespace(pod string) string {
	for _, ns := range []string{"shop", "ops", "dev"} {
		if strings.Contains(pod, `"namespace":"`+ns+`"`) {
			return ns
		}
	}
	return "default"
}

// reload adds two policies to the policies file and reloads it: late loads,
// late-missing fails (its module does not exist) and keeps failing.
func (p *policyServer) reload(t *testing.T) {
	t.Helper()
	doc := p.doc + `
late:
  module: builtin://cel
  settings:
    validations: [{expression: "true"}]
late-missing:
  module: file:///nonexistent/late-missing.wasm
`
	if err := os.WriteFile(p.policies, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	// The server watches the file and reloads it.
	wants := []string{
		`warden_policy_reload_total{action="add",policy_name="late",result="success"}`,
		`warden_policy_reload_total{action="add",policy_name="late-missing",result="failure"}`,
	}
	testkit.Eventually(t, time.Minute, "the reload adds late and fails to add late-missing", func() bool {
		metrics := get(metricsURL(p.readiness))
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				return false
			}
		}
		return true
	})
}

// startCluster starts an API server with Warden's CRDs.
func startCluster(t *testing.T) *clustertest.Cluster {
	t.Helper()
	scheme, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	crds := filepath.Join(policybuild.RepoRootForTest(t), "config", "crd", "bases")
	return clustertest.Start(t, clustertest.WithScheme(scheme), clustertest.WithCRDDirectory(crds))
}

// startController starts the controller on cl, creates a PolicyServer and
// three policies, and returns the address of the controller's metrics once
// they count the policies.
func startController(t *testing.T, cl *clustertest.Cluster) net.Addr {
	t.Helper()
	c := cl.Client
	create := func(o client.Object) {
		t.Helper()
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubewarden"}})

	metrics := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: testkit.FreePort(t)}
	opts := controller.DefaultOptions()
	opts.DeploymentsNamespace = "kubewarden"
	opts.MetricsBindAddress, opts.HealthProbeBindAddress = metrics.String(), "0"
	opts.WebhookServerPort = testkit.FreePort(t)
	opts.WebhookURL = fmt.Sprintf("https://127.0.0.1:%d", opts.WebhookServerPort)
	var logs logtest.Buffer
	mgr, err := controller.NewManager(cl.Config, opts, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
		if t.Failed() {
			t.Logf("controller logs:\n%s", logs.String())
		}
	})

	// The controller's own webhooks answer once a dry-run create passes.
	testkit.Eventually(t, 90*time.Second, "the controller's webhooks answer", func() bool {
		probe := &policiesv1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: policiesv1.PolicyServerSpec{Image: "x", Replicas: 1}}
		return c.Create(t.Context(), probe, client.DryRunAll) == nil
	})
	create(&policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		// Replica 0 is the standalone policy server, 1 the one in cluster mode.
		Spec: policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 2},
	})
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}
	cel := runtime.RawExtension{Raw: []byte(`{"validations":[{"expression":"true"}]}`)}
	create(&policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "pods-validated"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Module: "builtin://cel", Rules: rules, Settings: cel,
		}},
	})
	create(&policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "pods-labelled"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Module: "registry://ghcr.io/kubewarden/policies/safe-labels:v1.0.0", Rules: rules, Mutating: true,
		}},
	})
	create(&policiesv1.AdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-pods", Namespace: "default"},
		Spec: policiesv1.AdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Module: "builtin://cel", Rules: rules, Settings: cel, Mode: policiesv1.PolicyModeMonitor,
		}},
	})
	testkit.Eventually(t, 90*time.Second, "kubewarden_policy_total counts the three policies", func() bool {
		return strings.Count(get(metricsURL(metrics)), "\nkubewarden_policy_total{") == 3
	})
	return metrics
}

// get returns the body at url, or "" on an error.
func get(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// runPolicyServer runs policyserver.Main with args and env until the test
// ends, when it must exit with 0; what names it in failures, which show its
// logs. done receives its exit code (a reader that takes it puts it back
// for the cleanup).
func runPolicyServer(t *testing.T, what string, args []string, env map[string]string) (done chan int, logs *logtest.Buffer) {
	t.Helper()
	logs = new(logtest.Buffer)
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- policyserver.Main(ctx, args, io.Discard, logs, func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-exited; code != 0 {
			t.Errorf("%s: exit %d", what, code)
		}
		if t.Failed() {
			t.Logf("%s, logs:\n%s", what, logs.String())
		}
	})
	return exited, logs
}
