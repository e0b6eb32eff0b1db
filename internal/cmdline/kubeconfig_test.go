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
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

type starter func(context.Context) error

func (s starter) Start(ctx context.Context) error { return s(ctx) }

func TestRunManager(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
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
			if cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "t" {
				return nil, errors.New("not the kubeconfig's configuration")
			}
			return ok(cfg, nil)
		}, 0, ""},
		{"no kubeconfig", filepath.Join(t.TempDir(), "nosuch"), ok, 1, "Error: loading the Kubernetes client configuration: "},
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
