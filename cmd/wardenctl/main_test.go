package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinary builds wardenctl and checks that the shim hands Main the
// arguments and the streams, and exits with its code.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "wardenctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: []string{"version"}, stdout: "wardenctl (Warden)"},
		{args: []string{"run", "-r", "-", "builtin://cel"}, code: 1, stderr: "Error: policy \"cel\": Policy settings are invalid"},
		{args: []string{"frobnicate"}, code: 2, stderr: `Error: unknown command "frobnicate"`},
	}
	for _, tc := range tests {
		cmd := exec.Command(bin, tc.args...)
		cmd.Stdin = strings.NewReader(`{"uid":"u","kind":{"kind":"Pod"},"operation":"CREATE","object":{}}`)
		cmd.Env = []string{"HOME=" + t.TempDir()}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("wardenctl %v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
		}
	}
}
