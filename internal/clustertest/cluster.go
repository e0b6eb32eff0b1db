//go:build cluster

package clustertest

import (
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// startTimeoutEnv is envtest's variable for how long the control plane may
// take to start. Its default, 20s, is short for a busy two-core machine, so
// Start waits longer unless the variable is set.
const startTimeoutEnv = "KUBEBUILDER_CONTROLPLANE_START_TIMEOUT"

// defaultStartTimeout is how long Start lets etcd and kube-apiserver each
// take to become healthy when startTimeoutEnv is not set.
const defaultStartTimeout = 2 * time.Minute

// Cluster is a running kube-apiserver with its etcd, started by Start and
// stopped when the test that started it ends. Its fields are set by Start and
// must not be changed; Config and Client may be used from any goroutine.
type Cluster struct {
	// Config connects to the API server as an administrator (a user in
	// system:masters), over TLS on loopback (127.0.0.1). Copy it (rest.CopyConfig)
	// before changing it.
	Config *rest.Config
	// Client is a controller-runtime client for Config that knows the kinds
	// of the scheme given with WithScheme.
	Client client.Client
	// Scheme is the scheme Client was made with.
	Scheme *runtime.Scheme

	stop func()
}

// Stop stops the API server and etcd before the test ends, as a cluster
// that goes down; it reports a failure to stop as a test error. Stopping
// twice, or at the end of the test after Stop, does nothing more.
func (c *Cluster) Stop() { c.stop() }

// Option configures Start.
type Option func(*options)

type options struct {
	crdDirs       []string
	scheme        *runtime.Scheme
	apiServerArgs [][2]string
}

// WithAPIServerFlag adds --name=value to kube-apiserver's command line,
// for instance an --admission-control-config-file.
func WithAPIServerFlag(name, value string) Option {
	return func(o *options) { o.apiServerArgs = append(o.apiServerArgs, [2]string{name, value}) }
}

// WithCRDDirectory installs the CustomResourceDefinitions found in the YAML
// and JSON files of each directory before Start returns, and waits until they
// are served. A directory that does not exist fails the test. Give the
// scheme of their kinds with WithScheme to use them through Cluster.Client.
func WithCRDDirectory(dirs ...string) Option {
	return func(o *options) { o.crdDirs = append(o.crdDirs, dirs...) }
}

// WithScheme makes Cluster.Client with scheme, which must hold every kind the
// test reads or writes through it, built-in kinds included. Without it the
// client knows the built-in Kubernetes kinds only. Start does not change
// scheme.
func WithScheme(scheme *runtime.Scheme) Option {
	return func(o *options) { o.scheme = scheme }
}

// Start starts etcd and kube-apiserver on 127.0.0.1 from the binaries in
// KUBEBUILDER_ASSETS, installs the CRDs given with WithCRDDirectory, and
// returns once the API server serves them. Both processes are stopped and
// their data removed when t ends (t.Cleanup). Each call starts a control plane
// of its own, so parallel tests do not share one. When KUBEBUILDER_ASSETS is
// unset, or lacks a binary, the test fails with how to build them. Start must
// be called from the goroutine running the test.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}

	dir, err := assetsDir(os.Getenv)
	if err != nil {
		t.Fatalf("starting a test cluster: %v", err)
	}

	scheme := o.scheme
	if scheme == nil {
		scheme = runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			t.Fatalf("starting a test cluster: registering the built-in kinds: %v", err)
		}
	}

	useExisting := false
	env := &envtest.Environment{
		// A USE_EXISTING_CLUSTER left in the environment must not point
		// the tests at a real cluster.
		UseExistingCluster:    &useExisting,
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     o.crdDirs,
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	if os.Getenv(startTimeoutEnv) == "" {
		env.ControlPlaneStartTimeout = defaultStartTimeout
	}
	for _, a := range o.apiServerArgs {
		env.ControlPlane.GetAPIServer().Configure().Append(a[0], a[1])
	}

	cfg, err := env.Start()
	if err != nil {
		// A failed start can leave etcd or kube-apiserver running.
		if stopErr := env.Stop(); stopErr != nil {
			t.Logf("stopping the test cluster after it failed to start: %v", stopErr)
		}
		t.Fatalf("starting a test cluster with the binaries in %s: %v", dir, err)
	}
	stop := sync.OnceFunc(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the test cluster: %v", err)
		}
	})
	t.Cleanup(stop)

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("starting a test cluster: making a client: %v", err)
	}
	return &Cluster{Config: cfg, Client: c, Scheme: scheme, stop: stop}
}
