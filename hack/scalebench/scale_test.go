//go:build cluster && scale

package scalebench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/rego/regotest"
)

// TestMain runs the informer baseline instead of the tests when the process
// was started as one (see informerMain).
func TestMain(m *testing.M) {
	if resource := os.Getenv(informerEnv); resource != "" {
		os.Exit(informerMain(resource, os.Getenv, os.Stderr))
	}
	os.Exit(m.Run())
}

// Scenario names, as SCALE_SCENARIOS and hack/scalebench.sh take them.
const (
	scenarioNamespaces   = "namespaces"
	scenarioRoleBindings = "rolebindings"
	scenarioPods         = "pods"
)

var allScenarios = []string{scenarioNamespaces, scenarioRoleBindings, scenarioPods}

// config is the benchmark's configuration, read from the environment (see
// the package comment).
type config struct {
	scenarios        []string
	namespaces       int
	roleBindings     int
	pods             int
	podKB            int
	podsPerNamespace int
	clients          []int
	rates            []float64
	duration, warmup time.Duration
	createWorkers    int
	serverArgs       []string
	reportFile       string
	logDir           string
	profileDir       string
}

// loadConfig reads the configuration from getenv.
func loadConfig(getenv func(string) string) (config, error) {
	quick := getenv("SCALE_QUICK") == "1"
	c := config{
		namespaces: 3000, roleBindings: 10000, pods: 2000, podKB: 18, podsPerNamespace: 100,
		duration: 10 * time.Second, warmup: 2 * time.Second, createWorkers: 32,
		clients: []int{1, 20}, rates: []float64{20},
		serverArgs: strings.Fields(getenv("SCALE_SERVER_ARGS")),
		reportFile: getenv("SCALE_REPORT"),
		logDir:     getenv("SCALE_LOGS"),
		profileDir: getenv("SCALE_PROFILES"),
	}
	if quick {
		c.namespaces, c.roleBindings, c.pods = 300, 1000, 200
		c.duration, c.warmup = 5*time.Second, time.Second
	}
	var errs []string
	ints := map[string]*int{
		"SCALE_NAMESPACES": &c.namespaces, "SCALE_ROLEBINDINGS": &c.roleBindings, "SCALE_PODS": &c.pods,
		"SCALE_POD_KB": &c.podKB, "SCALE_PODS_PER_NAMESPACE": &c.podsPerNamespace, "SCALE_CREATE_WORKERS": &c.createWorkers,
	}
	for name, p := range ints {
		if v := getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				errs = append(errs, fmt.Sprintf("%s=%q: want a positive number", name, v))
				continue
			}
			*p = n
		}
	}
	for name, p := range map[string]*time.Duration{"SCALE_DURATION": &c.duration, "SCALE_WARMUP": &c.warmup} {
		if v := getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Sprintf("%s=%q: want a duration such as 10s", name, v))
				continue
			}
			*p = d
		}
	}
	if v := getenv("SCALE_CLIENTS"); v != "" {
		c.clients = nil
		for _, f := range strings.FieldsFunc(v, isListSeparator) {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				errs = append(errs, fmt.Sprintf("SCALE_CLIENTS=%q: want positive numbers", v))
				break
			}
			c.clients = append(c.clients, n)
		}
	}
	if v, ok := lookup(getenv, "SCALE_RATES"); ok {
		c.rates = nil
		for _, f := range strings.FieldsFunc(v, isListSeparator) {
			r, err := strconv.ParseFloat(f, 64)
			if err != nil || r <= 0 {
				errs = append(errs, fmt.Sprintf("SCALE_RATES=%q: want positive rates in req/s", v))
				break
			}
			c.rates = append(c.rates, r)
		}
	}
	c.scenarios = strings.FieldsFunc(getenv("SCALE_SCENARIOS"), isListSeparator)
	if len(c.scenarios) == 0 {
		c.scenarios = allScenarios
	}
	for _, s := range c.scenarios {
		if !slices.Contains(allScenarios, s) {
			errs = append(errs, fmt.Sprintf("unknown scenario %q: want %s", s, strings.Join(allScenarios, ", ")))
		}
	}
	if need := (c.pods + c.podsPerNamespace - 1) / c.podsPerNamespace; slices.Contains(c.scenarios, scenarioPods) && need > c.namespaces {
		errs = append(errs, fmt.Sprintf("%d pods at %d a namespace need %d namespaces, SCALE_NAMESPACES is %d", c.pods, c.podsPerNamespace, need, c.namespaces))
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return c, nil
}

// lookup is getenv that tells an empty value from no value: "SCALE_RATES="
// asks for no open-loop run. getenv cannot tell, so os.LookupEnv decides when
// getenv is os.Getenv's.
func lookup(getenv func(string) string, name string) (string, bool) {
	if v := getenv(name); v != "" {
		return v, true
	}
	_, ok := os.LookupEnv(name)
	return "", ok
}

func isListSeparator(r rune) bool { return r == ',' || r == ' ' }

func (c config) has(scenario string) bool { return slices.Contains(c.scenarios, scenario) }

