package wardenctl

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestScaffoldManifest(t *testing.T) {
	labels := policy(t, "labels")   // backgroundAudit: true, severity and category
	counter := policy(t, "counter") // backgroundAudit: false
	settings := write(t, t.TempDir(), "settings.yaml", "denied_labels: [a, b]\n")
	tests := []struct {
		name    string
		args    []string
		want    []string // substrings
		notWant []string
		code    int
		wantErr string
	}{
		{name: "ClusterAdmissionPolicy", args: []string{"-t", "ClusterAdmissionPolicy", "--settings-path", settings, labels},
			want: []string{"apiVersion: policies.kubewarden.io/v1\nkind: ClusterAdmissionPolicy\nmetadata:\n  name: labels\n  annotations:\n",
				"io.kubewarden.policy.severity: low", "io.kubewarden.policy.category: Test",
				"spec:\n  module: file://" + labels + "\n  settings:\n    denied_labels:\n      - a\n      - b\n  rules:\n",
				"      operations:\n        - CREATE\n        - UPDATE\n", "  mutating: false\n"},
			notWant: []string{"backgroundAudit"}},
		{name: "AdmissionPolicy with a title, backgroundAudit false", args: []string{"--type", "AdmissionPolicy", "--title", "count-calls", counter},
			want: []string{"kind: AdmissionPolicy\n", "  name: count-calls\n", "  settings: {}\n", "  backgroundAudit: false\n"}},
		{name: "settings as JSON", args: []string{"-t", "ClusterAdmissionPolicy", "--settings-json", `{"denied_labels":["x"]}`, labels},
			want: []string{"  settings:\n    denied_labels:\n      - x\n"}},
		{name: "no type", args: []string{labels}, code: 2, wantErr: "--type is required"},
		{name: "bad type", args: []string{"-t", "Policy", labels}, code: 2, wantErr: `invalid --type "Policy"`},
		{name: "bad title", args: []string{"-t", "AdmissionPolicy", "--title", "Not_A_Name", labels}, code: 2, wantErr: `invalid --title "Not_A_Name"`},
		{name: "no metadata", args: []string{"-t", "AdmissionPolicy", bareModule(t, "labels")}, code: 1, wantErr: "no Kubewarden metadata found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnv(t).run(append([]string{"scaffold", "manifest"}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("manifest lacks %q\n%s", w, r.stdout)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(r.stdout, w) {
					t.Errorf("manifest has %q\n%s", w, r.stdout)
				}
			}
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(r.stdout), &obj); err != nil {
				t.Errorf("the manifest is not YAML: %v", err)
			}
		})
	}
}

func TestScaffoldAdmissionRequest(t *testing.T) {
	dir := t.TempDir()
	pod := write(t, dir, "pod.yaml", podYAML)
	deploy := write(t, dir, "deploy.json", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"shop"}}`)
	widget := write(t, dir, "widget.yaml", "apiVersion: example.com/v1\nkind: Policy\nmetadata: {name: w}\n")
	tests := []struct {
		name      string
		args      []string
		want      map[string]any // top-level fields of the request
		resource  string
		hasObject bool
		hasOld    bool
		code      int
		wantErr   string
	}{
		{name: "CREATE of a pod", args: []string{"-o", "CREATE", "--object", pod},
			want:     map[string]any{"operation": "CREATE", "namespace": "default", "name": "nginx", "uid": scaffoldUID},
			resource: "pods", hasObject: true},
		{name: "UPDATE of a deployment", args: []string{"--operation", "UPDATE", "--object", deploy, "--old-object", deploy},
			want:     map[string]any{"operation": "UPDATE", "namespace": "shop", "name": "web"},
			resource: "deployments", hasObject: true, hasOld: true},
		{name: "DELETE", args: []string{"-o", "DELETE", "--old-object", pod},
			want: map[string]any{"operation": "DELETE"}, resource: "pods", hasOld: true},
		{name: "unknown kind: guessed plural", args: []string{"-o", "CREATE", "--object", widget},
			want: map[string]any{"operation": "CREATE"}, resource: "policies", hasObject: true},
		{name: "CREATE without object", args: []string{"-o", "CREATE"}, code: 2, wantErr: "CREATE takes --object"},
		{name: "CONNECT", args: []string{"-o", "CONNECT", "--object", pod}, code: 2, wantErr: `invalid --operation "CONNECT"`},
		{name: "not an object", args: []string{"-o", "CREATE", "--object", write(t, dir, "x.yaml", "a: 1\n")}, code: 1,
			wantErr: "the object has no apiVersion or kind"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnv(t).run(append([]string{"scaffold", "admission-request"}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
				return
			}
			var req map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &req); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, r.stdout)
			}
			for k, v := range tc.want {
				if req[k] != v {
					t.Errorf("%s = %v, want %v", k, req[k], v)
				}
			}
			if res := req["resource"].(map[string]any)["resource"]; res != tc.resource {
				t.Errorf("resource %v, want %s", res, tc.resource)
			}
			if _, ok := req["object"]; ok != tc.hasObject {
				t.Errorf("object present: %t, want %t", ok, tc.hasObject)
			}
			if _, ok := req["oldObject"]; ok != tc.hasOld {
				t.Errorf("oldObject present: %t, want %t", ok, tc.hasOld)
			}
		})
	}
}

// TestScaffoldedRequestRuns pipes a scaffolded request into run.
func TestScaffoldedRequestRuns(t *testing.T) {
	e := newEnv(t)
	pod := write(t, t.TempDir(), "pod.yaml", podYAML)
	req := e.mustRun("scaffold", "admission-request", "-o", "CREATE", "--object", pod)
	r := e.runStdin(req.stdout, "run", "-r", "-", "--settings-json", `{"denied_labels":["app"]}`, policy(t, "labels"))
	if r.code != 0 || !strings.Contains(r.stdout, `"allowed":false`) || !strings.Contains(r.stdout, "label app is denied") {
		t.Errorf("run of the scaffolded request: %s", r)
	}
}

func TestScaffoldVerificationConfig(t *testing.T) {
	e := newEnv(t)
	r := e.mustRun("scaffold", "verification-config")
	var cfg struct {
		APIVersion string `json:"apiVersion"`
		AllOf      []struct {
			Kind  string `json:"kind"`
			Owner string `json:"owner"`
		} `json:"allOf"`
	}
	if err := yaml.UnmarshalStrict([]byte(r.stdout), &cfg); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if cfg.APIVersion != "v1" || len(cfg.AllOf) != 1 || cfg.AllOf[0].Kind != "githubAction" || cfg.AllOf[0].Owner != "kubewarden" {
		t.Errorf("config %+v", cfg)
	}
	if !strings.Contains(r.stdout, e.home+"/.config/kubewarden/verification-config.yml") {
		t.Errorf("the header does not name the default location\n%s", r.stdout)
	}
}

func TestGuessPlural(t *testing.T) {
	for kind, want := range map[string]string{"Policy": "policies", "Gateway": "gateways", "Ingress": "ingresses",
		"Box": "boxes", "Mesh": "meshes", "Widget": "widgets"} {
		if got := guessPlural(kind); got != want {
			t.Errorf("guessPlural(%s) = %s, want %s", kind, got, want)
		}
	}
}
