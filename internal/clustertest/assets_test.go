package clustertest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAssetsDir(t *testing.T) {
	full := t.TempDir()
	for _, name := range binaries {
		if err := os.WriteFile(filepath.Join(full, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	noEtcd := t.TempDir()
	if err := os.WriteFile(filepath.Join(noEtcd, "kube-apiserver"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExecutable := t.TempDir()
	for _, name := range binaries {
		if err := os.WriteFile(filepath.Join(notExecutable, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name    string
		env     string
		wantErr []string // substrings of the error; nil means no error
	}{
		{name: "unset", env: "", wantErr: []string{"KUBEBUILDER_ASSETS is not set", "hack/cluster-bins.sh", "hack/cluster-test.sh"}},
		{name: "empty directory", env: t.TempDir(), wantErr: []string{"has no kube-apiserver", "hack/cluster-bins.sh"}},
		{name: "no etcd", env: noEtcd, wantErr: []string{"has no etcd", "hack/cluster-bins.sh"}},
		{name: "not executable", env: notExecutable, wantErr: []string{"kube-apiserver is not an executable file", "hack/cluster-bins.sh"}},
		{name: "both binaries", env: full},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(key string) string {
				if key == assetsEnv {
					return tt.env
				}
				return ""
			}
			dir, err := assetsDir(getenv)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("assetsDir() error = %v, want none", err)
				}
				if dir != tt.env {
					t.Errorf("assetsDir() = %q, want %q", dir, tt.env)
				}
				return
			}
			if err == nil {
				t.Fatalf("assetsDir() = %q, want an error", dir)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("assetsDir() error = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}