// bench is what the scenarios share.
type bench struct {
	cfg          config
	root         string // of the repository
	work         string // temporary directory of the run
	policyServer string // binary
	loadtest     string // binary
	self         string // this test binary, run again as the informer
	kubeconfig   string
	clientset    *kubernetes.Clientset
	podReview    string // AdmissionReview bodies
	rbReview     string
	serverFlags  string          // of the policy server's --help
	ctx          context.Context // done when the run is interrupted
}

// TestScale is the benchmark: see the package comment. It fails only when
// the benchmark cannot run; what it measures, failed requests included, goes
// into the report.
func TestScale(t *testing.T) {
	cfg, err := loadConfig(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{cfg: cfg, root: policybuild.RepoRootForTest(t), work: t.TempDir()}
	b.self, err = os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logf("building the policy server, the load tool and the test policies")
	b.policyServer = b.goBuild(t, "./cmd/policy-server")
	b.loadtest = b.goBuild(t, "./hack/loadtest")
	help, _ := exec.Command(b.policyServer, "--help").CombinedOutput()
	b.serverFlags = string(help)
	version, _ := exec.Command(b.policyServer, "--version").CombinedOutput()
	listPolicy := "file://" + policybuild.ForTest(t, "list-resources")
	var rbDuplicate, rbSubjects string
	if cfg.has(scenarioRoleBindings) {
		rbDuplicate = regotest.ModuleFile(t, filepath.Join("testdata", "rolebinding_duplicate.rego"), "rolebindingduplicate/violation", metadata.ModeGatekeeper)
		rbSubjects = regotest.ModuleFile(t, filepath.Join("testdata", "rolebinding_subjects.rego"), "rolebindingsubjects/violation", metadata.ModeGatekeeper)
	}
	b.podReview = filepath.Join(b.root, "hack", "loadtest", "testdata", "pod-review.json")
	b.rbReview = filepath.Join(b.work, "rolebinding-review.json")
	if err := os.WriteFile(b.rbReview, []byte(roleBindingReview), 0o600); err != nil {
		t.Fatal(err)
	}

	logf("starting kube-apiserver and etcd")
	cl := clustertest.Start(t)
	restCfg := rest.CopyConfig(cl.Config)
	restCfg.QPS = -1 // no client-side rate limit: the API server's own limits apply
	b.clientset, err = kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	b.kubeconfig = writeKubeconfig(t, cl.Config, b.work)
	serverVersion := "unknown"
	if v, err := b.clientset.Discovery().ServerVersion(); err == nil {
		serverVersion = v.GitVersion
	}

	rep := &report{Header: []string{
		fmt.Sprintf("Command: `%s`", commandLine()),
		fmt.Sprintf("Machine: %d CPUs (%s), load average at the start %s, %s, kube-apiserver %s, policy server %s.",
			runtime.NumCPU(), cpuModel(), loadAverage(), runtime.Version(), serverVersion, strings.TrimSpace(string(version))),
		fmt.Sprintf("Load: hack/loadtest, %v measured after %v of warm-up per run; closed loop with %s clients; open loop at %s req/s (namespaces scenario).",
			cfg.duration, cfg.warmup, joinNumbers(cfg.clients), joinNumbers(cfg.rates)),
	}}
	if len(cfg.serverArgs) > 0 {
		rep.Header = append(rep.Header, fmt.Sprintf("Policy server flags added: `%s`.", strings.Join(cfg.serverArgs, " ")))
	}
	defer b.writeReport(t, rep)

	// An interrupt stops the run the way a failure does, so that the test's
	// cleanups stop kube-apiserver, etcd and the servers (they do not get
	// the terminal's signal) and the report of what was measured is written.
	ctx, stop := signal.NotifyContext(t.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b.ctx = ctx
	rep.Setup = append(rep.Setup, b.populate(ctx, t)...)

	if cfg.has(scenarioNamespaces) {
		rep.Servers = append(rep.Servers, b.runWarden(t, scenario{
			name: scenarioNamespaces,
			policies: fmt.Sprintf(`
ns-scan:
  module: %[1]s
  settings: {call: all, api_version: v1, kind: Namespace, scan: true, min_items: %[2]d}
  hostCapabilities: [kubernetes/*]
  contextAwareResources: [{apiVersion: v1, kind: Namespace}]
ns-noscan:
  module: %[1]s
  settings: {call: all, api_version: v1, kind: Namespace, scan: false}
  hostCapabilities: [kubernetes/*]
  contextAwareResources: [{apiVersion: v1, kind: Namespace}]
`, listPolicy, cfg.namespaces),
			targets: []target{
				{name: "ns-scan", body: b.podReview, compare: "all", rates: true},
				{name: "ns-noscan", body: b.podReview, compare: "all", rates: true},
			},
		}))
		rep.Servers = append(rep.Servers, b.runInformer(t, scenarioNamespaces, "namespaces", []target{
			{name: "all", path: "/list", body: b.podReview, rates: true},
		}))
	}
	b.checkInterrupt(t)
	if cfg.has(scenarioRoleBindings) {
		rep.Servers = append(rep.Servers, b.runWarden(t, scenario{
			name: scenarioRoleBindings,
			policies: fmt.Sprintf(`
rb-subjects:
  module: file://%[1]s
  settings: {min_bindings: %[3]d, max_bindings: 1000000000}
  contextAwareResources: [{apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding}]
rb-duplicate:
  module: file://%[2]s
  contextAwareResources: [{apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding}]
`, strings.TrimPrefix(rbSubjects, "file://"), strings.TrimPrefix(rbDuplicate, "file://"), cfg.roleBindings),
			targets: []target{
				{name: "rb-duplicate", body: b.rbReview},
				{name: "rb-subjects", body: b.rbReview},
			},
			first: "rb-subjects",
		}))
	}
	b.checkInterrupt(t)
	if cfg.has(scenarioPods) {
		inFirst := min(cfg.pods, cfg.podsPerNamespace)
		rep.Servers = append(rep.Servers, b.runWarden(t, scenario{
			name: scenarioPods,
			policies: fmt.Sprintf(`
pods-ns:
  module: %[1]s
  settings: {call: namespace, namespace: %[2]s, api_version: v1, kind: Pod, scan: true, min_items: %[3]d}
  hostCapabilities: [kubernetes/*]
  contextAwareResources: [{apiVersion: v1, kind: Pod}]
pods-all:
  module: %[1]s
  settings: {call: all, api_version: v1, kind: Pod, scan: true, min_items: %[4]d}
  hostCapabilities: [kubernetes/*]
  contextAwareResources: [{apiVersion: v1, kind: Pod}]
`, listPolicy, namespaceName(0), inFirst, cfg.pods),
			targets: []target{
				{name: "pods-ns", body: b.podReview, compare: "namespace"},
				{name: "pods-all", body: b.podReview, compare: "all"},
			},
			first: "pods-all",
		}))
		rep.Servers = append(rep.Servers, b.runInformer(t, scenarioPods, "pods", []target{
			{name: "namespace", path: "/list?namespace=" + namespaceName(0), body: b.podReview},
			{name: "all", path: "/list", body: b.podReview},
		}))
	}
}

// checkInterrupt ends the test when the run was interrupted.
func (b *bench) checkInterrupt(t *testing.T) {
	t.Helper()
	if b.ctx.Err() != nil {
		t.Fatal("interrupted")
	}
}

// goBuild builds the main package pkg of the repository into the run's
// directory and returns the binary's path.
func (b *bench) goBuild(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(b.work, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = b.root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
	}
	return out
}

// writeReport prints the report and writes it to SCALE_REPORT.
func (b *bench) writeReport(t *testing.T, rep *report) {
	var buf bytes.Buffer
	rep.writeMarkdown(&buf)
	fmt.Printf("\n%s", buf.Bytes())
	if b.cfg.reportFile != "" {
		if err := os.WriteFile(b.cfg.reportFile, buf.Bytes(), 0o644); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
}

// roleBindingReview is the AdmissionReview of the rolebindings scenario: a
// new RoleBinding of namespace scale-00000 that no other binding duplicates.
const roleBindingReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{` +
	`"uid":"7d0c1e2f-3a4b-4c5d-8e6f-9a0b1c2d3e4f",` +
	`"kind":{"group":"rbac.authorization.k8s.io","version":"v1","kind":"RoleBinding"},` +
	`"resource":{"group":"rbac.authorization.k8s.io","version":"v1","resource":"rolebindings"},` +
	`"name":"newcomer-view","namespace":"scale-00000","operation":"CREATE",` +
	`"userInfo":{"username":"admin","groups":["system:masters","system:authenticated"]},` +
	`"object":{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding",` +
	`"metadata":{"name":"newcomer-view","namespace":"scale-00000"},` +
	`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},` +
	`"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"user-7"},` +
	`{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"newcomer"}]},` +
	`"oldObject":null,"dryRun":false,"options":{"apiVersion":"meta.k8s.io/v1","kind":"CreateOptions"}}}`

// writeKubeconfig writes a kubeconfig for cfg into dir and returns its path.
func writeKubeconfig(t *testing.T, cfg *rest.Config, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, clustertest.Kubeconfig(t, cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// commandLine is the command that reproduces this run: the script with the
// SCALE_ variables set.
func commandLine() string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SCALE_") && !strings.HasPrefix(kv, "SCALE_REPORT=") && !strings.HasPrefix(kv, "SCALE_LOGS=") && !strings.HasPrefix(kv, "SCALE_PROFILES=") {
			k, v, _ := strings.Cut(kv, "=")
			if v == "" {
				continue
			}
			if strings.ContainsAny(v, " ,") {
				v = strconv.Quote(v)
			}
			env = append(env, k+"="+v)
		}
	}
	slices.Sort(env)
	return strings.TrimSpace(strings.Join(env, " ") + " hack/scalebench.sh")
}

func joinNumbers[T int | float64](ns []T) string {
	if len(ns) == 0 {
		return "no"
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

func cpuModel() string {
	doc, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func loadAverage() string {
	doc, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(doc))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// logf prints a progress line, with the time, as the benchmark goes.
func logf(format string, args ...any) {
	fmt.Printf("%s scalebench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
