// Package cmdline is the start-up Warden's binaries share. Run is the body
// of every main: it cancels the context of the program's Main on SIGINT or
// SIGTERM. Parse parses the flags of the daemons (policy-server,
// controller, audit-scanner, policy-syncer) the way their users expect of
// a Unix command: --help prints the usage on stdout and exits 0; an unknown
// flag or a bad value prints the parser's error and the usage on stderr and
// exits 2 (wardenctl has cobra, which does the same). LoadRESTConfig is the
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
