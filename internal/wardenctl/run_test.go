package wardenctl

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/testkit/ociregistry"
)

// decodeResponses parses the AdmissionResponses run prints, one per line.
func decodeResponses(t testing.TB, stdout string) []admission.Response {
	t.Helper()
	var out []admission.Response
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var r admission.Response
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("stdout line %q is not an AdmissionResponse: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func TestRun(t *testing.T) {
	labels := policy(t, "labels")
	mutate := policy(t, "mutate-labels")
	wasiLog := policy(t, "wasi-log")
	raw := policy(t, "raw")
	bareLabels := bareModule(t, "labels")
	bareWASI := bareModule(t, "wasi-log")
	dir := t.TempDir()
	denied := requestFile(t, `{"app": "web", "forbidden": "x"}`, false)
	deniedReview := requestFile(t, `{"forbidden": "x"}`, true)
	clean := requestFile(t, `{"app": "web"}`, false)
	rejectLabel := requestFile(t, `{"reject": "true"}`, true)
	settingsYAML := write(t, dir, "settings.yaml", "denied_labels:\n  - forbidden\n")
	rawRequest := write(t, dir, "raw.json", `{"request": {"user": "alice", "action": "eat", "resource": "banana"}}`)
	celSettings := `{"validations":[{"expression":"object.metadata.labels.app == 'db'","message":"only databases"}]}`
	crds := write(t, dir, "policies.yaml", fmt.Sprintf(`apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata: {name: no-forbidden}
spec:
  module: %s
  settings: {denied_labels: [forbidden]}
  rules: []
  mutating: false
---
apiVersion: policies.kubewarden.io/v1
kind: AdmissionPolicy
metadata: {name: only-db}
spec:
  module: builtin://cel
  settings: %s
---
apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicyGroup
metadata: {name: group}
spec:
  expression: "labels() || cel()"
  message: "the group rejects it"
  policies:
    labels: {module: %s, settings: {denied_labels: [forbidden]}}
    cel: {module: builtin://cel, settings: %s}
`, "file://"+labels, celSettings, labels, celSettings))

	type want struct {
		allowed []bool   // one per printed response
		message []string // substring of each status message ("" = none expected)
		patched bool
	}
	tests := []struct {
		name    string
		args    []string
		stdin   string
		want    want
		code    int
		wantErr string // substring of stderr
	}{
		{name: "waPC rejects, bare request, settings as JSON",
			args: []string{"run", "-r", denied, "--settings-json", `{"denied_labels":["forbidden"]}`, labels},
			want: want{allowed: []bool{false}, message: []string{"label forbidden is denied"}}},
		{name: "waPC accepts, settings from a YAML file, file:// URI",
			args: []string{"run", "--request-path", clean, "--settings-path", settingsYAML, "file://" + labels},
			want: want{allowed: []bool{true}, message: []string{""}}},
		{name: "AdmissionReview on standard input",
			args: []string{"run", "-r", "-", "-s", settingsYAML, labels}, stdin: mustRead(t, deniedReview),
			want: want{allowed: []bool{false}, message: []string{"label forbidden is denied"}}},
		{name: "mutation becomes a JSONPatch",
			args: []string{"run", "-r", clean, mutate},
			want: want{allowed: []bool{true}, message: []string{""}, patched: true}},
		{name: "WASI policy",
			args: []string{"run", "-r", rejectLabel, wasiLog},
			want: want{allowed: []bool{false}, message: []string{"rejected by wasi-log"}}},
		{name: "raw policy",
			args: []string{"run", "--raw", "-r", rawRequest, "--settings-json", `{"forbidden_resources":["banana"]}`, raw},
			want: want{allowed: []bool{false}, message: []string{"resource banana is forbidden"}}},
		{name: "native CEL",
			args: []string{"run", "-r", clean, "--settings-json", celSettings, "builtin://cel"},
			want: want{allowed: []bool{false}, message: []string{"only databases"}}},
		{name: "module without metadata runs as waPC by default",
			args: []string{"run", "-r", denied, "--settings-json", `{"denied_labels":["forbidden"]}`, bareLabels},
			want: want{allowed: []bool{false}, message: []string{"label forbidden is denied"}}},
		{name: "module without metadata in the execution mode given",
			args: []string{"run", "-e", "wasi", "-r", rejectLabel, bareWASI},
			want: want{allowed: []bool{false}, message: []string{"rejected by wasi-log"}}},
		{name: "policy resources, one response each",
			args: []string{"run", "-r", denied, crds},
			want: want{allowed: []bool{false, false, false}, message: []string{"label forbidden is denied", "only databases", "the group rejects it"}}},

		{name: "invalid settings", args: []string{"run", "-r", clean, "--settings-json", `{"denied_labels": 3}`, labels},
			code: 1, wantErr: "Policy settings are invalid: denied_labels must be a list of strings"},
		{name: "execution mode against the metadata", args: []string{"run", "-e", "wasi", "-r", clean, labels},
			code: 1, wantErr: "the execution mode given, wasi, is not the one of the policy's metadata, kubewarden-wapc"},
		{name: "unknown execution mode", args: []string{"run", "-e", "rust", "-r", clean, labels},
			code: 2, wantErr: `invalid --execution-mode "rust"`},
		{name: "context aware", args: []string{"run", "--allow-context-aware", "-r", clean, labels},
			code: 1, wantErr: "the policy may read Kubernetes resources: no Kubernetes configuration"},
		{name: "no request", args: []string{"run", labels}, code: 2, wantErr: "--request-path is required"},
		{name: "both settings flags", args: []string{"run", "-r", clean, "-s", settingsYAML, "--settings-json", "{}", labels},
			code: 2, wantErr: "--settings-path and --settings-json cannot be used together"},
		{name: "missing module", args: []string{"run", "-r", clean, dir + "/nope.wasm"}, code: 1, wantErr: "no such file"},
		{name: "request that is not a request", args: []string{"run", "-r", settingsYAML, labels},
			code: 1, wantErr: "it has neither operation nor kind"},
		{name: "raw with policy resources", args: []string{"run", "--raw", "-r", clean, crds}, code: 2,
			wantErr: "--raw cannot be used with a YAML file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.runStdin(tc.stdin, tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
				if r.stdout != "" {
					t.Errorf("stdout %q on error", r.stdout)
				}
				return
			}
			resps := decodeResponses(t, r.stdout)
			if len(resps) != len(tc.want.allowed) {
				t.Fatalf("%d responses, want %d\n%s", len(resps), len(tc.want.allowed), r)
			}
			for i, resp := range resps {
				if resp.Allowed != tc.want.allowed[i] {
					t.Errorf("response %d: allowed %t, want %t\n%s", i, resp.Allowed, tc.want.allowed[i], r)
				}
				msg := ""
				if resp.Status != nil {
					msg = resp.Status.Message
				}
				if w := tc.want.message[i]; (w == "" && msg != "") || !strings.Contains(msg, w) {
					t.Errorf("response %d: message %q, want %q", i, msg, w)
				}
				if got := resp.Patch != nil; got != tc.want.patched {
					t.Errorf("response %d: patched %t, want %t", i, got, tc.want.patched)
				}
			}
		})
	}
}

