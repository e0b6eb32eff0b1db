// Command examples runs Warden's policy server with example policies written
// in Go and compiled to WebAssembly on the fly. From the root of the
// repository:
//
//	go run ./examples
//
// It builds each policy of examples/policies/ (its own Go module) into
// examples/build/<name>.wasm with internal/policybuild, which caches the
// builds, writes a throwaway CA and a serving certificate for localhost,
// 127.0.0.1 and ::1 into examples/build/tls/, and runs the policy server
// in-process (policyserver.Main) with examples/policies.yml on
// https://127.0.0.1:3000, readiness and /metrics on http://127.0.0.1:8081.
// Once the server is ready it prints curl commands that send it the
// AdmissionReviews of examples/requests/. Ctrl-C stops it.
//
// Paths are relative to the repository root: run from another directory of
// the repository (go run . in examples/), it changes to the root first, and
// outside of it, it fails.
//
// Arguments are policy-server flags. They come after the runner's own
// (--addr, --port, --policies, --cert-file, --key-file), so they win over
// them; relative paths in them are relative to the repository root too. A
// leading "--" is optional:
//
//	go run ./examples -- --port 3443 --log-level debug
//	go run ./examples --help
//
// When 3000 or 8081 is taken, it says so before building; --port and
// --readiness-probe-port pick others. On Linux it stops (as on Ctrl-C) when
// the process that started it exits: stopping go run by its PID stops the
// server too.
//
// It is a development tool: it links internal/policybuild, which runs the go
// command, and needs Go on the PATH.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policyserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // a second Ctrl-C kills at once
	if err := exitWithParent(); err != nil {
		fmt.Fprintf(os.Stderr, "Warning: %v: stopping go run by its PID will not stop the server\n", err)
	}
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// layout is where the runner reads and writes its files. Paths are relative
// to the repository root unless a test sets them otherwise.
type layout struct {
	// PolicySources holds one directory per policy (main.go and metadata.yml).
	PolicySources string
	// Modules receives the built policies as <name>.wasm.
	Modules string
	// TLS receives ca.pem, tls.crt and tls.key.
	TLS string
	// Policies is the example policies.yml, with module URLs relative to
	// the repository root (file://examples/build/<name>.wasm).
	Policies string
	// Resolved receives Policies with those URLs made absolute, which the
	// server loads: a file URI must hold an absolute path, as in
	// Kubewarden.
	Resolved string
	// Requests holds the example AdmissionReviews.
	Requests string
}

// defaultLayout is the layout of the repository.
var defaultLayout = layout{
	PolicySources: filepath.Join("examples", "policies"),
	Modules:       filepath.Join("examples", "build"),
	TLS:           filepath.Join("examples", "build", "tls"),
	Policies:      filepath.Join("examples", "policies.yml"),
	Resolved:      filepath.Join("examples", "build", "policies.yml"),
	Requests:      filepath.Join("examples", "requests"),
}

// Default address of the runner's server: loopback only, unlike the policy
// server's default of every interface.
const (
	defaultAddr = "127.0.0.1"
	defaultPort = 3000
)

// run is the command: args is os.Args. It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	l := defaultLayout
	tlsFiles := l.tlsFiles()
	srvArgs := serverArgs(l.Resolved, tlsFiles, args[1:])
	opts, code, ok := parseServerArgs(srvArgs, stdout, stderr, os.Getenv)
	if !ok {
		return code
	}
	if opts.showVersion {
		return policyserver.Main(ctx, srvArgs, stdout, stderr, os.Getenv)
	}
	if err := checkPorts(opts.Options); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}

	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	root, err := policybuild.RepoRoot(wd)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v: run go run ./examples from the Warden repository\n", err)
		return 1
	}
	if err := os.Chdir(root); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}

	fmt.Fprintf(stdout, "Building the policies in %s (the first build takes a while)...\n", displayDir(wd, root, l.PolicySources))
	start := time.Now()
	built, err := buildPolicies(ctx, l.PolicySources, l.Modules)
	if err != nil {
		return failed(ctx, stderr, err)
	}
	fmt.Fprintf(stdout, "Built %s into %s in %s\n", strings.Join(built, ", "), displayDir(wd, root, l.Modules), time.Since(start).Round(time.Millisecond))
	if err := writeTLS(tlsFiles, certHosts(opts.Addr), time.Now()); err != nil {
		return failed(ctx, stderr, err)
	}
	fmt.Fprintf(stdout, "Wrote a throwaway CA and serving certificate into %s\n", displayDir(wd, root, l.TLS))

	policies := opts.PoliciesPath
	if policies == l.Resolved { // not overridden by --policies
		if _, err := resolvePolicies(l); err != nil {
			return failed(ctx, stderr, err)
		}
		policies = l.Policies
	}
	shown := opts.Options
	shown.PoliciesPath = policies
	text := instructions(shown, l, func(p string) string { return displayPath(wd, root, p) })
	fmt.Fprintf(stdout, "Starting the policy server with %s...\n", displayPath(wd, root, policies))

	annCtx, cancel := context.WithCancel(ctx)
	announced := make(chan struct{})
	go func() {
		defer close(announced)
		announce(annCtx, stdout, readinessURL(opts.Options), text)
	}()
	code = policyserver.Main(ctx, srvArgs, stdout, stderr, os.Getenv)
	cancel()
	<-announced
	return code
}

