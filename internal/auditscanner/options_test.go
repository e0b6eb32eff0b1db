package auditscanner

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestFlags checks every flag of Kubewarden's audit-scanner
// (docs/compatibility.md#audit-scanner): its name, shorthand and default.
func TestFlags(t *testing.T) {
	opts := DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	opts.AddFlags(fs)
	tests := []struct{ name, shorthand, def string }{
		{"namespace", "n", ""},
		{"cluster", "c", "false"},
		{"kubewarden-namespace", "k", "kubewarden"},
		{"policy-server-url", "u", ""},
		{"loglevel", "l", "info"},
		{"output-scan", "o", "false"},
		{"ignore-namespaces", "i", "[]"},
		{"insecure-ssl", "", "false"},
		{"extra-ca", "f", ""},
		{"client-cert", "", ""},
		{"client-key", "", ""},
		{"disable-store", "", "false"},
		{"disable-result-reuse", "", "false"},
		{"keep-unchanged-reports", "", "true"},
		{"parallel-namespaces", "", "1"},
		{"parallel-resources", "", "100"},
		{"parallel-policies", "", "5"},
		{"page-size", "", "100"},
		{"report-kind", "", "policyreport"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fs.Lookup(tt.name)
			if f == nil {
				t.Fatalf("no flag --%s", tt.name)
			}
			if f.Shorthand != tt.shorthand || f.DefValue != tt.def {
				t.Errorf("-%s --%s default %q, want -%s default %q", f.Shorthand, f.Name, f.DefValue, tt.shorthand, tt.def)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, o Options)
		wantErr string
	}{
		{name: "defaults", check: func(t *testing.T, o Options) {
			if open, _ := o.useOpenReports(); open {
				t.Error("the binary's default report kind is policyreport")
			}
		}},
		{name: "openreports", args: []string{"--report-kind", "openreports"}, check: func(t *testing.T, o Options) {
			if open, _ := o.useOpenReports(); !open {
				t.Error("openreports is not OpenReports")
			}
		}},
		{name: "openreport, as Kubewarden's help spells it", args: []string{"--report-kind=openreport"}, check: func(t *testing.T, o Options) {
			if open, _ := o.useOpenReports(); !open {
				t.Error("openreport is not OpenReports")
			}
		}},
		{name: "shorthands", args: []string{"-n", "team-a", "-k", "kw", "-u", "https://localhost:3000", "-l", "warning", "-o", "-i", "a,b", "-i", "c", "-f", "/ca.pem"},
			check: func(t *testing.T, o Options) {
				if o.Namespace != "team-a" || o.KubewardenNamespace != "kw" || o.PolicyServerURL != "https://localhost:3000" ||
					o.LogLevel != "warning" || !o.OutputScan || strings.Join(o.IgnoreNamespaces, ",") != "a,b,c" || o.ExtraCA != "/ca.pem" {
					t.Errorf("%+v", o)
				}
			}},
		{name: "unknown report kind", args: []string{"--report-kind", "polr"}, wantErr: `invalid --report-kind "polr": valid values are openreports, openreport and policyreport`},
		{name: "unknown log level", args: []string{"-l", "verbose"}, wantErr: `invalid --loglevel "verbose"`},
		{name: "client cert without key", args: []string{"--client-cert", "/tls.crt"}, wantErr: "--client-cert and --client-key must be given together"},
		{name: "client key without cert", args: []string{"--client-key", "/tls.key"}, wantErr: "--client-cert and --client-key must be given together"},
		{name: "namespace and cluster", args: []string{"-n", "a", "-c"}, wantErr: "--namespace and --cluster cannot be given together"},
		{name: "no parallelism", args: []string{"--parallel-resources", "0"}, wantErr: "--parallel-resources must be at least 1, not 0"},
		{name: "no page", args: []string{"--page-size", "0"}, wantErr: "--page-size must be at least 1, not 0"},
		{name: "policy server URL without scheme", args: []string{"-u", "localhost:3000"}, wantErr: `invalid --policy-server-url "localhost:3000"`},
		{name: "pushgateway URL without host", args: []string{"--metrics-pushgateway-url", "http://"}, wantErr: `invalid --metrics-pushgateway-url "http://"`},
		{name: "metrics flags", args: []string{"--metrics-file", "/tmp/audit.prom", "--metrics-pushgateway-url", "http://pushgateway:9091"},
			check: func(t *testing.T, o Options) {
				if o.MetricsFile != "/tmp/audit.prom" || o.MetricsPushgatewayURL != "http://pushgateway:9091" {
					t.Errorf("%+v", o)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := DefaultOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			opts.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := opts.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, opts)
		})
	}
}

func TestMainCommandLine(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		wantStdout string
		wantStderr string
	}{
		{name: "help", args: []string{"--help"}, code: 0, wantStdout: "--report-kind"},
		{name: "unknown flag", args: []string{"--frobnicate"}, code: 2, wantStderr: "unknown flag: --frobnicate"},
		{name: "invalid options", args: []string{"--report-kind", "x"}, code: 2, wantStderr: `invalid --report-kind "x"`},
		{name: "version", args: []string{"--version"}, code: 0, wantStdout: "audit-scanner (Warden)"},
		{name: "no cluster", args: []string{}, code: 1, wantStderr: "audit not started"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			env := map[string]string{"KUBECONFIG": t.TempDir() + "/missing"}
			code := Main(t.Context(), tt.args, &stdout, &stderr, func(k string) string { return env[k] })
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, &stdout, &stderr)
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stdout %q, want %q\nstderr %q, want %q", &stdout, tt.wantStdout, &stderr, tt.wantStderr)
			}
		})
	}
}
