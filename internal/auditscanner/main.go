package auditscanner

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	wgpolicyv1alpha2 "sigs.k8s.io/wg-policy-prototypes/policy-report/pkg/api/wgpolicyk8s.io/v1alpha2"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/buildinfo"
	"github.com/wardenhq/warden/internal/cmdline"
	"github.com/wardenhq/warden/internal/observability"
)

// Exit codes of Main besides 0 and cmdline.ExitUsage.
const (
	// ExitFailed: the audit could not run, or some scope was incomplete.
	ExitFailed = 1
)

// Main runs the audit-scanner command: it parses args (without the program
// name), runs one audit against the cluster that cmdline.LoadRESTConfig
// finds (KUBECONFIG, ~/.kube/config or the pod's service account), and
// returns the process exit code: 0 when the audit was complete, ExitFailed
// when it could not run or some scope was incomplete, cmdline.ExitUsage for
// a bad command line. Logs go to stderr as JSON lines; --output-scan prints
// the reports on stdout.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	opts := DefaultOptions()
	cmd := cmdline.Daemon{Name: "audit-scanner", Version: "audit-scanner (Warden) " + buildinfo.String()}
	if code, done := cmd.Parse(&opts, args, stdout, stderr); done {
		return code
	}
	level, _ := parseLogLevel(opts.LogLevel) // valid: Validate checked it
	logger, err := observability.NewLogger(stderr, level, "json", true)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return cmdline.ExitUsage
	}
	// controller-runtime's client and the API server's admission plugins
	// of the ValidatingAdmissionPolicies log through global loggers.
	cmdline.RouteLibraryLogs(logger)
	cfg, err := cmdline.LoadRESTConfig("", getenv)
	if err != nil {
		logger.Error("audit not started", keyError, err)
		return ExitFailed
	}
	cfg.QPS, cfg.Burst = opts.KubeAPIQPS, opts.KubeAPIBurst
	cfg.UserAgent = "warden-audit-scanner/" + buildinfo.String()
	scanner, err := newForConfig(opts, cfg, stdout, logger)
	if err != nil {
		logger.Error("audit not started", keyError, err)
		return ExitFailed
	}
	if err := scanner.Run(ctx); err != nil {
		logger.Error("audit failed", keyError, err)
		return ExitFailed
	}
	return 0
}

// newForConfig makes the clients of cfg and returns a scanner using them.
func newForConfig(opts Options, cfg *rest.Config, stdout io.Writer, logger *slog.Logger) (*Scanner, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("making the Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the Kubernetes client: %w", err)
	}
	return New(opts, Config{Kube: kube, Dynamic: dyn, Stdout: stdout, Logger: logger})
}

// NewScheme returns a scheme with every kind the scanner reads or writes:
// the built-in kinds, the policy kinds and both report kinds.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, policiesv1.AddToScheme,
		openreportsv1alpha1.Install, wgpolicyv1alpha2.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building the scheme: %w", err)
		}
	}
	return s, nil
}
