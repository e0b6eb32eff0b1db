package cmdline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ErrNoKubeConfig is returned by LoadRESTConfig when there is no
// Kubernetes configuration at all.
var ErrNoKubeConfig = errors.New("no Kubernetes configuration: KUBECONFIG is not set, there is no ~/.kube/config, and this is not running in a pod")

// LoadRESTConfig loads the Kubernetes client configuration of every Warden
// binary. It takes the first of these that exists, in kubectl's order,
// which is also that of Kubewarden's policy server and kwctl (kube-rs's
// Config::infer):
//
//  1. the kubeconfig file at path, the --kubeconfig flag, when path is not
//     empty (it must exist and hold a configuration);
//  2. the kubeconfig files $KUBECONFIG lists, merged as kubectl merges
//     them (those missing are skipped);
//  3. ~/.kube/config, when $KUBECONFIG is empty;
//  4. the in-cluster configuration of the pod's service account, when
//     $KUBERNETES_SERVICE_HOST is set.
//
// Files of step 2 or 3 that hold no configuration give way to step 4, and
// outside a pod are an error. ErrNoKubeConfig means that no step applied.
// getenv reads the environment; the in-cluster configuration reads the
// process's own environment and the service account's files.
// (controller-runtime's GetConfig, which Kubewarden's controller uses,
// tries the pod before ~/.kube/config; the two differ only in a pod with a
// ~/.kube/config.)
func LoadRESTConfig(path string, getenv func(string) string) (*rest.Config, error) {
	return loadRESTConfig(path, getenv, rest.InClusterConfig)
}

// RESTConfig is LoadRESTConfig with the process's environment.
func RESTConfig(path string) (*rest.Config, error) {
	return LoadRESTConfig(path, os.Getenv)
}

func loadRESTConfig(path string, getenv func(string) string, inCluster func() (*rest.Config, error)) (*rest.Config, error) {
	if path != "" {
		cfg, _, err := fromKubeconfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, path)
		return cfg, err
	}
	var files []string
	var found bool // step 2 or 3 has files to read
	if v := getenv("KUBECONFIG"); v != "" {
		files, found = filepath.SplitList(v), true
	} else if home := getenv("HOME"); home != "" {
		files = []string{filepath.Join(home, ".kube", "config")}
		_, err := os.Stat(files[0])
		found = err == nil
	}
	var filesErr error
	if found {
		cfg, empty, err := fromKubeconfig(&clientcmd.ClientConfigLoadingRules{Precedence: files},
			strings.Join(files, string(filepath.ListSeparator)))
		if !empty {
			return cfg, err
		}
		filesErr = err
	}
	if getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg, err := inCluster()
		if err != nil {
			return nil, fmt.Errorf("loading the in-cluster Kubernetes client configuration: %w", err)
		}
		return cfg, nil
	}
	if filesErr != nil {
		return nil, filesErr
	}
	return nil, ErrNoKubeConfig
}

// fromKubeconfig loads the kubeconfig files of rules, named names in
// errors; empty tells that they hold no configuration. It never falls back
// to the in-cluster configuration, as clientcmd's deferred loading would.
func fromKubeconfig(rules *clientcmd.ClientConfigLoadingRules, names string) (cfg *rest.Config, empty bool, err error) {
	raw, err := rules.Load()
	if err == nil {
		cfg, err = clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if clientcmd.IsEmptyConfig(err) {
		return nil, true, fmt.Errorf("loading the Kubernetes client configuration: %s holds none", names)
	}
	if err != nil {
		return nil, false, fmt.Errorf("loading the Kubernetes client configuration of %s: %w", names, err)
	}
	return cfg, false, nil
}
