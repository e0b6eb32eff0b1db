package policysync

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/cmdline"
)

func TestMainCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		out, error string
	}{
		{args: []string{"--help"}, code: 0, out: "--resync-period"},
		{args: []string{"--version"}, code: 0, out: "policy-syncer (Warden) "},
		{args: []string{"--nosuch"}, code: cmdline.ExitUsage, error: "unknown flag: --nosuch"},
		{args: []string{"--namespace", ""}, code: cmdline.ExitUsage, error: "--namespace must not be empty"},
		{args: []string{"--resync-period", "0s"}, code: cmdline.ExitUsage, error: "--resync-period 0s: want a positive duration"},
		{args: []string{"--spoke-timeout", "-1s"}, code: cmdline.ExitUsage, error: "--spoke-timeout -1s: want a positive duration"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.error) {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want code %d, stdout with %q, stderr with %q",
				tc.args, code, stdout.String(), stderr.String(), tc.code, tc.out, tc.error)
		}
	}
}
