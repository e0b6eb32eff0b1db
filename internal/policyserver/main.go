package policyserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
	"k8s.io/client-go/rest"

	"github.com/wardenhq/warden/internal/buildinfo"
	"github.com/wardenhq/warden/internal/cmdline"
	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/reflector"
	"github.com/wardenhq/warden/internal/verify"
)

// Main runs the policy-server command: it parses args (without the program
// name) and the environment, serves until ctx is done, and returns the
// process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	opts := DefaultOptions()
	cmd := cmdline.Daemon{
		Name:    "policy-server",
		Version: fmt.Sprintf("policy-server (Warden) %s, compatible with Kubewarden %s", buildinfo.String(), CompatVersion),
		Env:     func(fs *pflag.FlagSet) error { return ApplyEnv(fs, getenv) },
	}
	if code, done := cmd.Parse(&opts, NormalizeSeconds(args), stdout, stderr); done {
		return code
	}
	logger, err := observability.NewLogger(stderr, opts.LogLevel, opts.LogFormat, opts.LogNoColor)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return cmdline.ExitUsage // a --log-level or --log-format it cannot use
	}
	// controller-runtime's cache and client, which cluster mode watches
	// PolicyRevisions with, client-go's leader election and the API
	// server's plugins of builtin://vap log through global loggers: to ours.
	cmdline.RouteLibraryLogs(logger)
	// OTLP export failures, of metrics and spans, surface through
	// OpenTelemetry's global handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("otlp export failed", observability.KeyError, err)
	}))
	if getenv("GOMAXPROCS") == "" {
		SetGOMAXPROCS(opts.Workers)
	}
	caps, kube, err := newHostCapabilities(ctx, opts, getenv, logger)
	if err != nil {
		logger.Error("policy server failed to start", observability.KeyError, err)
		return 1
	}
	opts.HostCapabilities = caps
	if kube != nil {
		defer kube.close()
		opts.Reflect = kube.Reflect
		opts.RetainReflectors = kube.RetainReflectors
		opts.ReflectorsSettled = kube.ReflectorsSettled
		opts.ReflectorsWaiting = kube.Waiting
		opts.ReflectorStates = kube.ReflectorStates
		opts.Kube = kube.config // cluster mode reads its revisions there
	}
	srv, err := New(ctx, opts, logger)
	if err != nil {
		logger.Error("policy server failed to start", observability.KeyError, err)
		return 1
	}
	// SIGHUP reads the policies file again, as the file watch does.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				srv.Reload(ctx)
			}
		}
	}()
	if err := srv.Serve(ctx); err != nil {
		logger.Error("policy server stopped", observability.KeyError, err)
		return 1
	}
	return 0
}

// newHostCapabilities returns what answers the policies' host calls:
// registries (under --sources-path and --docker-config-json-path; never
// --verification-path, which is for policy modules), DNS, certificates, and
// the Kubernetes API server of the kubeconfig or of the pod, when there is
// one (cmdline.LoadRESTConfig, without --kubeconfig). Without one, the
// kubernetes host capabilities fail with Kubewarden's "kube::Client was not
// initialized properly"; a configuration that cannot be read fails the
// start unless --ignore-kubernetes-connection-failure. Nothing is
// contacted here.
func newHostCapabilities(ctx context.Context, opts Options, getenv func(string) string, logger *slog.Logger) (*hostcap.Host, *reflectedKubernetes, error) {
	registry, err := newFetcher(opts, logger, nil)
	if err != nil {
		return nil, nil, err
	}
	var kube *hostcap.Kubernetes
	var reflected *reflectedKubernetes
	cfg, err := cmdline.LoadRESTConfig("", getenv)
	if err == nil {
		cfg.UserAgent = "warden-policy-server/" + buildinfo.String()
		reflected, err = newReflectedKubernetes(cfg, opts.ReflectorDBPath, logger)
		if reflected != nil {
			kube = reflected.Kubernetes
		}
	}
	switch {
	case errors.Is(err, cmdline.ErrNoKubeConfig):
		logger.InfoContext(ctx, "no Kubernetes configuration: the kubernetes host capabilities will fail")
	case err != nil && opts.IgnoreKubeFailure:
		logger.WarnContext(ctx, "Kubernetes configuration ignored: the kubernetes host capabilities will fail", observability.KeyError, err)
	case err != nil:
		return nil, nil, fmt.Errorf("kubernetes host capabilities: %w (--ignore-kubernetes-connection-failure starts without them)", err)
	default:
		logger.InfoContext(ctx, "kubernetes host capabilities read the API server", observability.KeyAddr, cfg.Host)
	}
	direct := hostcap.Options{Registry: registry, Kubernetes: kube}
	if opts.SigstoreTrust != "" {
		if direct.SigstoreTrust, err = verify.LoadTrustConfig(opts.SigstoreTrust); err != nil {
			return nil, nil, err
		}
	}
	return hostcap.NewHost(hostcap.NewDirect(direct)), reflected, nil
}

// reflectedKubernetes is the Kubernetes of the host capabilities with its
// reflector store (RFC 004): a SQLite database at --reflector-db-path, or
// in a directory of its own removed when the server stops. The store is a
// cache, rebuilt from the API server at every start.
type reflectedKubernetes struct {
	*hostcap.Kubernetes
	config *rest.Config // of the API server it reads
	store  *reflector.Store
	tmpDir string // removed at close; "" for --reflector-db-path
}

func newReflectedKubernetes(cfg *rest.Config, dbPath string, logger *slog.Logger) (*reflectedKubernetes, error) {
	tmpDir := ""
	if dbPath == "" {
		dir, err := os.MkdirTemp("", "warden-reflectors-")
		if err != nil {
			return nil, fmt.Errorf("creating the reflector store: %w", err)
		}
		tmpDir, dbPath = dir, filepath.Join(dir, "reflectors.db")
	}
	store, err := reflector.Open(dbPath)
	if err != nil {
		_ = os.RemoveAll(tmpDir) // "" removes nothing
		return nil, err
	}
	kube, err := hostcap.NewKubernetes(cfg, hostcap.KubernetesOptions{Store: store, Logger: logger})
	if err != nil {
		store.Close()
		_ = os.RemoveAll(tmpDir) // "" removes nothing
		return nil, err
	}
	logger.Info("reflector store", observability.KeyPath, dbPath)
	return &reflectedKubernetes{Kubernetes: kube, config: cfg, store: store, tmpDir: tmpDir}, nil
}

// close stops the reflectors and removes the store.
func (k *reflectedKubernetes) close() {
	k.Kubernetes.Close()
	_ = k.store.Close()
	_ = os.RemoveAll(k.tmpDir)
}
