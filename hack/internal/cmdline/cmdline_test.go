package cmdline

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

type options struct{ n int }

func (o *options) AddFlags(fs *flag.FlagSet) { fs.IntVar(&o.n, "n", 1, "how many") }

func (o *options) Validate() error {
	if o.n < 1 {
		return errors.New("-n must be at least 1")
	}
	return nil
}

func TestParse(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		ok     bool
		n      int
		stderr string
	}{
		{args: []string{"tool", "-n", "3"}, ok: true, n: 3},
		{args: []string{"tool"}, ok: true, n: 1},
		{args: []string{"tool", "-help"}, code: 0, stderr: "usage: tool\n\nDoes things. Flags:\n  -n int"},
		{args: []string{"tool", "-x"}, code: 2, stderr: "flag provided but not defined: -x"},
		{args: []string{"tool", "extra"}, code: 2, stderr: `tool: unexpected arguments ["extra"]`},
		{args: []string{"tool", "-n", "0"}, code: 2, stderr: "tool: -n must be at least 1"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var opts options
			var stderr bytes.Buffer
			code, ok := Parse("tool", "usage: tool\n\nDoes things.", tc.args, &opts, &stderr)
			if code != tc.code || ok != tc.ok {
				t.Fatalf("Parse = %d, %v; want %d, %v (stderr %q)", code, ok, tc.code, tc.ok, stderr.String())
			}
			if ok && opts.n != tc.n {
				t.Errorf("-n = %d, want %d", opts.n, tc.n)
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tc.stderr)
			}
		})
	}
}
