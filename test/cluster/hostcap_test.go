//go:build cluster

package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policyserver"
	"github.com/wardenhq/warden/internal/testkit"
	"github.com/wardenhq/warden/internal/wardenctl"
)

// hostCapClock is the settable clock of the caches under test.
type hostCapClock struct{ t time.Time }

func (c *hostCapClock) now() time.Time { return c.t }

// TestHostCapKubernetes answers the kubernetes host capabilities from a real
// API server: through hostcap directly, through wardenctl (recorded, then
// replayed without the cluster), and through the policy server.
func TestHostCapKubernetes(t *testing.T) {
	cl := startCluster(t)
	c := cl.Client
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"team": "a"}}})
	for _, cm := range []struct{ name, app string }{{"web", "web"}, {"db", "db"}} {
		mustCreate(t, c, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: cm.name, Labels: map[string]string{"app": cm.app},
				Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "kept"}},
			Data: map[string]string{"k1": "v1", "k2": "v2"},
		})
	}
	mustCreate(t, c, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "configmap-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}},
	})
	mustCreate(t, c, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alice-reads-configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "configmap-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "alice"}},
	})

	clk := &hostCapClock{t: time.Now()}
	kube, err := hostcap.NewKubernetes(cl.Config, hostcap.KubernetesOptions{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	host := hostcap.NewHost(hostcap.NewDirect(hostcap.Options{Kubernetes: kube}))
	call := func(op string, payload any) string {
		t.Helper()
		b, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		out, err := host.HostCall(t.Context(), "kubernetes", op, b)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(out)
	}
	get := func(apiVersion, kind, name string, namespace any, extra ...any) map[string]any {
		p := map[string]any{"api_version": apiVersion, "kind": kind, "name": name, "namespace": namespace, "disable_cache": false}
		for i := 0; i < len(extra); i += 2 {
			p[extra[i].(string)] = extra[i+1]
		}
		return p
	}
	canI := func(user, verb, resource string, disableCache bool) map[string]any {
		return map[string]any{"disable_cache": disableCache, "subject_access_review": map[string]any{
			"user": user, "groups": nil,
			"resource_attributes": map[string]any{"namespace": "team-a", "verb": verb, "resource": resource, "group": ""}}}
	}
	// alice's RoleBinding reaches the API server's authorizer through its
	// informers: wait until it answers with it.
	eventually(t, "the RoleBinding of alice takes effect", func() bool {
		return strings.Contains(call("can_i", canI("alice", "get", "configmaps", true)), `"allowed":true`)
	})

	t.Run("calls", func(t *testing.T) {
		tests := []struct {
			name, op string
			payload  any
			want     []string // substrings of the answer, in order
			not      []string // substrings it must not have
		}{
			{name: "get a cluster-scoped object", op: "get_resource", payload: get("v1", "Namespace", "team-a", nil),
				want: []string{`"kind":"Namespace"`, `"name":"team-a"`}},
			{name: "get a namespaced object", op: "get_resource", payload: get("v1", "ConfigMap", "web", "team-a"),
				want: []string{`"data":{"k1":"v1","k2":"v2"}`, `"managedFields"`}},
			{name: "get with field masks", op: "get_resource", payload: get("v1", "ConfigMap", "web", "team-a", "field_masks", []string{"data.k2"}),
				want: []string{`"apiVersion":"v1"`, `"data":{"k2":"v2"}`, `"name":"web"`}, not: []string{`"k1"`}},
			{name: "get without the namespace of a namespaced kind", op: "get_resource", payload: get("v1", "ConfigMap", "web", nil),
				want: []string{"error: Callback evaluation failure: Resource v1/ConfigMap is namespaced, but no namespace was provided"}},
			{name: "get a missing object", op: "get_resource", payload: get("v1", "Namespace", "team-z", nil),
				want: []string{"error: Callback evaluation failure: Cannot find v1/Namespace named 'team-z' inside of namespace 'None'"}},
			{name: "get a missing namespaced object", op: "get_resource", payload: get("v1", "ConfigMap", "cache", "team-a"),
				want: []string{`error: Callback evaluation failure: Cannot find v1/ConfigMap named 'cache' inside of namespace 'Some("team-a")'`}},
			{name: "unknown kind", op: "get_resource", payload: get("v1", "Frobnicator", "x", nil),
				want: []string{"error: Callback evaluation failure: Cannot find resource v1/Frobnicator"}},
			{name: "invalid apiVersion", op: "list_resources_all", payload: map[string]any{"api_version": "a/b/c", "kind": "X"},
				want: []string{"error: Callback evaluation failure: cannot determine group and version for a/b/c"}},
			{name: "list a namespace with a label selector", op: "list_resources_by_namespace",
				payload: map[string]any{"api_version": "v1", "kind": "ConfigMap", "namespace": "team-a", "label_selector": "app=web"},
				want:    []string{`{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"apiVersion":"v1","data":`, `"note":"kept"`, `"name":"web"`},
				not:     []string{`"name":"db"`, "managedFields", "last-applied-configuration"}},
			{name: "list a namespace with field masks", op: "list_resources_by_namespace",
				payload: map[string]any{"api_version": "v1", "kind": "ConfigMap", "namespace": "team-a", "field_masks": []string{"data.k1"}},
				want:    []string{`"data":{"k1":"v1"}`, `"name":"db"`, `"data":{"k1":"v1"}`, `"name":"web"`}, not: []string{`"k2"`}},
			{name: "list a cluster-scoped kind in a namespace", op: "list_resources_by_namespace",
				payload: map[string]any{"api_version": "v1", "kind": "Namespace", "namespace": "team-a"},
				want:    []string{"error: Callback evaluation failure: resource v1/Namespace is cluster wide. Cannot search for it inside of a namespace"}},
			{name: "list all with selectors", op: "list_resources_all",
				payload: map[string]any{"api_version": "v1", "kind": "Namespace", "label_selector": "team=a", "field_selector": "metadata.name=team-a"},
				want:    []string{`"kind":"NamespaceList"`, `"name":"team-a"`}, not: []string{`"name":"default"`}},
			{name: "list all of a custom resource", op: "list_resources_all",
				payload: map[string]any{"api_version": "policies.kubewarden.io/v1", "kind": "ClusterAdmissionPolicy"},
				want:    []string{`{"apiVersion":"policies.kubewarden.io/v1","kind":"ClusterAdmissionPolicyList","metadata":{},"items":[]}`}},
			{name: "can_i: allowed by a RoleBinding", op: "can_i", payload: canI("alice", "list", "configmaps", false),
				want: []string{`{"allowed":true,"reason":"RBAC: allowed by RoleBinding \"alice-reads-configmaps/team-a\"`}},
			{name: "can_i: not allowed", op: "can_i", payload: canI("alice", "get", "secrets", false),
				want: []string{`{"allowed":false`}},
			{name: "can_i, as the Go SDK asks", op: "can_i", payload: map[string]any{"disable_cache": false, "subject_access_review": map[string]any{
				"user": "alice", "groups": []string{}, "resourceAttributes": map[string]any{"namespace": "team-a", "verb": "get", "group": "", "resource": "configmaps"}}},
				want: []string{`{"allowed":true`}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got := call(tt.op, tt.payload)
				rest := got
				for _, w := range tt.want {
					i := strings.Index(rest, w)
					if i < 0 {
						t.Fatalf("answer lacks %q (in order):\n%s", w, got)
					}
					rest = rest[i+len(w):]
				}
				for _, n := range tt.not {
					if strings.Contains(got, n) {
						t.Errorf("answer has %q:\n%s", n, got)
					}
				}
			})
		}
	})

	t.Run("cache", func(t *testing.T) {
		ns := get("v1", "Namespace", "team-a", nil)
		fresh := get("v1", "Namespace", "team-a", nil, "disable_cache", true)
		if got := call("get_resource", ns); !strings.Contains(got, `"team":"a"`) {
			t.Fatalf("first read: %s", got)
		}
		var obj corev1.Namespace
		if err := c.Get(t.Context(), client.ObjectKey{Name: "team-a"}, &obj); err != nil {
			t.Fatal(err)
		}
		obj.Labels["team"] = "b"
		if err := c.Update(t.Context(), &obj); err != nil {
			t.Fatal(err)
		}
		if got := call("get_resource", ns); !strings.Contains(got, `"team":"a"`) {
			t.Errorf("within 5 s: %s, want the cached object", got)
		}
		if got := call("get_resource", fresh); !strings.Contains(got, `"team":"b"`) {
			t.Errorf("disable_cache: %s, want the new object", got)
		}
		clk.t = clk.t.Add(5 * time.Second)
		if got := call("get_resource", ns); !strings.Contains(got, `"team":"b"`) {
			t.Errorf("after 5 s: %s, want the new object", got)
		}

		secrets := canI("alice", "get", "secrets", false)
		if got := call("can_i", secrets); !strings.Contains(got, `"allowed":false`) {
			t.Fatalf("can_i before the binding: %s", got)
		}
		// The built-in aggregated roles (admin, edit) are empty without a
		// controller manager: grant secrets with a Role of the test.
		mustCreate(t, c, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "secret-reader"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}},
		})
		mustCreate(t, c, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alice-reads-secrets"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "secret-reader"},
			Subjects:   []rbacv1.Subject{{Kind: "User", Name: "alice"}},
		})
		eventually(t, "the secret-reader RoleBinding of alice takes effect", func() bool {
			return strings.Contains(call("can_i", canI("alice", "get", "secrets", true)), `"allowed":true`)
		})
		if got := call("can_i", secrets); !strings.Contains(got, `"allowed":false`) {
			t.Errorf("can_i within 5 s: %s, want the cached answer", got)
		}
		clk.t = clk.t.Add(5 * time.Second)
		if got := call("can_i", secrets); !strings.Contains(got, `"allowed":true`) {
			t.Errorf("can_i after 5 s: %s, want the new answer", got)
		}
	})

	kubeconfig := writeKubeconfig(t, cl.Config)
	policy := policybuild.ForTest(t, "host-call")
	settings := `{"calls":[` +
		`{"namespace":"kubernetes","operation":"get_resource","payload":{"api_version":"v1","kind":"Namespace","name":"team-a","disable_cache":true}},` +
		`{"namespace":"kubernetes","operation":"list_resources_by_namespace","payload":{"api_version":"v1","kind":"ConfigMap","namespace":"team-a","field_masks":["data.k1"]}},` +
		`{"namespace":"kubernetes","operation":"can_i","payload":{"subject_access_review":{"user":"bob","resource_attributes":{"namespace":"team-a","verb":"get","resource":"pods"}},"disable_cache":false}},` +
		`{"namespace":"kubernetes","operation":"get_resource","payload":{"api_version":"v1","kind":"Namespace","name":"team-z","disable_cache":false}}` +
		`]}`

	t.Run("wardenctl records, then replays without the cluster", func(t *testing.T) {
		dir := t.TempDir()
		request := filepath.Join(dir, "request.json")
		if err := os.WriteFile(request, []byte(`{"uid":"u-1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},`+
			`"name":"p","namespace":"team-a","operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		session := filepath.Join(dir, "session.yml")
		env := map[string]string{"HOME": t.TempDir(), "WARDEN_CACHE_DIR": filepath.Join(dir, "cache"), "DOCKER_CONFIG": filepath.Join(dir, "docker")}
		run := func(env map[string]string, args ...string) (string, string) {
			t.Helper()
			var out, errOut bytes.Buffer
			code := wardenctl.Main(t.Context(), args, strings.NewReader(""), &out, &errOut, func(k string) string { return env[k] })
			if code != 0 {
				t.Fatalf("wardenctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
			}
			return out.String(), errOut.String()
		}
		withCluster := map[string]string{"KUBECONFIG": kubeconfig}
		for k, v := range env {
			withCluster[k] = v
		}
		recorded, _ := run(withCluster, "run", "-r", request, "--settings-json", settings, "--allow-context-aware",
			"--record-host-capabilities-interactions", session, policy)
		for _, want := range []string{
			`kubernetes/get_resource: {\"apiVersion\":\"v1\",\"kind\":\"Namespace\"`,
			`kubernetes/list_resources_by_namespace: {\"apiVersion\":\"v1\",\"kind\":\"ConfigMapList\"`,
			`kubernetes/can_i: {\"allowed\":false`,
			`kubernetes/get_resource failed: Callback evaluation failure: Cannot find v1/Namespace named 'team-z' inside of namespace 'None'`,
		} {
			if !strings.Contains(recorded, want) {
				t.Errorf("recorded run lacks %q:\n%s", want, recorded)
			}
		}
		replayed, stderr := run(env, "run", "-r", request, "--settings-json", settings, "--allow-context-aware",
			"--replay-host-capabilities-interactions", session, policy)
		if replayed != recorded {
			t.Errorf("replayed answer differs:\nrecorded %s\nreplayed %s\n%s", recorded, replayed, stderr)
		}
	})

	t.Run("policy server", func(t *testing.T) {
		doc := fmt.Sprintf("reads-cluster:\n  module: file://%s\n  settings: %s\n  hostCapabilities: [\"kubernetes/*\"]\n"+
			"  contextAwareResources: [{apiVersion: v1, kind: Namespace}, {apiVersion: v1, kind: ConfigMap}]\n", policy, settings)
		port := startPolicyServer(t, doc, kubeconfig)
		review := admissiontest.New(admissiontest.WithUID("u-2"), admissiontest.WithName("p"), admissiontest.WithNamespace("team-a"),
			admissiontest.WithObject(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}`))
		body := postReview(t, port, "reads-cluster", review.JSON())
		for _, want := range []string{
			`"allowed":false`,
			`kubernetes/get_resource: {\"apiVersion\":\"v1\",\"kind\":\"Namespace\"`,
			`kubernetes/list_resources_by_namespace: {\"apiVersion\":\"v1\",\"kind\":\"ConfigMapList\"`,
			`kubernetes/can_i: {\"allowed\":false`,
			`Cannot find v1/Namespace named 'team-z' inside of namespace 'None'`,
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("response lacks %q:\n%s", want, body)
			}
		}
	})
}

// postReview sends review to /validate/<policy> of the policy server on
// port (plain HTTP) and returns the body of its answer.
func postReview(t *testing.T, port int, policy string, review []byte) []byte {
	t.Helper()
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/validate/%s", port, policy), "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// reviewResponse is the part of an AdmissionReview's response the tests
// read.
type reviewResponse struct {
	Allowed bool `json:"allowed"`
	Status  *struct {
		Message string `json:"message"`
		Code    int    `json:"code"`
	} `json:"status"`
}

// validateReview sends review to /validate/<policy> of the policy server
// on port and returns its response.
func validateReview(t *testing.T, port int, policy string, review []byte) reviewResponse {
	t.Helper()
	body := postReview(t, port, policy, review)
	var out struct {
		Response reviewResponse `json:"response"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s: %v\n%s", policy, err, body)
	}
	return out.Response
}

// startPolicyServer runs the policy server, as its command does, with the
// policies of doc and the cluster of kubeconfig, until the test ends; it
// returns its port once it is ready.
func startPolicyServer(t *testing.T, doc, kubeconfig string) int {
	t.Helper()
	port, readiness := launchPolicyServer(t, doc, kubeconfig)
	eventually(t, "the policy server is ready", func() bool { return ready(readiness) })
	return port
}

// launchPolicyServer starts the policy server as startPolicyServer does,
// and returns its port and readiness port without waiting.
func launchPolicyServer(t *testing.T, doc, kubeconfig string) (port, readiness int) {
	t.Helper()
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(policies, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	port, readiness = testkit.FreePort(t), testkit.FreePort(t)
	env := map[string]string{"KUBECONFIG": kubeconfig, "HOME": dir}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var logs bytes.Buffer
	go func() {
		done <- policyserver.Main(ctx, []string{"--addr", "127.0.0.1", "--port", fmt.Sprint(port), "--readiness-probe-port", fmt.Sprint(readiness),
			"--policies", policies, "--policies-download-dir", dir, "--cache-dir", "", "--workers", "1"},
			io.Discard, &logs, func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("policy server exit %d\n%s", code, logs.String())
		}
	})
	return port, readiness
}

// ready reports whether the readiness endpoint on port answers 200.
func ready(port int) bool {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readiness", port))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// writeKubeconfig writes a kubeconfig for cfg and returns its path.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, clustertest.Kubeconfig(t, cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
