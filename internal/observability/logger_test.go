package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
)

func TestParseLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{in: "trace", want: LevelTrace},
		{in: "debug", want: slog.LevelDebug},
		{in: "info", want: slog.LevelInfo},
		{in: "warn", want: slog.LevelWarn},
		{in: "error", want: slog.LevelError},
		{in: "INFO", want: slog.LevelInfo},
		{in: "", wantErr: true},
		{in: "warning", wantErr: true},
		{in: "verbose", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseLevel(tt.in)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "trace, debug, info, warn, error") {
					t.Errorf("ParseLevel(%q) err = %v, want an error naming the valid levels", tt.in, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ParseLevel(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
	if LevelTrace >= slog.LevelDebug {
		t.Errorf("LevelTrace = %v, want below debug", LevelTrace)
	}
}

func TestNewLogger(t *testing.T) {
	tests := []struct {
		name, level, format string
		wantErr             string
		// logged at trace, debug and info; want is the list of level names printed.
		want []string
		json bool
	}{
		{name: "text info", level: "info", format: "text", want: []string{"INFO"}},
		{name: "text trace", level: "trace", format: "text", want: []string{"TRACE", "DEBUG", "INFO"}},
		{name: "json debug", level: "debug", format: "json", want: []string{"DEBUG", "INFO"}, json: true},
		{name: "json trace", level: "trace", format: "json", want: []string{"TRACE", "DEBUG", "INFO"}, json: true},
		{name: "otlp is text", level: "info", format: "otlp", want: []string{"INFO"}},
		{name: "error hides info", level: "error", format: "text", want: nil},
		{name: "bad level", level: "loud", format: "text", wantErr: "valid values are trace, debug, info, warn, error"},
		{name: "bad format", level: "info", format: "yaml", wantErr: "valid values are text, json, otlp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger, err := NewLogger(&buf, tt.level, tt.format, true)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewLogger: %v", err)
			}
			Trace(context.Background(), logger, "m", KeyPolicyID, "p")
			logger.Debug("m", KeyPolicyID, "p")
			logger.Info("m", KeyPolicyID, "p")

			var got []string
			for line := range strings.Lines(buf.String()) {
				if tt.json {
					var rec map[string]any
					if err := json.Unmarshal([]byte(line), &rec); err != nil {
						t.Fatalf("line %q is not JSON: %v", line, err)
					}
					if rec[KeyPolicyID] != "p" {
						t.Errorf("line %q: %s missing", line, KeyPolicyID)
					}
					got = append(got, rec[slog.LevelKey].(string))
					continue
				}
				level, ok := strings.CutPrefix(strings.Fields(line)[1], "level=")
				if !ok || !strings.Contains(line, "policy_id=p") {
					t.Fatalf("line %q: want level= and policy_id=p", line)
				}
				got = append(got, level)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("levels printed = %v, want %v", got, tt.want)
			}
		})
	}
}

func ExampleNewLogger() {
	// Values of --log-level and --log-fmt, as Kubewarden spells them.
	logger, err := NewLogger(os.Stderr, "info", "json", false)
	if err != nil {
		fmt.Println(err)
		return
	}
	logger.Info("policy loaded", KeyPolicyID, "psp-capabilities", KeyMode, ModeProtect)
}
