package policyserver

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"

	"github.com/wardenhq/warden/internal/buildinfo"
	"github.com/wardenhq/warden/internal/observability"
)

// Main runs the policy-server command: it parses args (without the program
// name) and the environment, serves until ctx is done, and returns the
// process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	opts := DefaultOptions()
	fs := pflag.NewFlagSet("policy-server", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	opts.AddFlags(fs)
	version := fs.Bool("version", false, "Print the version and exit")
	if err := fs.Parse(NormalizeSeconds(args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *version {
		fmt.Fprintf(stdout, "policy-server (Warden) %s, compatible with Kubewarden %s\n", buildinfo.String(), CompatVersion)
		return 0
	}
	if err := ApplyEnv(fs, getenv); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 2
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 2
	}
	logger, err := observability.NewLogger(stderr, opts.LogLevel, opts.LogFormat, opts.LogNoColor)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 2
	}
	// OTLP export failures surface through OpenTelemetry's global handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("metrics export failed", observability.KeyError, err)
	}))
	if getenv("GOMAXPROCS") == "" {
		SetGOMAXPROCS(opts.Workers)
	}
	srv, err := New(ctx, opts, logger)
	if err != nil {
		logger.Error("policy server failed to start", observability.KeyError, err)
		return 1
	}
	if err := srv.Serve(ctx); err != nil {
		logger.Error("policy server stopped", observability.KeyError, err)
		return 1
	}
	return 0
}
