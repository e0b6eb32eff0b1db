package wasi

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	validate := func(in []byte) ([]byte, error) { return append([]byte("validated "), in...), nil }
	settings := func(in []byte) ([]byte, error) { return nil, errors.New("bad settings") }
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "validate", args: []string{"policy.wasm", "validate"}, stdin: "{}", wantStdout: "validated {}"},
		{name: "settings error", args: []string{"policy.wasm", "validate-settings"}, wantCode: 1, wantStderr: "bad settings"},
		{name: "unknown operation", args: []string{"policy.wasm", "mutate"}, wantCode: 1, wantStderr: `unknown operation "mutate"`},
		{name: "no operation", args: []string{"policy.wasm"}, wantCode: 1, wantStderr: "missing operation argument: validate or validate-settings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, strings.NewReader(tt.stdin), &stdout, &stderr, validate, settings)
			if code != tt.wantCode || stdout.String() != tt.wantStdout || stderr.String() != tt.wantStderr {
				t.Fatalf("run = %d, stdout %q, stderr %q; want %d, %q, %q",
					code, stdout.String(), stderr.String(), tt.wantCode, tt.wantStdout, tt.wantStderr)
			}
		})
	}
}
