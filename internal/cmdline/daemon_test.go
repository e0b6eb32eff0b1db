package cmdline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

type starter func(context.Context) error

func (s starter) Start(ctx context.Context) error { return s(ctx) }

func TestRunManager(t *testing.T) {
	kubeconfig := filepath.Join("testdata", "flag.kubeconfig")
	ok := func(*rest.Config, *slog.Logger) (Starter, error) {
		return starter(func(context.Context) error { return nil }), nil
	}
	for _, tc := range []struct {
		name       string
		kubeconfig string
		newManager func(*rest.Config, *slog.Logger) (Starter, error)
		code       int
		stderr     string
	}{
		{"runs", kubeconfig, func(cfg *rest.Config, _ *slog.Logger) (Starter, error) {
			if cfg.Host != "https://flag.example:6443" || cfg.BearerToken != "flag-token" {
				return nil, errors.New("not the kubeconfig's configuration")
			}
			return ok(cfg, nil)
		}, 0, ""},
		{"no kubeconfig", filepath.Join("testdata", "nosuch"), ok, 1, "Error: loading the Kubernetes client configuration of testdata/nosuch: "},
		{"no manager", kubeconfig, func(*rest.Config, *slog.Logger) (Starter, error) { return nil, errors.New("no scheme") }, 1, "Error: no scheme\n"},
		{"the manager fails", kubeconfig, func(*rest.Config, *slog.Logger) (Starter, error) {
			return starter(func(context.Context) error { return errors.New("lost the lease") }), nil
		}, 1, "Error: lost the lease\n"},
	} {
		var stderr bytes.Buffer
		if code := RunManager(context.Background(), &stderr, tc.kubeconfig, tc.newManager); code != tc.code || !strings.HasPrefix(stderr.String(), tc.stderr) ||
			tc.stderr == "" && stderr.Len() > 0 {
			t.Errorf("%s: code %d, stderr %q; want %d, %q...", tc.name, code, stderr.String(), tc.code, tc.stderr)
		}
	}
}

// TestRun: the context main gets is cancelled by SIGTERM, which does not
// end the process, and Run returns main's exit code.
func TestRun(t *testing.T) {
	code := Run(func(ctx context.Context) int {
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			return 3
		case <-time.After(time.Minute):
			t.Error("SIGTERM did not cancel the context")
			return 0
		}
	})
	if code != 3 {
		t.Errorf("code %d, want 3", code)
	}
}

// klog's lines come out as the daemon's JSON lines, not as klog's text on
// stderr. (controller-runtime's global logger can be set once per process,
// which TestRunManager does.)
func TestRouteLibraryLogs(t *testing.T) {
	var out bytes.Buffer
	RouteLibraryLogs(slog.New(slog.NewJSONHandler(&out, nil)))
	klog.InfoS("attempting to acquire leader lease", "lock", "warden-system/policy-server-default")
	klog.Flush()
	var msgs []string
	for line := range strings.Lines(out.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a line that is not JSON: %q", line)
		}
		msgs = append(msgs, fmt.Sprint(rec["msg"]))
	}
	want := []string{"attempting to acquire leader lease"}
	if !slices.Equal(msgs, want) {
		t.Errorf("messages %q, want %q\n%s", msgs, want, out.String())
	}
}
