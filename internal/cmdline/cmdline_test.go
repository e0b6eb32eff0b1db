package cmdline

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name                string
		args                []string
		wantCode            int
		wantDone            bool
		wantStdout, wantErr string // substrings; empty: nothing written
	}{
		{name: "valid", args: []string{"--port", "3000"}},
		{name: "help", args: []string{"--help"}, wantDone: true, wantStdout: "--port int"},
		{name: "unknown flag", args: []string{"--polices", "x"}, wantCode: ExitUsage, wantDone: true,
			wantErr: "Error: unknown flag: --polices\nUsage of test:\n"},
		{name: "bad value", args: []string{"--port", "abc"}, wantCode: ExitUsage, wantDone: true,
			wantErr: `Error: invalid argument "abc" for "--port" flag`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			fs.Int("port", 0, "the port")
			var stdout, stderr bytes.Buffer
			code, done := Parse(fs, tt.args, &stdout, &stderr)
			if code != tt.wantCode || done != tt.wantDone {
				t.Errorf("Parse = %d, %v; want %d, %v", code, done, tt.wantCode, tt.wantDone)
			}
			for _, c := range []struct {
				name      string
				got, want string
			}{{"stdout", stdout.String(), tt.wantStdout}, {"stderr", stderr.String(), tt.wantErr}} {
				if c.want == "" && c.got != "" || !strings.Contains(c.got, c.want) {
					t.Errorf("%s = %q, want it to contain %q", c.name, c.got, c.want)
				}
			}
			if tt.wantErr != "" && !strings.Contains(stderr.String(), "--port int") {
				t.Errorf("stderr lacks the usage: %q", stderr.String())
			}
		})
	}
}

// testOptions are a daemon's options: a --port that must be positive.
type testOptions struct{ port int }

func (o *testOptions) AddFlags(fs *pflag.FlagSet) { fs.IntVar(&o.port, "port", 1, "the port") }

func (o *testOptions) Validate() error {
	if o.port <= 0 {
		return errors.New("--port must be positive")
	}
	return nil
}

func TestDaemonParse(t *testing.T) {
	// portEnv sets --port from PORT (the env map) when the command line
	// did not.
	portEnv := func(env map[string]string) func(fs *pflag.FlagSet) error {
		return func(fs *pflag.FlagSet) error {
			v, ok := env["PORT"]
			if !ok || fs.Changed("port") {
				return nil
			}
			if _, err := strconv.Atoi(v); err != nil {
				return fmt.Errorf("PORT=%q is not a number", v)
			}
			return fs.Set("port", v)
		}
	}
	daemon := Daemon{Name: "testd", Version: "testd (Warden) v1.2.3"}
	for _, tc := range []struct {
		name                string
		daemon              Daemon
		args                []string
		env                 map[string]string // for Env, when set
		wantCode            int
		wantDone            bool
		wantPort            int    // when not done
		wantStdout, wantErr string // exactly
	}{
		{name: "valid", daemon: daemon, args: []string{"--port", "3000"}, wantPort: 3000},
		{name: "defaults", daemon: daemon, wantPort: 1},
		{name: "help", daemon: daemon, args: []string{"--help"}, wantDone: true,
			wantStdout: "Usage of testd:\n      --port int   the port (default 1)\n      --version    Print the version and exit\n"},
		{name: "version", daemon: daemon, args: []string{"--version", "--port", "0"}, wantDone: true, wantStdout: "testd (Warden) v1.2.3\n"},
		{name: "no version flag without a version", daemon: Daemon{Name: "testd"}, args: []string{"--version"}, wantCode: ExitUsage, wantDone: true,
			wantErr: "Error: unknown flag: --version\nUsage of testd:\n      --port int   the port (default 1)\n"},
		{name: "unknown flag", daemon: daemon, args: []string{"--prot", "3"}, wantCode: ExitUsage, wantDone: true,
			wantErr: "Error: unknown flag: --prot\nUsage of testd:\n      --port int   the port (default 1)\n      --version    Print the version and exit\n"},
		{name: "invalid options", daemon: daemon, args: []string{"--port", "0"}, wantCode: ExitUsage, wantDone: true,
			wantErr: "Error: --port must be positive\n"},
		{name: "the environment sets what the flags leave", daemon: Daemon{Name: "testd", Env: portEnv(map[string]string{"PORT": "8080"})},
			wantPort: 8080},
		{name: "the flags win over the environment", daemon: Daemon{Name: "testd", Env: portEnv(map[string]string{"PORT": "8080"})},
			args: []string{"--port", "3000"}, wantPort: 3000},
		{name: "the environment is validated", daemon: Daemon{Name: "testd", Env: portEnv(map[string]string{"PORT": "0"})},
			wantCode: ExitUsage, wantDone: true, wantErr: "Error: --port must be positive\n"},
		{name: "an error of the environment", daemon: Daemon{Name: "testd", Env: portEnv(map[string]string{"PORT": "x"})},
			wantCode: ExitUsage, wantDone: true, wantErr: "Error: PORT=\"x\" is not a number\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts testOptions
			var stdout, stderr bytes.Buffer
			code, done := tc.daemon.Parse(&opts, tc.args, &stdout, &stderr)
			if code != tc.wantCode || done != tc.wantDone {
				t.Errorf("Parse = %d, %v; want %d, %v\nstderr: %s", code, done, tc.wantCode, tc.wantDone, &stderr)
			}
			if !done && opts.port != tc.wantPort {
				t.Errorf("--port %d, want %d", opts.port, tc.wantPort)
			}
			if stdout.String() != tc.wantStdout || stderr.String() != tc.wantErr {
				t.Errorf("stdout %q, stderr %q; want %q, %q", &stdout, &stderr, tc.wantStdout, tc.wantErr)
			}
		})
	}
}
