package cmdline

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestLoadRESTConfigPrecedence checks the order LoadRESTConfig documents:
// --kubeconfig, then $KUBECONFIG, then ~/.kube/config, then the pod's
// in-cluster configuration. Each source of testdata names a server of its
// own; the in-cluster one is faked.
func TestLoadRESTConfigPrecedence(t *testing.T) {
	td := func(name string) string { return filepath.Join("testdata", name) }
	list := func(paths ...string) string { return strings.Join(paths, string(filepath.ListSeparator)) }
	const (
		flag      = "https://flag.example:6443"
		env1      = "https://env1.example:6443"
		env2      = "https://env2.example:6443"
		home      = "https://home.example:6443"
		inCluster = "https://10.96.0.1:443"
	)
	inPod := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
	with := func(env map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range env {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	everything := with(inPod, "KUBECONFIG", td("env1.kubeconfig"), "HOME", td("home"))
	tests := []struct {
		name     string
		flag     string
		env      map[string]string
		wantHost string
		wantErr  string // prefix; ErrNoKubeConfig's text for that error
	}{
		{name: "the flag before everything", flag: td("flag.kubeconfig"), env: everything, wantHost: flag},
		{name: "KUBECONFIG before ~/.kube/config and the pod", env: everything, wantHost: env1},
		{name: "~/.kube/config before the pod", env: with(inPod, "HOME", td("home")), wantHost: home},
		{name: "the pod last", env: with(inPod, "HOME", td("nohome")), wantHost: inCluster},
		{name: "KUBECONFIG's files merged, the first one's context", env: with(nil, "KUBECONFIG", list(td("env1.kubeconfig"), td("env2.kubeconfig"))), wantHost: env1},
		{name: "KUBECONFIG's missing files skipped", env: with(nil, "KUBECONFIG", list(td("missing"), td("env2.kubeconfig"))), wantHost: env2},
		{name: "KUBECONFIG hides ~/.kube/config", env: with(inPod, "KUBECONFIG", td("missing"), "HOME", td("home")), wantHost: inCluster},
		{name: "an empty ~/.kube/config gives way to the pod", env: with(inPod, "HOME", td("emptyhome")), wantHost: inCluster},
		{name: "a missing flag file is an error, even in a pod", flag: td("missing"), env: everything,
			wantErr: "loading the Kubernetes client configuration of " + td("missing") + ": stat " + td("missing") + ": no such file"},
		{name: "a flag file without a configuration is an error", flag: td("emptyhome/.kube/config"), env: everything,
			wantErr: "loading the Kubernetes client configuration: " + td("emptyhome/.kube/config") + " holds none"},
		{name: "KUBECONFIG without a configuration, outside a pod", env: with(nil, "KUBECONFIG", td("missing"), "HOME", td("home")),
			wantErr: "loading the Kubernetes client configuration: " + td("missing") + " holds none"},
		{name: "an empty ~/.kube/config outside a pod", env: with(nil, "HOME", td("emptyhome")),
			wantErr: "loading the Kubernetes client configuration: " + td("emptyhome/.kube/config") + " holds none"},
		{name: "nothing", env: with(nil, "HOME", td("nohome")), wantErr: ErrNoKubeConfig.Error()},
		{name: "no HOME", env: nil, wantErr: ErrNoKubeConfig.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			fakeInCluster := func() (*rest.Config, error) { return &rest.Config{Host: inCluster}, nil }
			cfg, err := loadRESTConfig(tt.flag, getenv, fakeInCluster)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q...", err, tt.wantErr)
				}
				if noConfig := tt.wantErr == ErrNoKubeConfig.Error(); errors.Is(err, ErrNoKubeConfig) != noConfig {
					t.Errorf("errors.Is(%v, ErrNoKubeConfig) = %t, want %t", err, !noConfig, noConfig)
				}
			case err != nil:
				t.Fatal(err)
			case cfg.Host != tt.wantHost:
				t.Errorf("host %s, want %s", cfg.Host, tt.wantHost)
			}
		})
	}
}

// TestLoadRESTConfigInClusterError: in a pod whose in-cluster configuration
// cannot be read (no service account token), the error says so.
func TestLoadRESTConfigInClusterError(t *testing.T) {
	getenv := func(k string) string { return map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1"}[k] }
	_, err := loadRESTConfig("", getenv, func() (*rest.Config, error) { return nil, rest.ErrNotInCluster })
	if !errors.Is(err, rest.ErrNotInCluster) || !strings.HasPrefix(err.Error(), "loading the in-cluster Kubernetes client configuration: ") {
		t.Errorf("error %v", err)
	}
}
