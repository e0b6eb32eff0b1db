package policysync

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/wardenhq/warden/internal/buildinfo"
	"github.com/wardenhq/warden/internal/cmdline"
)

// Main runs the policy-syncer command: it parses args (without the program
// name), syncs until ctx is done, and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts := DefaultOptions()
	fs := pflag.NewFlagSet("policy-syncer", pflag.ContinueOnError)
	opts.AddFlags(fs)
	version := fs.Bool("version", false, "Print the version and exit")
	if code, done := cmdline.Parse(fs, args, stdout, stderr); done {
		return code
	}
	if *version {
		fmt.Fprintf(stdout, "policy-syncer (Warden) %s\n", buildinfo.String())
		return 0
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return cmdline.ExitUsage
	}
	return cmdline.RunManager(ctx, stderr, opts.Kubeconfig, func(cfg *rest.Config, logger *slog.Logger) (cmdline.Starter, error) {
		return NewManager(cfg, opts, logger)
	})
}
