package policyserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadPoliciesRefusesDangerousValues checks that the policies file's
// dangerous values stop the server with an error naming the file and the
// key's path.
func TestReadPoliciesRefusesDangerousValues(t *testing.T) {
	tests := []struct {
		name, doc, wantErr string
	}{
		{
			name:    "a timeout that overflows",
			doc:     "pod-privileged:\n  module: file:///a.wasm\n  timeoutEvalSeconds: 9300000000\n",
			wantErr: "pod-privileged.timeoutEvalSeconds: must be at most 3600 (seconds), not 9300000000",
		},
		{
			name:    "a duplicated id",
			doc:     "a:\n  module: file:///a.wasm\na:\n  module: file:///b.wasm\n",
			wantErr: "policy id a is defined twice, at lines 1 and 3",
		},
		{
			name:    "settings that are a string",
			doc:     "a:\n  module: file:///a.wasm\n  settings: str\n",
			wantErr: "a.settings: must be a mapping, not a string",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "policies.yml")
			if err := os.WriteFile(path, []byte(tt.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := readPolicies(path)
			if want := path + ": " + tt.wantErr; err == nil || err.Error() != want {
				t.Fatalf("readPolicies = %v, want %q", err, want)
			}
		})
	}
}

// TestReadPoliciesKeepsIgnoredKeys checks that a misspelled key does not
// stop the server, and is kept for the environment to warn about.
func TestReadPoliciesKeepsIgnoredKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yml")
	if err := os.WriteFile(path, []byte("a:\n  module: file:///a.wasm\n  settingz: {x: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	configs, err := readPolicies(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(configs["a"].IgnoredKeys, ","); got != "a.settingz" {
		t.Errorf("IgnoredKeys = %q, want a.settingz", got)
	}
}
