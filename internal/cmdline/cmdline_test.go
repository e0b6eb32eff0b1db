package cmdline

import (
	"bytes"
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
