package wardenctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/metadata"
)

func TestAnnotate(t *testing.T) {
	bareWapc := bareModule(t, "labels")
	bareWASI := bareModule(t, "wasi-log")
	dir := t.TempDir()
	readme := write(t, dir, "README.md", "# Usage\n\nSet denied_labels.\n")
	const rules = `rules:
  - apiGroups: [""]
    apiVersions: [v1]
    resources: [pods]
    operations: [CREATE, UPDATE]
`
	tests := []struct {
		name     string
		module   string
		metadata string
		usage    bool
		code     int
		wantErr  string
		check    func(t *testing.T, m *metadata.Metadata)
	}{
		{name: "waPC: the module gives its protocol version", module: bareWapc, usage: true,
			metadata: rules + "mutating: false\nannotations:\n  io.kubewarden.policy.title: labels\n",
			check: func(t *testing.T, m *metadata.Metadata) {
				if m.ProtocolVersion != "v1" || m.Mode() != metadata.ModeWapc || len(m.Rules) != 1 || m.Rules[0].Resources[0] != "pods" {
					t.Errorf("metadata %+v", m)
				}
				if m.Annotations[usageAnnotation] != "# Usage\n\nSet denied_labels.\n" || m.Annotations["io.kubewarden.policy.title"] != "labels" {
					t.Errorf("annotations %v", m.Annotations)
				}
			}},
		{name: "WASI: protocol version Unknown", module: bareWASI, metadata: rules + "mutating: false\nexecutionMode: wasi\n",
			check: func(t *testing.T, m *metadata.Metadata) {
				if m.ProtocolVersion != "Unknown" || m.Mode() != metadata.ModeWASI {
					t.Errorf("metadata %+v", m)
				}
			}},
		{name: "metadata replaced", module: policy(t, "labels"), metadata: rules + "mutating: true\n",
			check: func(t *testing.T, m *metadata.Metadata) {
				if !m.Mutating || m.Annotations != nil {
					t.Errorf("metadata %+v: the old metadata was kept", m)
				}
			}},
		{name: "mutating missing", module: bareWapc, metadata: rules, code: 1, wantErr: "mutating is required"},
		{name: "wildcard among operations", module: bareWapc, code: 1, wantErr: "rule 1: operations: '*' must be the only value",
			metadata: "mutating: false\nrules: [{apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE, '*']}]\n"},
		{name: "unknown operation", module: bareWapc, code: 1, wantErr: `invalid operation "PATCH"`,
			metadata: "mutating: false\nrules: [{apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [PATCH]}]\n"},
		{name: "unknown mode", module: bareWapc, metadata: "mutating: false\nexecutionMode: rust\n", code: 1, wantErr: `unknown executionMode "rust"`},
		{name: "Rego mode for a module that is not Rego", module: bareWASI, metadata: "mutating: false\nexecutionMode: opa\n",
			code: 1, wantErr: "executionMode opa needs a Rego module"},
		{name: "waPC mode for a WASI command", module: bareWASI, metadata: "mutating: false\n",
			code: 1, wantErr: "asking the module for its waPC protocol version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			md := write(t, t.TempDir(), "metadata.yml", tc.metadata)
			out := filepath.Join(t.TempDir(), "annotated.wasm")
			args := []string{"annotate", "-m", md, "-o", out, tc.module}
			if tc.usage {
				args = append(args, "-u", readme)
			}
			r := newEnv(t).run(args...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
				if _, err := os.Stat(out); err == nil {
					t.Error("the output was written despite the error")
				}
				return
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			m, err := metadata.FromModule(b)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, m)
		})
	}
}

// TestAnnotateThenRun checks that an annotated module runs.
func TestAnnotateThenRun(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	md := write(t, dir, "metadata.yml", "rules: [{apiGroups: ['*'], apiVersions: ['*'], resources: ['*'], operations: ['*']}]\nmutating: false\n")
	out := filepath.Join(dir, "annotated.wasm")
	e.mustRun("annotate", "--metadata-path", md, "--output-path", out, bareModule(t, "labels"))
	r := e.mustRun("run", "-r", requestFile(t, `{"no": "1"}`, false), "--settings-json", `{"denied_labels":["no"]}`, out)
	if !strings.Contains(r.stdout, `"allowed":false`) || !strings.Contains(r.stdout, "label no is denied") {
		t.Errorf("run of the annotated module: %s", r)
	}
	if r := e.run("annotate", "-o", out, out); r.code != 2 {
		t.Errorf("annotate without --metadata-path: %s", r)
	}
}

func TestExportNames(t *testing.T) {
	b, err := os.ReadFile(policy(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := exportNames(b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(names, ","), "__guest_call") {
		t.Errorf("exports %v lack __guest_call", names)
	}
	if rego, err := isRego(b); err != nil || rego {
		t.Errorf("isRego = %t, %v", rego, err)
	}
	// A module with one export, opa_eval, built by hand: magic, version,
	// export section (id 7, size 12, one export "opa_eval", function 0).
	opa := append(append([]byte{}, wasmHeader...), 7, 12, 1, 8, 'o', 'p', 'a', '_', 'e', 'v', 'a', 'l', 0, 0)
	if rego, err := isRego(opa); err != nil || !rego {
		t.Errorf("isRego(opa) = %t, %v", rego, err)
	}
	for _, bad := range [][]byte{[]byte("not wasm"), append(append([]byte{}, wasmHeader...), 7, 40, 1)} {
		if _, err := exportNames(bad); err == nil {
			t.Errorf("exportNames(%q) did not fail", bad)
		}
	}
}
