package policyserver

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func parse(t *testing.T, args []string, env map[string]string) (Options, error) {
	t.Helper()
	opts := DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(NormalizeSeconds(args)); err != nil {
		return opts, err
	}
	if err := ApplyEnv(fs, func(k string) string { return env[k] }); err != nil {
		return opts, err
	}
	return opts, opts.Validate()
}

// optionCase is a command line and environment, and what parsing them
// gives: options that check accepts, or an error containing wantErr.
type optionCase struct {
	name    string
	args    []string
	env     map[string]string
	check   func(t *testing.T, o Options)
	wantErr string
}

// runOptionCases parses each case as the command does, a subtest each.
func runOptionCases(t *testing.T, tests []optionCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parse(t, tt.args, tt.env)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o)
		})
	}
}

func TestOptions(t *testing.T) {
	tests := []optionCase{
		{name: "defaults", check: func(t *testing.T, o Options) {
			if o.Port != 3000 || o.ReadinessProbePort != 8081 || o.PolicyTimeout != 2*time.Second || o.PoliciesPath != "policies.yml" || o.Addr != "0.0.0.0" {
				t.Errorf("%+v", o)
			}
		}},
		{name: "Kubewarden environment variables", env: map[string]string{
			"KUBEWARDEN_PORT": "8443", "KUBEWARDEN_POLICY_TIMEOUT": "5", "KUBEWARDEN_POLICIES": "/config/policies.yml",
			"KUBEWARDEN_ALWAYS_ACCEPT_ADMISSION_REVIEWS_ON_NAMESPACE": "kubewarden", "KUBEWARDEN_CONTINUE_ON_ERRORS": "true", "NO_COLOR": "1",
			"KUBEWARDEN_CERT_FILE": "/pki/tls.crt", "KUBEWARDEN_KEY_FILE": "/pki/tls.key", "KUBEWARDEN_CLIENT_CA_FILE": "/ca/ca.crt,/client-ca/client-ca.crt",
		}, check: func(t *testing.T, o Options) {
			if o.Port != 8443 || o.PolicyTimeout != 5*time.Second || o.PoliciesPath != "/config/policies.yml" || o.AlwaysAcceptNS != "kubewarden" ||
				!o.ContinueOnErrors || !o.LogNoColor || len(o.ClientCAFiles) != 2 || o.ClientCAFiles[1] != "/client-ca/client-ca.crt" {
				t.Errorf("%+v", o)
			}
		}},
		{name: "a flag wins over its variable", args: []string{"--port", "9000"}, env: map[string]string{"KUBEWARDEN_PORT": "8443"},
			check: func(t *testing.T, o Options) {
				if o.Port != 9000 {
					t.Errorf("port %d", o.Port)
				}
			}},
		{name: "timeout in seconds or as a duration", args: []string{"--policy-timeout", "7"}, check: func(t *testing.T, o Options) {
			if o.PolicyTimeout != 7*time.Second {
				t.Errorf("%v", o.PolicyTimeout)
			}
		}},
		{name: "timeout with =", args: []string{"--policy-timeout=250ms"}, check: func(t *testing.T, o Options) {
			if o.PolicyTimeout != 250*time.Millisecond {
				t.Errorf("%v", o.PolicyTimeout)
			}
		}},
		{name: "bad variable", env: map[string]string{"KUBEWARDEN_PORT": "https"}, wantErr: `KUBEWARDEN_PORT="https"`},
		{name: "cert without key", args: []string{"--cert-file", "c"}, wantErr: "--cert-file and --key-file go together"},
		{name: "client CA without TLS", args: []string{"--client-ca-file", "ca"}, wantErr: "--client-ca-file requires --cert-file and --key-file"},
		{name: "verification and sigstore variables", env: map[string]string{
			"KUBEWARDEN_VERIFICATION_CONFIG_PATH": "/config/verification.yml", "KUBEWARDEN_SIGSTORE_TRUST_CONFIG_PATH": "/config/trust.json",
		}, check: func(t *testing.T, o Options) {
			if o.VerificationPath != "/config/verification.yml" || o.SigstoreTrust != "/config/trust.json" || o.SigstoreCacheDir != "sigstore-data" {
				t.Errorf("%+v", o)
			}
		}},
		{name: "memory limit", args: []string{"--memory-limit", "0"}, wantErr: "--memory-limit must be between 1 and 4096 MiB"},
		{name: "shared cache without signing", env: map[string]string{"WARDEN_SHARED_CACHE_DIR": "/cache"},
			wantErr: "--shared-cache-dir requires --cache-signing-cert, --cache-signing-key and --cache-ca-file"},
		{name: "shared cache without a private one", args: []string{"--shared-cache-dir", "/cache", "--cache-dir", "",
			"--cache-signing-cert", "c", "--cache-signing-key", "k", "--cache-ca-file", "ca"}, wantErr: "--shared-cache-dir requires --cache-dir"},
	}
	runOptionCases(t, tests)
}

// The command reports a command line it cannot parse, as wardenctl does,
// instead of exiting 2 in silence; --help goes to stdout and lists every
// flag.
func TestMainCommandLine(t *testing.T) {
	tests := []struct {
		args                []string
		wantCode            int
		wantStdout, wantErr string
	}{
		{[]string{"--polices", "x"}, 2, "", "Error: unknown flag: --polices"},
		{[]string{"--port", "abc"}, 2, "", `Error: invalid argument "abc" for "--port" flag`},
		{[]string{"--daemon"}, 2, "", "Error: unknown flag: --daemon"},
		{[]string{"--help"}, 0, "--continue-on-errors", ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := Main(t.Context(), tt.args, &stdout, &stderr, func(string) string { return "" })
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d", code, tt.wantCode)
			}
			if tt.wantErr != "" && (!strings.Contains(stderr.String(), tt.wantErr) || !strings.Contains(stderr.String(), "--policies string")) {
				t.Errorf("stderr = %q, want %q and the usage", stderr.String(), tt.wantErr)
			}
			if tt.wantStdout != "" && !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout = %q, want it to list %s", stdout.String(), tt.wantStdout)
			}
		})
	}
}

func TestReplicaOrdinal(t *testing.T) {
	for pod, want := range map[string]int32{"policy-server-default-0": 0, "policy-server-a-b-12": 12} {
		if got, err := replicaOrdinal(pod); err != nil || got != want {
			t.Errorf("replicaOrdinal(%q) = %d, %v; want %d", pod, got, err, want)
		}
	}
	for _, pod := range []string{"", "policy-server", "policy-server-x", "policy-server-+1", "7"} {
		if _, err := replicaOrdinal(pod); err == nil || !strings.Contains(err.Error(), "replica ordinal") {
			t.Errorf("replicaOrdinal(%q): %v, want an error naming the ordinal", pod, err)
		}
	}
}
