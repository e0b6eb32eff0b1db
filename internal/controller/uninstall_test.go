package controller

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The flags the chart's pre-delete hook passes parse, and bad values are
// refused.
func TestUninstallOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"the chart's flags", []string{"--deployments-namespace=warden", "--controller-deployment=warden-controller",
			"--audit-scanner-client-cert-secret-name=kubewarden-audit-scanner-client-cert", "--grace-period=60s", "--timeout=4m"}, ""},
		{"no namespace", []string{"--deployments-namespace="}, "--deployments-namespace must not be empty"},
		{"no grace", []string{"--grace-period=0s"}, "--grace-period must be positive"},
		{"a timeout within the grace period", []string{"--grace-period=1m", "--timeout=1m"}, "--timeout must be longer than --grace-period"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := DefaultUninstallOptions()
			fs := pflag.NewFlagSet("uninstall", pflag.ContinueOnError)
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

// `controller uninstall` is a command of its own: its flags, not the
// controller's, and exit code 2 for a bad command line.
func TestUninstallCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"uninstall", "--leader-elect"}, "unknown flag: --leader-elect"},
		{[]string{"uninstall", "--grace-period=5m"}, "--timeout must be longer than --grace-period"},
	} {
		var stdout, stderr strings.Builder
		if code := Main(t.Context(), tc.args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", tc.args, code)
		}
		if !strings.Contains(stderr.String(), tc.wantStderr) {
			t.Errorf("%q: stderr = %q, want %q", tc.args, stderr.String(), tc.wantStderr)
		}
	}
	var stdout, stderr strings.Builder
	if code := Main(t.Context(), []string{"uninstall", "--help"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "--controller-deployment") {
		t.Errorf("uninstall --help: exit %d, stdout %q", code, stdout.String())
	}
}

// Only what a PolicyServer owns is deleted with the policy servers'
// objects: not a Secret or Service of the release's.
func TestOwnedByPolicyServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		refs []metav1.OwnerReference
		want bool
	}{
		{"a policy server's StatefulSet", []metav1.OwnerReference{{APIVersion: "policies.kubewarden.io/v1", Kind: "PolicyServer", Name: "default"}}, true},
		{"owned by a Deployment", []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "warden-controller"}}, false},
		{"a PolicyServer kind of another group", []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "PolicyServer", Name: "default"}}, false},
		{"no owner", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x", OwnerReferences: tc.refs}}
			if got := ownedByPolicyServer(o); got != tc.want {
				t.Errorf("ownedByPolicyServer = %v, want %v", got, tc.want)
			}
		})
	}
}