// TestRunPatch checks the patch run prints: base64 JSONPatch, as Kubewarden
// prints it.
func TestRunPatch(t *testing.T) {
	e := newEnv(t)
	r := e.mustRun("run", "-r", requestFile(t, `{"app": "web"}`, false), policy(t, "mutate-labels"))
	var resp map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil {
		t.Fatal(err)
	}
	if resp["patchType"] != "JSONPatch" || resp["uid"] != "u-1" {
		t.Errorf("response %s: want patchType JSONPatch and uid u-1", r.stdout)
	}
	patch, err := base64.StdEncoding.DecodeString(resp["patch"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(patch), `"path":"/metadata/labels/warden.io~1mutated"`) {
		t.Errorf("patch %s does not add the label", patch)
	}
}

// TestRunRemote runs policies from a registry, from an HTTPS server and from
// the store by digest prefix.
func TestRunRemote(t *testing.T) {
	e := newEnv(t)
	reg := ociregistry.Start(t)
	sources := reg.SourcesFile(t)
	labels := policy(t, "labels")
	module, err := os.ReadFile(labels)
	if err != nil {
		t.Fatal(err)
	}
	ref := "registry://" + reg.Host + "/policies/labels:v1"
	e.mustRun("push", "--sources-path", sources, labels, ref)

	web := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/labels.wasm" {
			http.NotFound(w, r)
			return
		}
		w.Write(module)
	}))
	t.Cleanup(web.Close)
	webHost := strings.TrimPrefix(web.URL, "https://")
	insecure := write(t, t.TempDir(), "sources.yml", fmt.Sprintf("insecure_sources: [%q]\n", webHost))

	req := requestFile(t, `{"forbidden": "x"}`, false)
	settings := `{"denied_labels":["forbidden"]}`
	tests := []struct {
		name string
		args []string
	}{
		{"registry", []string{"run", "--sources-path", sources, "-r", req, "--settings-json", settings, ref}},
		{"https", []string{"run", "--sources-path", insecure, "-r", req, "--settings-json", settings, web.URL + "/labels.wasm"}},
		{"digest prefix of the store", []string{"run", "-r", req, "--settings-json", settings, sha256Hex(module)[:12]}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.mustRun(tc.args...)
			resps := decodeResponses(t, r.stdout)
			if len(resps) != 1 || resps[0].Allowed || resps[0].Status == nil || resps[0].Status.Message != "label forbidden is denied" {
				t.Errorf("got %s", r)
			}
		})
	}
}

