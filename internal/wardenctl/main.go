package wardenctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wardenhq/warden/internal/observability"
)

// Exit codes of Main.
const (
	exitOK    = 0
	exitError = 1 // the command failed, or (test, scan) found failures
	exitUsage = 2 // bad arguments or flags
)

// Main runs wardenctl with args (without the program name) and returns the
// process exit code. Errors are written to stderr on one line, prefixed with
// "Error: "; a rejected request is not an error.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{in: stdin, out: stdout, errOut: stderr, getenv: getenv}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var fe *failedError
	if errors.As(err, &fe) {
		return exitError // already reported by the command
	}
	fmt.Fprintf(stderr, "Error: %s\n", oneLine(err.Error()))
	var ue *usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command ") {
		return exitUsage
	}
	return exitError
}

// app is what every command shares: the process's streams and environment
// and the global flags.
type app struct {
	in          io.Reader
	out, errOut io.Writer
	getenv      func(string) string

	verbose bool
	noColor bool
}

// usageError is an error in the command line: unknown flag, missing argument.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// failedError reports that a command ran to completion and printed its
// findings, but they amount to a failure (test cases that fail, scan
// violations): the exit code is non-zero and nothing more is printed.
type failedError struct{ what string }

func (e *failedError) Error() string { return e.what }

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "wardenctl",
		Short: "Manage, run and test Kubewarden policies with Warden",
		Long: "wardenctl runs, benchmarks, publishes and inspects Kubewarden policies. It is " +
			"compatible with kwctl: same commands, same flags, same store.",
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	versionFlag(root)
	root.PersistentFlags().BoolVarP(&a.verbose, "verbose", "v", false, "Increase verbosity (debug logs)")
	root.PersistentFlags().BoolVar(&a.noColor, "no-color", false, "Disable colorful output")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(
		a.versionCommand(),
		a.completionCommand(root),
		a.runCommand(),
		a.benchCommand(),
		a.pullCommand(),
		a.verifyCommand(),
		a.signCommand(),
		a.pushCommand(),
		a.policiesCommand(),
		a.rmCommand(),
		a.digestCommand(),
		a.inspectCommand(),
		a.annotateCommand(),
		a.scaffoldCommand(),
		a.testCommand(),
		a.scanCommand(),
		a.saveCommand(),
		a.loadCommand(),
		a.infoCommand(),
		a.docsCommand(root),
	)
	return root
}

// args wraps a cobra argument check so that its failure is a usage error.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return &usageError{err}
		}
		return nil
	}
}

// logger returns the logger of the commands: text on stderr, info level, or
// debug with --verbose. Policies' own log lines go there too.
func (a *app) logger() *slog.Logger {
	level := "info"
	if a.verbose {
		level = "debug"
	}
	l, err := observability.NewLogger(a.errOut, level, "text", a.noColor)
	if err != nil { // cannot happen with these constant arguments
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// home returns $HOME, or "" when it is not set.
func (a *app) home() string { return a.getenv("HOME") }

// cacheHome is $XDG_CACHE_HOME, else ~/.cache.
func (a *app) cacheHome() string {
	if d := a.getenv("XDG_CACHE_HOME"); d != "" {
		return d
	}
	return filepath.Join(a.home(), ".cache")
}

// configHome is $XDG_CONFIG_HOME, else ~/.config.
func (a *app) configHome() string {
	if d := a.getenv("XDG_CONFIG_HOME"); d != "" {
		return d
	}
	return filepath.Join(a.home(), ".config")
}

// storeDir is kwctl's store: ~/.cache/kubewarden/store, so that wardenctl and
// kwctl share their pulled policies.
func (a *app) storeDir() string { return filepath.Join(a.cacheHome(), "kubewarden", "store") }

// wasmCacheDir holds compiled modules, shared with the policy server's
// default --cache-dir; WARDEN_CACHE_DIR overrides it, as it does the server's.
func (a *app) wasmCacheDir() string {
	if d := a.getenv("WARDEN_CACHE_DIR"); d != "" {
		return d
	}
	return filepath.Join(a.cacheHome(), "warden", "wasm")
}

// oneLine joins the lines of a multi-line error message.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "\n") {
		return s
	}
	lines := strings.Split(s, "\n")
	out := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

// versionFlag gives root cobra's --version flag, printing versionLine. It
// does not set root.Version with a version template: cobra runs templates
// with text/template, whose calls of methods by name make the linker keep
// every exported method of every type in the binary (about 20 MB of
// wardenctl built as the images are, -tags grpcnotrace). As cobra does,
// --help wins over --version.
func versionFlag(root *cobra.Command) {
	root.Flags().Bool("version", false, "version for "+root.Name())
	_ = root.Flags().SetAnnotation("version", cobra.FlagSetByCobraAnnotation, []string{"true"})
	help := root.HelpFunc()
	// A root command that does not run asks for its help; with --version
	// that help is the version.
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		helpFlag, _ := c.Flags().GetBool("help")
		version, _ := c.Flags().GetBool("version")
		if c == root && version && !helpFlag {
			fmt.Fprintln(c.OutOrStdout(), versionLine())
			return
		}
		help(c, args)
	})
}
