package wardenctl

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerificationConfigPath checks that pull, run and bench honour
// --verification-config-path as kwctl does: a policy whose signatures do
// not meet the file is neither stored nor evaluated, and the error says
// that the policy cannot be validated, and why.
func TestVerificationConfigPath(t *testing.T) {
	fx := startVerifyFixture(t)
	src := []string{"--sources-path", fx.sources}
	newVerifyEnv(t).mustRun(append(append([]string{"sign"}, src...), "--key", fx.cosignKey, "-a", "env=prod", fx.signed)...)

	dir := t.TempDir()
	key := pubKeyConfig(t, fx.publicKey)
	met := write(t, dir, "met.yml", key+"    annotations: {env: prod}\n")
	wrongAnnotation := write(t, dir, "annotation.yml", key+"    annotations: {env: dev}\n")
	otherKey := write(t, dir, "other.yml", pubKeyConfig(t, fx.otherPublic))
	// anyOf: one of the two keys is enough, but two matches are required.
	anyOf := write(t, dir, "anyof.yml", "apiVersion: v1\nanyOf:\n  minimumMatches: 2\n  signatures:\n"+
		indentLines(strings.TrimPrefix(key, "apiVersion: v1\nallOf:\n"), "  ")+
		indentLines(strings.TrimPrefix(pubKeyConfig(t, fx.otherPublic), "apiVersion: v1\nallOf:\n"), "  "))
	notYAML := write(t, dir, "broken.yml", "allOf: [")
	request := requestFile(t, `{"app": "web", "forbidden": "x"}`, false)
	settings := `{"denied_labels":["forbidden"]}`
	resource := write(t, dir, "policy.yaml", fmt.Sprintf(`apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata: {name: labels}
spec:
  module: %s
  settings: %s
  rules: []
  mutating: false
`, fx.signed, settings))
	stored := filepath.Join("registry", fx.reg.Host, "policies", "labels:v1")
	notValidated := func(uri string) string { return "policy " + uri + " cannot be validated: " }

	tests := []struct {
		name    string
		args    []string
		code    int
		stdout  string
		wantErr string
		stored  bool
	}{
		{name: "pull met", args: []string{"pull", "--verification-config-path", met, fx.signed}, stdout: " pulled to ", stored: true},
		{name: "pull wrong annotation", args: []string{"pull", "--verification-config-path", wrongAnnotation, fx.signed}, code: 1,
			wantErr: notValidated(fx.signed) + "signature verification failed"},
		{name: "pull other key", args: []string{"pull", "--verification-config-path", otherKey, fx.signed}, code: 1,
			wantErr: notValidated(fx.signed) + "signature verification failed"},
		{name: "pull anyOf short of minimumMatches", args: []string{"pull", "--verification-config-path", anyOf, fx.signed}, code: 1,
			wantErr: notValidated(fx.signed) + "signature verification failed: anyOf: 1 of the minimumMatches 2 met"},
		{name: "pull unsigned", args: []string{"pull", "--verification-config-path", met, fx.unsigned}, code: 1,
			wantErr: notValidated(fx.unsigned) + "the module is not signed"},
		{name: "pull missing config", args: []string{"pull", "--verification-config-path", filepath.Join(dir, "none.yml"), fx.signed}, code: 1,
			wantErr: "verification config " + filepath.Join(dir, "none.yml")},
		{name: "pull broken config", args: []string{"pull", "--verification-config-path", notYAML, fx.signed}, code: 1,
			wantErr: "verification config " + notYAML},

		{name: "run met", args: []string{"run", "--verification-config-path", met, "-r", request, "--settings-json", settings, fx.signed},
			stdout: `"allowed":false`, stored: true},
		{name: "run wrong annotation", args: []string{"run", "--verification-config-path", wrongAnnotation, "-r", request, "--settings-json", settings, fx.signed}, code: 1,
			wantErr: notValidated(fx.signed) + "signature verification failed"},
		{name: "run unsigned", args: []string{"run", "--verification-config-path", met, "-r", request, fx.unsigned}, code: 1,
			wantErr: notValidated(fx.unsigned) + "the module is not signed"},
		{name: "run resource met", args: []string{"run", "--verification-config-path", met, "-r", request, resource},
			stdout: `"allowed":false`, stored: true},
		{name: "run resource other key", args: []string{"run", "--verification-config-path", otherKey, "-r", request, resource}, code: 1,
			wantErr: notValidated(fx.signed) + "signature verification failed"},
		{name: "bench other key", args: []string{"bench", "--verification-config-path", otherKey, "-r", request, "--warm-up-time", "0", "--measurement-time", "0", fx.signed}, code: 1,
			wantErr: notValidated(fx.signed) + "signature verification failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newVerifyEnv(t)
			r := e.run(append(append([]string{tc.args[0]}, src...), tc.args[1:]...)...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
			} else if !strings.Contains(r.stdout, tc.stdout) {
				t.Errorf("stdout lacks %q\n%s", tc.stdout, r)
			}
			files := storedFiles(t, e)
			switch {
			case tc.stored && (len(files) != 1 || !strings.HasSuffix(files[0], stored)):
				t.Errorf("store holds %q, want %s", files, stored)
			case !tc.stored && len(files) > 0:
				t.Errorf("store holds %q, want nothing", files)
			}
		})
	}
}

// indentLines puts prefix before every line of s.
func indentLines(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}
