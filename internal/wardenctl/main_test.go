package wardenctl

import (
	"strings"
	"testing"
)

func TestVersionAndCompletion(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		code    int
		stdout  string // substring
		wantErr string
	}{
		{name: "version", args: []string{"version"}, stdout: "wardenctl (Warden) dev, compatible with Kubewarden " + compatVersion},
		{name: "--version", args: []string{"--version"}, stdout: "compatible with Kubewarden"},
		{name: "--help wins over --version", args: []string{"--version", "--help"}, stdout: "Usage:\n  wardenctl [command]"},
		{name: "bash", args: []string{"completions", "--shell", "bash"}, stdout: "__start_wardenctl"},
		{name: "zsh, kwctl's short flag", args: []string{"completions", "-s", "zsh"}, stdout: "#compdef wardenctl"},
		{name: "fish, cobra's spelling", args: []string{"completion", "fish"}, stdout: "complete -c wardenctl"},
		{name: "powershell", args: []string{"completion", "powershell"}, stdout: "Register-ArgumentCompleter"},
		{name: "elvish", args: []string{"completions", "-s", "elvish"}, code: 2, wantErr: "elvish completions are not available"},
		{name: "no shell", args: []string{"completions"}, code: 2, wantErr: "a shell is required"},
		{name: "two shells", args: []string{"completions", "-s", "zsh", "bash"}, code: 2, wantErr: "the shell is given twice"},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, wantErr: `unknown command "frobnicate"`},
		{name: "unknown flag", args: []string{"version", "--frobnicate"}, code: 2, wantErr: "unknown flag: --frobnicate"},
		{name: "extra argument", args: []string{"version", "x"}, code: 2, wantErr: `unknown command "x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnv(t).run(tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
				return
			}
			if !strings.Contains(r.stdout, tc.stdout) {
				t.Errorf("stdout does not contain %q\n%s", tc.stdout, r)
			}
		})
	}
}

func TestOneLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"a\nb\n\n  c  \n", "a; b; c"},
		{"  trailing\n", "trailing"},
	}
	for _, tc := range tests {
		if got := oneLine(tc.in); got != tc.want {
			t.Errorf("oneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
