// Package cmdline is the start-up Warden's binaries share. Run is the body
// of every main: it cancels the context of the program's Main on SIGINT or
// SIGTERM. Parse parses the flags of the daemons (policy-server,
// controller, audit-scanner, policy-syncer) the way their users expect of
// a Unix command: --help prints the usage on stdout and exits 0; an unknown
// flag or a bad value prints the parser's error and the usage on stderr and
// exits 2 (wardenctl has cobra, which does the same). Daemon.Parse is the
// start of each daemon's Main: its Options' flags, --version, and
// Validate, with the same exit codes. LoadRESTConfig is the
// one loader of the Kubernetes client configuration, with its precedence;
// RouteLibraryLogs and RunManager are the rest of a daemon's start.
// It imports nothing of Warden's.
package cmdline

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
)

// ExitUsage is the exit code of a command line that cannot be parsed.
const ExitUsage = 2

// Parse parses args with fs. When it returns done, the command must exit
// with code: 0 after --help, ExitUsage after an error, both already
// reported on stdout or stderr.
func Parse(fs *pflag.FlagSet, args []string, stdout, stderr io.Writer) (code int, done bool) {
	fs.SetOutput(stdout) // pflag prints the usage of --help itself
	err := fs.Parse(args)
	switch {
	case err == nil:
		fs.SetOutput(stderr)
		return 0, false
	case errors.Is(err, pflag.ErrHelp):
		return 0, true
	}
	fs.SetOutput(stderr)
	fmt.Fprintf(stderr, "Error: %v\n", err)
	if fs.Usage != nil {
		fs.Usage()
	} else {
		fmt.Fprintf(stderr, "Usage of %s:\n%s", fs.Name(), fs.FlagUsages())
	}
	return ExitUsage, true
}

// Options are a daemon's options: AddFlags adds the flags that set them,
// Validate checks the values they were set to.
type Options interface {
	AddFlags(fs *pflag.FlagSet)
	Validate() error
}

// Daemon is the command line of a daemon. Its zero value has no --version
// flag and nothing read from the environment.
type Daemon struct {
	// Name is the name of the daemon's flag set, in its usage.
	Name string
	// Version, unless empty, is the line the --version flag prints on
	// stdout (without its newline).
	Version string
	// Env, unless nil, runs once the flags are parsed, before Validate:
	// it sets from the environment the flags the command line left unset
	// (the policy server's KUBEWARDEN_* variables).
	Env func(fs *pflag.FlagSet) error
}

// Parse parses args into opts (Parse) and checks them: --version prints
// d.Version, then Env runs and opts.Validate. When it returns done, the
// daemon must exit with code: 0 after --help or --version, ExitUsage after
// a command line that cannot be parsed, an error of Env or options that are
// not valid, each already reported on stdout or stderr ("Error: ..." on
// stderr for the last two).
func (d Daemon) Parse(opts Options, args []string, stdout, stderr io.Writer) (code int, done bool) {
	fs := pflag.NewFlagSet(d.Name, pflag.ContinueOnError)
	opts.AddFlags(fs)
	var version *bool
	if d.Version != "" {
		version = fs.Bool("version", false, "Print the version and exit")
	}
	if code, done := Parse(fs, args, stdout, stderr); done {
		return code, true
	}
	if version != nil && *version {
		fmt.Fprintln(stdout, d.Version)
		return 0, true
	}
	if d.Env != nil {
		if err := d.Env(fs); err != nil {
			fmt.Fprintf(stderr, "Error: %v\n", err)
			return ExitUsage, true
		}
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return ExitUsage, true
	}
	return 0, false
}
