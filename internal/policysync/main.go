package policysync

import (
	"context"
	"io"
	"log/slog"

	"k8s.io/client-go/rest"

	"github.com/wardenhq/warden/internal/buildinfo"
	"github.com/wardenhq/warden/internal/cmdline"
)

// Main runs the policy-syncer command: it parses args (without the program
// name), syncs until ctx is done, and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts := DefaultOptions()
	cmd := cmdline.Daemon{Name: "policy-syncer", Version: "policy-syncer (Warden) " + buildinfo.String()}
	if code, done := cmd.Parse(&opts, args, stdout, stderr); done {
		return code
	}
	return cmdline.RunManager(ctx, stderr, opts.Kubeconfig, func(cfg *rest.Config, logger *slog.Logger) (cmdline.Starter, error) {
		return NewManager(cfg, opts, logger)
	})
}
