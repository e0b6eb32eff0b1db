package wardenctl

import (
	"path/filepath"
	"testing"

	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/rego/regotest"
)

// regoModule compiles a Rego file of testdata/rego (as opa build -t wasm
// does) and writes it, without metadata, for run -e.
func regoModule(t *testing.T, file, entrypoint string) string {
	t.Helper()
	root := policybuild.RepoRootForTest(t)
	b := regotest.Build(t, filepath.Join(root, "testdata", "rego", file), entrypoint)
	return write(t, t.TempDir(), filepath.Base(file)+".wasm", string(b))
}

func TestRunRego(t *testing.T) {
	gatekeeper := regoModule(t, "gatekeeper/disallowed_tags.rego", "k8sdisallowedtags/violation")
	opa := regoModule(t, "opa/reserved_namespaces.rego", "policy/main")
	dir := t.TempDir()
	latest := write(t, dir, "latest.json", `{"uid":"r","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE",
  "namespace":"kube-system","name":"p",
  "object":{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"nginx:latest"}]}}}`)
	tests := []struct {
		name    string
		args    []string
		allowed bool
		message string
		code    int
		wantErr string
	}{
		{name: "gatekeeper", args: []string{"-e", "gatekeeper", "--settings-json", `{"tags":["latest"]}`, gatekeeper},
			message: "container <c> uses a disallowed tag <nginx:latest>; disallowed tags are [\"latest\"]"},
		{name: "opa", args: []string{"-e", "opa", "--settings-json", `{"reserved_namespaces":["kube-system"]}`, opa},
			message: `namespace "kube-system" is reserved`},
		{name: "opa, allowed", args: []string{"--execution-mode", "opa", opa}, allowed: true},
		{name: "Rego without an execution mode", args: []string{gatekeeper}, code: 1,
			wantErr: "the module is a Rego policy without metadata: run it with --execution-mode opa or gatekeeper"},
		{name: "Rego as waPC", args: []string{"-e", "kubewarden", gatekeeper}, code: 1,
			wantErr: "the module is a Rego policy: execution mode kubewarden-wapc needs a waPC or WASI module"},
		{name: "waPC module as Rego", args: []string{"-e", "opa", bareModule(t, "labels")}, code: 1,
			wantErr: "execution mode opa needs a Rego module"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnv(t).run(append([]string{"run", "-r", latest}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
				return
			}
			resp := decodeResponses(t, r.stdout)[0]
			msg := ""
			if resp.Status != nil {
				msg = resp.Status.Message
			}
			if resp.Allowed != tc.allowed || msg != tc.message {
				t.Errorf("allowed %t, message %q; want %t, %q", resp.Allowed, msg, tc.allowed, tc.message)
			}
		})
	}
}