// checkPorts fails when a port the server is to listen on is taken, before
// the policies are built, naming the flags that pick other ports.
func checkPorts(opts policyserver.Options) error {
	for _, p := range []struct {
		flag string
		port int
	}{{"--port", opts.Port}, {"--readiness-probe-port", opts.ReadinessProbePort}} {
		if p.port == 0 {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(opts.Addr, strconv.Itoa(p.port)))
		if err != nil {
			return fmt.Errorf("%s %d: %w: pick free ports, e.g. go run ./examples -- --port 3443 --readiness-probe-port 8082", p.flag, p.port, err)
		}
		ln.Close()
	}
	return nil
}

// resolvePolicies writes l.Resolved: l.Policies with its module URLs under
// file://examples/build/ pointing into l.Modules by absolute path. It
// returns how many it rewrote.
func resolvePolicies(l layout) (int, error) {
	doc, err := os.ReadFile(l.Policies)
	if err != nil {
		return 0, err
	}
	modules, err := filepath.Abs(l.Modules)
	if err != nil {
		return 0, err
	}
	prefix := []byte("file://" + filepath.ToSlash(defaultLayout.Modules) + "/")
	n := bytes.Count(doc, prefix)
	doc = bytes.ReplaceAll(doc, prefix, []byte("file://"+filepath.ToSlash(modules)+"/"))
	if err := os.MkdirAll(filepath.Dir(l.Resolved), 0o755); err != nil {
		return 0, err
	}
	return n, os.WriteFile(l.Resolved, doc, 0o644)
}

// failed reports err and returns the exit code: 130 without a message when
// ctx was cancelled (Ctrl-C), else 1.
func failed(ctx context.Context, stderr io.Writer, err error) int {
	if ctx.Err() != nil {
		return 130
	}
	fmt.Fprintf(stderr, "Error: %v\n", err)
	return 1
}

// serverArgs returns the policy-server flags of the runner followed by the
// user's (without a leading "--"), which therefore win.
func serverArgs(policies string, tls tlsFiles, user []string) []string {
	if len(user) > 0 && user[0] == "--" {
		user = user[1:]
	}
	return append([]string{
		"--addr", defaultAddr,
		"--port", strconv.Itoa(defaultPort),
		"--policies", policies,
		"--cert-file", tls.Cert,
		"--key-file", tls.Key,
	}, user...)
}

// serverOptions are the policy server's options as the runner reads them
// from its flags, to print where the server listens.
type serverOptions struct {
	policyserver.Options
	showVersion bool
}

// parseServerArgs reads args as policyserver.Main will, with getenv for the
// flags not given. It returns ok false with the exit code when run must stop
// here: after printing the usage (--help, 0) or an error (2).
func parseServerArgs(args []string, stdout, stderr io.Writer, getenv func(string) string) (opts serverOptions, code int, ok bool) {
	opts.Options = policyserver.DefaultOptions()
	fs := pflag.NewFlagSet("go run ./examples", pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below, usage on request
	opts.AddFlags(fs)
	fs.BoolVar(&opts.showVersion, "version", false, "Print the version and exit")
	if err := fs.Parse(policyserver.NormalizeSeconds(args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printUsage(stdout, fs)
			return opts, 0, false
		}
		fmt.Fprintf(stderr, "Error: %v\nRun go run ./examples --help for the flags.\n", err)
		return opts, 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "Error: unexpected argument %q: arguments are policy-server flags\n", fs.Arg(0))
		return opts, 2, false
	}
	if err := policyserver.ApplyEnv(fs, getenv); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return opts, 2, false
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return opts, 2, false
	}
	return opts, 0, true
}

// printUsage prints the usage with the flags' defaults as set by the
// runner's arguments.
func printUsage(w io.Writer, fs *pflag.FlagSet) {
	// The runner's arguments are parsed already: show them as the defaults.
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			f.DefValue = f.Value.String()
		}
	})
	fmt.Fprintf(w, `Usage: go run ./examples [--] [policy-server flags]

Builds the example policies of examples/policies/, writes a throwaway TLS
certificate, and serves examples/policies.yml with Warden's policy server
until Ctrl-C. The flags are the policy server's, with the runner's defaults:

%s`, fs.FlagUsages())
}
