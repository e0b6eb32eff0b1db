package cmdline

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// RouteLibraryLogs sends the logs of the Kubernetes libraries a daemon
// links to logger: controller-runtime's (its clients and caches log through
// a global logger that, unset, prints a goroutine stack saying it never
// was) and klog's (client-go's leader election and the API server's
// admission plugins print klog's text lines on stderr otherwise, in the
// middle of the daemon's JSON lines).
func RouteLibraryLogs(logger *slog.Logger) {
	ctrllog.SetLogger(logr.FromSlogHandler(logger.Handler()))
	klog.SetSlogLogger(logger)
}

// RESTConfig loads the Kubernetes client configuration of a --kubeconfig
// flag as kubectl does: the file at path when it is set, else the files of
// $KUBECONFIG or ~/.kube/config, else the in-cluster configuration.
func RESTConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the Kubernetes client configuration: %w", err)
	}
	return cfg, nil
}

// Starter is what RunManager runs: a controller-runtime manager.
type Starter interface {
	Start(ctx context.Context) error
}

// RunManager is the end of a controller daemon's Main: it logs JSON to
// stderr, loads the configuration --kubeconfig names, makes the manager
// with newManager and runs it until ctx is done. It returns the exit code,
// 1 after an error, which it prints on stderr.
func RunManager(ctx context.Context, stderr io.Writer, kubeconfig string, newManager func(*rest.Config, *slog.Logger) (Starter, error)) int {
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	RouteLibraryLogs(logger)
	cfg, err := RESTConfig(kubeconfig)
	if err == nil {
		var mgr Starter
		if mgr, err = newManager(cfg, logger); err == nil {
			err = mgr.Start(ctx)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	return 0
}