func mustRead(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRunNotPolicyResources checks what run and scan say of a YAML file that
// holds something other than policy resources: what it is, and what they
// expected.
func TestRunNotPolicyResources(t *testing.T) {
	dir := t.TempDir()
	req := requestFile(t, `{"app": "web"}`, false)
	const expected = "not a Kubewarden policy resource: expected apiVersion policies.kubewarden.io/v1 and kind ClusterAdmissionPolicy, AdmissionPolicy, ClusterAdmissionPolicyGroup or AdmissionPolicyGroup"
	tests := []struct {
		name, doc string
		wantErr   []string
	}{
		{name: "a policy server's policies.yml",
			doc: "pod-privileged:\n  module: registry://ghcr.io/kubewarden/policies/pod-privileged:v1.0.8\n  settings: {}\n" +
				"group:\n  expression: a()\n  policies:\n    a: {module: builtin://cel}\n",
			wantErr: []string{"document 1 looks like a policy server's policies.yml (policy ids mapped to their module and settings: group, pod-privileged), " + expected,
				"to run one policy of a policies.yml, give its module and --settings-json"}},
		{name: "a policies.yml with many policies",
			doc:     "a: {module: builtin://cel}\nb: {module: builtin://cel}\nc: {module: builtin://cel}\nd: {module: builtin://cel}\n",
			wantErr: []string{"(policy ids mapped to their module and settings: a, b, c, ...)"}},
		{name: "no kind",
			doc:     "metadata: {name: x}\nspec: {module: builtin://cel}\n",
			wantErr: []string{"document 1 has no kind and no apiVersion, " + expected}},
		{name: "apiVersion without kind",
			doc:     "apiVersion: policies.kubewarden.io/v1\nspec: {module: builtin://cel}\n",
			wantErr: []string{"document 1 has apiVersion policies.kubewarden.io/v1 but no kind, " + expected}},
		{name: "kind without apiVersion",
			doc:     "kind: ClusterAdmissionPolicy\nspec: {module: builtin://cel}\n",
			wantErr: []string{"document 1 is a ClusterAdmissionPolicy without apiVersion, " + expected}},
		{name: "another resource, second document",
			doc:     "apiVersion: policies.kubewarden.io/v1\nkind: ClusterAdmissionPolicy\nspec: {module: builtin://cel}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
			wantErr: []string{"document 2 is a v1 Pod, " + expected}},
	}
	for i, tc := range tests {
		file := write(t, dir, fmt.Sprintf("%d/policies.yml", i), tc.doc)
		for _, args := range [][]string{{"run", "-r", req, file}, {"scan", "-p", file, req}} {
			t.Run(tc.name+"/"+args[0], func(t *testing.T) {
				r := newEnv(t).run(args...)
				if r.code != 1 {
					t.Fatalf("exit code %d, want 1\n%s", r.code, r)
				}
				for _, w := range tc.wantErr {
					checkError(t, r, w)
				}
			})
		}
	}
}

// TestRunHandsGuestsCompactJSON checks that a guest gets the request and
// the settings as compact JSON, as kwctl hands them, whatever the layout of
// the files: the echo policy answers with the payload it was handed.
func TestRunHandsGuestsCompactJSON(t *testing.T) {
	echo := policy(t, "echo")
	dir := t.TempDir()
	const want = `{"request":{"uid":"u-1","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE",` +
		`"object":{"metadata":{"name":"web 1","labels":{"a b":"c\td"}}}},"settings":{"denied_labels":["x y"]}}`
	pretty := `{
  "uid": "u-1",
  "kind": {"group": "", "version": "v1", "kind": "Pod"},
  "operation": "CREATE",
  "object": {"metadata": {"name": "web 1", "labels": {"a b": "c\td"}}}
}
`
	tests := []struct {
		name, request string
		args          []string
		want          string // "": want
	}{
		{name: "pretty JSON request, settings as JSON", request: pretty,
			args: []string{"--settings-json", `{ "denied_labels": [ "x y" ] }`}},
		{name: "AdmissionReview, settings from a pretty JSON file",
			request: `{"kind": "AdmissionReview", "request": ` + pretty + `}`,
			args:    []string{"--settings-path", write(t, dir, "settings.json", "{\n  \"denied_labels\": [\"x y\"]\n}\n")}},
		{name: "YAML request, settings from a YAML file",
			// YAML becomes JSON through a map: keys in order
			want: `{"request":{"kind":{"group":"","kind":"Pod","version":"v1"},"object":{"metadata":{"labels":{"a b":"c\td"},"name":"web 1"}},` +
				`"operation":"CREATE","uid":"u-1"},"settings":{"denied_labels":["x y"]}}`,
			request: "uid: u-1\nkind: {group: '', version: v1, kind: Pod}\noperation: CREATE\nobject:\n  metadata:\n    name: web 1\n    labels: {a b: \"c\\td\"}\n",
			args:    []string{"-s", write(t, dir, "settings.yaml", "denied_labels:\n  - x y\n")}},
		{name: "compact JSON request", request: `{"uid":"u-1","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":{"metadata":{"name":"web 1","labels":{"a b":"c\td"}}}}`,
			args: []string{"--settings-json", `{"denied_labels":["x y"]}`}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := write(t, dir, fmt.Sprintf("request-%d", i), tc.request)
			r := newEnv(t).mustRun(append(append([]string{"run", "-r", req}, tc.args...), echo)...)
			resps := decodeResponses(t, r.stdout)
			if len(resps) != 1 || resps[0].Status == nil {
				t.Fatalf("got %s", r)
			}
			w := tc.want
			if w == "" {
				w = want
			}
			if got := resps[0].Status.Message; got != w {
				t.Errorf("the guest was handed\n%s\nwant\n%s", got, w)
			}
		})
	}
	t.Run("policy resource in pretty JSON", func(t *testing.T) {
		req := write(t, dir, "request.json", pretty)
		policies := write(t, dir, "policy.yaml", fmt.Sprintf(`{
  "apiVersion": "policies.kubewarden.io/v1", "kind": "ClusterAdmissionPolicy",
  "metadata": {"name": "echo"},
  "spec": {"module": %q, "settings": {"denied_labels": [ "x y" ]}}
}`, echo))
		r := newEnv(t).mustRun("run", "-r", req, policies)
		resps := decodeResponses(t, r.stdout)
		if len(resps) != 1 || resps[0].Status == nil || resps[0].Status.Message != want {
			t.Errorf("got %s, want the message %s", r, want)
		}
	})
}
