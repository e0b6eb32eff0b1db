package clustertest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// assetsEnv names the directory that holds kube-apiserver and etcd. It is
// envtest's own variable, so the directory also works with envtest directly.
const assetsEnv = "KUBEBUILDER_ASSETS"

// assetsHint tells the user how to get the binaries.
const assetsHint = `run hack/cluster-test.sh, which builds them and runs the cluster tests, ` +
	`or build them first with export KUBEBUILDER_ASSETS="$(hack/cluster-bins.sh)"`

// binaries are the programs the control plane runs, looked up in the assets
// directory.
var binaries = []string{"kube-apiserver", "etcd"}

// assetsDir returns the directory named by KUBEBUILDER_ASSETS, as looked up
// by getenv, after checking that it holds an executable of each of binaries.
// Its errors say how to build the binaries.
func assetsDir(getenv func(string) string) (string, error) {
	dir := getenv(assetsEnv)
	if dir == "" {
		return "", fmt.Errorf("%s is not set: the cluster tests need kube-apiserver and etcd; %s", assetsEnv, assetsHint)
	}
	for _, name := range binaries {
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return "", fmt.Errorf("%s=%s has no %s; %s", assetsEnv, dir, name, assetsHint)
		case err != nil:
			return "", fmt.Errorf("looking for %s in %s=%s: %w", name, assetsEnv, dir, err)
		case info.IsDir() || info.Mode().Perm()&0o111 == 0:
			return "", fmt.Errorf("%s is not an executable file; %s", path, assetsHint)
		}
	}
	return dir, nil
}
