package controller

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// The flags the Helm chart passes parse, and bad values are refused.
func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"the chart's flags", []string{"--leader-elect", "--deployments-namespace=warden", "--webhook-service-name=svc",
			"--metrics-bind-address=:8088", "--health-probe-bind-address=:8081", "--webhook-server-port=9443",
			"--always-accept-admission-reviews-on-deployments-namespace", "--audit-scanner-client-cert-secret-name=kubewarden-audit-scanner-client-cert",
			"--enable-metrics"}, ""},
		{"the chart's flags without the audit scanner", []string{"--deployments-namespace=warden", "--audit-scanner-client-cert-secret-name="}, ""},
		{"no namespace", nil, "--deployments-namespace is required"},
		{"plain http dev URL", []string{"--deployments-namespace=w", "--dev-policy-server-url=http://127.0.0.1:1"}, "want an https URL"},
		{"plain http webhook URL", []string{"--deployments-namespace=w", "--dev-webhook-url=http://127.0.0.1:1"}, "--dev-webhook-url"},
		{"bad webhook port", []string{"--deployments-namespace=w", "--webhook-server-port=70000"}, "--webhook-server-port 70000 is not a port"},
		{"no webhook service", []string{"--deployments-namespace=w", "--webhook-service-name="}, "--webhook-service-name is required"},
		{"host network with a sidecar", []string{"--deployments-namespace=w", "--host-network", "--enable-otel-sidecar"}, "mutually exclusive"},
		{"Kubewarden's pod flags", []string{"--deployments-namespace=w", "--enable-tracing", "--host-network", "--client-ca-configmap-name=ca",
			"--image-pull-secrets=a,b", "--opentelemetry-certificate-secret=c", "--opentelemetry-client-certificate-secret=d"}, ""},
		{"audit client certificate elsewhere", []string{"--deployments-namespace=w", "--audit-scanner-client-cert-secret-name=c",
			"--audit-scanner-client-cert-secret-namespace=scanner"}, ""},
		{"audit client certificate namespace without a name", []string{"--deployments-namespace=w", "--audit-scanner-client-cert-secret-name=",
			"--audit-scanner-client-cert-secret-namespace=scanner"}, "needs --audit-scanner-client-cert-secret-name"},
		{"bad metrics port", []string{"--deployments-namespace=w", "--policy-server-metrics-port=0"}, "is not a port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := DefaultOptions()
			fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
			opts.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatalf("parse: %v", err)
			}
			err := opts.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// The command reports a command line it cannot parse instead of exiting 2
// in silence.
func TestMainCommandLine(t *testing.T) {
	for _, args := range [][]string{{"--polices", "x"}, {"--webhook-server-port", "abc"}} {
		var stdout, stderr strings.Builder
		if code := Main(t.Context(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if !strings.HasPrefix(stderr.String(), "Error: ") || !strings.Contains(stderr.String(), "--deployments-namespace string") {
			t.Errorf("%q: stderr = %q, want the error and the usage", args, stderr.String())
		}
	}
}
