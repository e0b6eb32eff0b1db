package wardenctl

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/verify"
	"github.com/wardenhq/warden/internal/verify/verifytest"
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

// TestScaffoldVerificationConfig checks that the scaffolded config is one
// Warden can satisfy: key-based, keyless named as needing a trust root, and, with a
// key in place of the placeholder, a config wardenctl accepts.
func TestScaffoldVerificationConfig(t *testing.T) {
	e := newEnv(t)
	r := e.mustRun("scaffold", "verification-config")
	for _, want := range []string{
		e.home + "/.config/kubewarden/verification-config.yml",
		"Keyless\n# signatures, kinds githubAction and genericIssuer, are checked against\n# the Sigstore trust root given with --sigstore-trust-config",
		"--verification-config-path",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the output does not say %q\n%s", want, r.stdout)
		}
	}
	key := verifytest.NewKey(t)
	if !strings.Contains(r.stdout, "\n      "+verificationKeyPlaceholder+"\n") {
		t.Fatalf("no placeholder line for the key\n%s", r.stdout)
	}
	pemLines := strings.Split(strings.TrimSpace(key.PublicPEM), "\n")
	filled := strings.Replace(r.stdout, "      -----BEGIN PUBLIC KEY-----\n      "+verificationKeyPlaceholder+"\n      -----END PUBLIC KEY-----\n",
		"      "+strings.Join(pemLines, "\n      ")+"\n", 1)
	cfg, err := verify.ParseConfig([]byte(filled))
	if err != nil {
		t.Fatalf("the scaffolded config, with a key, does not parse: %v\n%s", err, filled)
	}
	if len(cfg.AllOf) != 1 || cfg.AllOf[0].Kind != verify.KindPubKey || cfg.AnyOf != nil {
		t.Errorf("config %+v, want one pubKey in allOf", cfg)
	}
	if k := cfg.Keyless(); len(k) != 0 {
		t.Errorf("the scaffolded config needs what Warden cannot verify: %q", k)
	}
	if ignored, err := checkOffline(cfg); err != nil || len(ignored) != 0 {
		t.Errorf("checkOffline = %q, %v", ignored, err)
	}

	// Saved as is to the default location, it is read by pull, which
	// says that the key is still to be filled in (before any download).
	write(t, e.home, ".config/kubewarden/verification-config.yml", r.stdout)
	p := e.run("pull", "registry://127.0.0.1:1/policies/labels:v1")
	if p.code != 1 {
		t.Fatalf("exit code %d, want 1\n%s", p.code, p)
	}
	checkError(t, p, "the default verification config "+e.home+"/.config/kubewarden/verification-config.yml: allOf[0].key: not a PEM public key")
	checkError(t, p, "the key is still the placeholder of wardenctl scaffold verification-config")
}

func TestGuessPlural(t *testing.T) {
	for kind, want := range map[string]string{"Policy": "policies", "Gateway": "gateways", "Ingress": "ingresses",
		"Box": "boxes", "Mesh": "meshes", "Widget": "widgets"} {
		if got := guessPlural(kind); got != want {
			t.Errorf("guessPlural(%s) = %s, want %s", kind, got, want)
		}
	}
}
