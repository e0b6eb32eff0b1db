package policyserver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/testkit/ociregistry"
)

// TestRegistryModules loads a policy pushed to a real OCI registry (plain
// HTTP, declared insecure in sources.yml) and keeps it in the download dir.
func TestRegistryModules(t *testing.T) {
	reg := ociregistry.Start(t, ociregistry.Plain())
	host := reg.Host
	sources := reg.SourcesFile(t)
	dir := t.TempDir()
	wasm, err := os.ReadFile(policybuild.ForTest(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	pusher, err := policyfetch.New(policyfetch.Options{StoreDir: t.TempDir(), Sources: mustSources(t, sources)})
	if err != nil {
		t.Fatal(err)
	}
	defer pusher.Close()
	ref := "registry://" + host + "/policies/labels:v1.0.0"
	if _, err := pusher.Push(context.Background(), ref, wasm, nil); err != nil {
		t.Fatal(err)
	}

	opts := testOptions(t, writePolicies(t, "labels: {module: "+ref+", settings: {denied_labels: [forbidden]}}\n"))
	opts.SourcesPath = sources
	opts.DownloadDir = filepath.Join(dir, "store")
	ts := startServer(t, opts)
	if resp := ts.review(t, "/validate/labels", admissiontest.New(admissiontest.WithUID("u1"), admissiontest.WithLabels(map[string]string{"forbidden": "x"})).JSON()); resp.Allowed {
		t.Error("the policy pulled from the registry accepted a forbidden label")
	}
	stored := filepath.Join(opts.DownloadDir, "registry", host, "policies", "labels:v1.0.0")
	if _, err := os.Stat(stored); err != nil {
		t.Errorf("the module is not in the store: %v", err)
	}
}

func mustSources(t *testing.T, path string) *policyfetch.Sources {
	t.Helper()
	s, err := policyfetch.LoadSources(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
