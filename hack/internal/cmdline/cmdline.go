// Package cmdline parses the command lines of the benchmark tools under
// hack/ the same way: Go flags, no positional arguments, an options check,
// and the exit status 2 for a bad command line.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Options are a tool's flags.
type Options interface {
	// AddFlags registers the options as flags of fs.
	AddFlags(fs *flag.FlagSet)
	// Validate checks the parsed options.
	Validate() error
}

// Parse parses args (args[0] is the program name) into opts. usage is the
// first paragraph of the help text, before the flag list. When ok is
// false the program should exit with code: 0 after -help, 2 for a bad
// command line, which Parse has already explained on stderr.
func Parse(name, usage string, args []string, opts Options, stderr io.Writer) (code int, ok bool) {
	if len(args) > 0 {
		args = args[1:]
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s Flags:\n", usage)
		fs.PrintDefaults()
	}
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", name, fs.Args())
		return 2, false
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2, false
	}
	return 0, true
}
