package cmdline

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Run calls main with a context cancelled on the first SIGINT or SIGTERM
// and returns the exit code main returns. Every Warden binary's main is
// os.Exit(cmdline.Run(...)) around its package's Main.
func Run(main func(ctx context.Context) int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return main(ctx)
}

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
