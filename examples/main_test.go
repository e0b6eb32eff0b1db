package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policyserver"
	"github.com/wardenhq/warden/internal/testkit"
)

// testLayout is the repository's layout with the outputs (modules, TLS
// files, the policies.yml pointing at the modules) in a temporary directory.
func testLayout(t *testing.T) layout {
	t.Helper()
	root, tmp := policybuild.RepoRootForTest(t), t.TempDir()
	return layout{
		PolicySources: filepath.Join(root, defaultLayout.PolicySources),
		Modules:       filepath.Join(tmp, "build"),
		TLS:           filepath.Join(tmp, "build", "tls"),
		Policies:      filepath.Join(root, defaultLayout.Policies),
		Resolved:      filepath.Join(tmp, "policies.yml"),
		Requests:      filepath.Join(root, defaultLayout.Requests),
	}
}

// writePolicies writes l.Resolved as run does, followed by extra.
func writePolicies(t *testing.T, l layout, extra string) {
	t.Helper()
	n, err := resolvePolicies(l)
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Fatalf("resolved %d module URLs of %s, want 6", n, l.Policies)
	}
	f, err := os.OpenFile(l.Resolved, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(strings.ReplaceAll(extra, "{modules}", "file://"+filepath.ToSlash(l.Modules))); err != nil {
		t.Fatal(err)
	}
}

// newServer creates a policy server as run does, from the runner's
// arguments for l followed by extra, on 127.0.0.1 with ports chosen by the
// system and without the compiled-module cache.
func newServer(t *testing.T, l layout, logs io.Writer) (*policyserver.Server, error) {
	t.Helper()
	args := serverArgs(l.Resolved, l.tlsFiles(), []string{"--", "--port", "0", "--readiness-probe-port", "0", "--workers", "2", "--cache-dir="})
	var stderr bytes.Buffer
	opts, code, ok := parseServerArgs(args, io.Discard, &stderr, func(string) string { return "" })
	if !ok {
		t.Fatalf("parseServerArgs(%q) = exit %d: %s", args, code, stderr.String())
	}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	policyserver.SetGOMAXPROCS(opts.Workers) // as policyserver.Main does
	return policyserver.New(t.Context(), opts.Options, logger)
}

// podReview is an AdmissionReview for the CREATE of Pod default/test with
// labels and spec (JSON).
func podReview(labels, spec string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
		"uid":"test-uid","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
		"requestKind":{"group":"","version":"v1","kind":"Pod"},"name":"test","namespace":"default","operation":"CREATE",
		"userInfo":{"username":"test"},"object":{"apiVersion":"v1","kind":"Pod",
		"metadata":{"name":"test","namespace":"default"%s},"spec":%s}}}`, labels, spec)
}

func TestExamples(t *testing.T) {
	l := testLayout(t)
	names, err := buildPolicies(t.Context(), l.PolicySources, l.Modules)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"default-team-label", "deny-latest-tag", "pod-privileged"}; !slices.Equal(names, want) {
		t.Errorf("built %v, want %v", names, want)
	}
	tlsFiles := l.tlsFiles()
	if err := writeTLS(tlsFiles, certHosts(defaultAddr), time.Now()); err != nil {
		t.Fatal(err)
	}
	writePolicies(t, l, `
team-fallback:
  module: {modules}/default-team-label.wasm
  allowedToMutate: true
`)

	logs := &logtest.Buffer{}
	srv, err := newServer(t, l, logs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	readyCtx, cancelReady := context.WithTimeout(t.Context(), 3*time.Minute) // compiles the example policies
	defer cancelReady()
	if !waitReady(readyCtx, "http://"+srv.ReadinessAddr().String()+"/readiness") {
		t.Fatal("the server never became ready")
	}

	caPEM, err := os.ReadFile(tlsFiles.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s holds no certificate", tlsFiles.CA)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	base := "https://" + srv.Addr().String()

	// file reads a request of examples/requests.
	file := func(name string) []byte {
		doc, err := os.ReadFile(filepath.Join(l.Requests, name))
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	const nginx = `{"containers":[{"name":"nginx","image":"nginx:1.27"}]}`
	tests := []struct {
		name        string
		policy      string
		review      []byte
		wantAllowed bool
		wantMessage string
		wantPatch   string // JSON; "" for none
	}{
		{name: "privileged pod", policy: "pod-privileged", review: file("privileged-pod.json"),
			wantMessage: "Privileged container is not allowed"},
		{name: "unprivileged pod", policy: "pod-privileged", review: file("unprivileged-pod.json"), wantAllowed: true},
		{name: "privileged init container", policy: "pod-privileged",
			review:      podReview("", `{"initContainers":[{"name":"setup","image":"busybox:1.36","securityContext":{"privileged":true}}],"containers":[{"name":"nginx","image":"nginx:1.27"}]}`),
			wantMessage: "Privileged container is not allowed"},
		{name: "privileged ephemeral container", policy: "pod-privileged",
			review:      podReview("", `{"containers":[{"name":"nginx","image":"nginx:1.27"}],"ephemeralContainers":[{"name":"debug","image":"busybox:1.36","securityContext":{"privileged":true}}]}`),
			wantMessage: "Privileged container is not allowed"},
		{name: "monitor mode accepts a privileged pod", policy: "pod-privileged-monitor", review: file("privileged-pod.json"), wantAllowed: true},

		{name: "latest tag", policy: "deny-latest-tag", review: file("latest-tag-pod.json"),
			wantMessage: "container log-shipper uses image fluent/fluent-bit:latest: pin a tag other than latest"},
		{name: "pinned tags", policy: "deny-latest-tag", review: file("unprivileged-pod.json"), wantAllowed: true},
		{name: "no tag behind a registry port", policy: "deny-latest-tag",
			review:      podReview("", `{"containers":[{"name":"app","image":"registry.example.com:5000/team/app"}]}`),
			wantMessage: "container app uses image registry.example.com:5000/team/app: pin a tag other than latest"},
		{name: "untagged init container", policy: "deny-latest-tag",
			review:      podReview("", `{"initContainers":[{"name":"setup","image":"busybox"}],"containers":[{"name":"nginx","image":"nginx:1.27"}]}`),
			wantMessage: "container setup uses image busybox: pin a tag other than latest"},
		{name: "digest", policy: "deny-latest-tag",
			review:      podReview("", `{"containers":[{"name":"app","image":"nginx@sha256:0000000000000000000000000000000000000000000000000000000000000000"}]}`),
			wantAllowed: true},

		{name: "pod without team", policy: "default-team-label", review: file("pod-without-team.json"), wantAllowed: true,
			wantPatch: `[{"op":"add","path":"/metadata/labels/team","value":"platform"}]`},
		{name: "pod with a team", policy: "default-team-label", review: file("unprivileged-pod.json"), wantAllowed: true},

		{name: "native CEL: no team label", policy: "pod-team-label", review: file("pod-without-team.json"),
			wantMessage: "pod batch-report has no team label"},
		{name: "native CEL: a team label", policy: "pod-team-label", review: file("unprivileged-pod.json"), wantAllowed: true},
		{name: "group: privileged pod", policy: "pod-hardening", review: file("privileged-pod.json"),
			wantMessage: "the pod does not follow the hardening rules"},
		{name: "group: latest tag but a team", policy: "pod-hardening", review: file("latest-tag-pod.json"), wantAllowed: true},
		{name: "pod without labels", policy: "default-team-label", review: podReview("", nginx), wantAllowed: true,
			wantPatch: `[{"op":"add","path":"/metadata/labels","value":{"team":"platform"}}]`},
		{name: "no default_team setting", policy: "team-fallback", review: podReview(`,"labels":{"app":"nginx"}`, nginx), wantAllowed: true,
			wantPatch: `[{"op":"add","path":"/metadata/labels/team","value":"unassigned"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.Post(base+"/validate/"+tt.policy, "application/json", bytes.NewReader(tt.review))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var review admission.Review
			if err := json.Unmarshal(body, &review); err != nil || review.Response == nil {
				t.Fatalf("not an AdmissionReview with a response (%v): %s", err, body)
			}
			got := review.Response
			message := ""
			if got.Status != nil {
				message = got.Status.Message
			}
			if got.Allowed != tt.wantAllowed || message != tt.wantMessage {
				t.Errorf("allowed %v, message %q; want %v, %q", got.Allowed, message, tt.wantAllowed, tt.wantMessage)
			}
			if tt.wantPatch == "" {
				if got.Patch != nil || got.PatchType != "" {
					t.Errorf("patch %s (type %q), want none", got.Patch, got.PatchType)
				}
				return
			}
			if got.PatchType != admission.PatchTypeJSONPatch || !testkit.JSONEqual(t, got.Patch, []byte(tt.wantPatch)) {
				t.Errorf("patch %s (type %q), want %s (type %s)", got.Patch, got.PatchType, tt.wantPatch, admission.PatchTypeJSONPatch)
			}
		})
	}

	for _, want := range []string{
		`msg="policy evaluation (monitor mode)" policy_id=pod-privileged-monitor`,
		`msg="policy log" policy_id=deny-latest-tag message="deny-latest-tag rejected pod default/shop: container log-shipper uses image fluent/fluent-bit:latest"`,
		`msg="policy log" policy_id=deny-latest-tag message="deny-latest-tag accepted pod default/web: 2 images pinned"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the server's log lacks %s:\n%s", want, logs.String())
		}
	}
}

func TestTeamSettings(t *testing.T) {
	l := testLayout(t)
	if _, err := buildPolicies(t.Context(), l.PolicySources, l.Modules); err != nil {
		t.Fatal(err)
	}
	if err := writeTLS(l.tlsFiles(), certHosts(defaultAddr), time.Now()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		settings string
		wantErr  string // "" when the policy loads
	}{
		{settings: `{default_team: platform}`},
		{settings: `{}`},
		{settings: `{default_team: 42}`, wantErr: "default_team must be a string"},
		{settings: `{default_team: [a]}`, wantErr: "default_team must be a string"},
		{settings: `{default_team: ""}`, wantErr: `default_team "" is not a valid label value`},
		{settings: `{default_team: "-x"}`, wantErr: `default_team "-x" is not a valid label value`},
	}
	for _, tt := range tests {
		t.Run(tt.settings, func(t *testing.T) {
			doc := fmt.Sprintf("team:\n  module: file://%s/default-team-label.wasm\n  allowedToMutate: true\n  settings: %s\n",
				filepath.ToSlash(l.Modules), tt.settings)
			if err := os.WriteFile(l.Resolved, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			srv, err := newServer(t, l, io.Discard)
			if err == nil {
				srv.Close(context.Background())
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("the policy failed to load: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("loading error %v, want one containing %s", err, tt.wantErr)
			}
		})
	}
}

func TestParseServerArgs(t *testing.T) {
	l := defaultLayout
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		wantCode   int
		wantOK     bool
		wantOutput string // in stdout when ok is false
		wantErr    string // in stderr
		check      func(policyserver.Options) string
	}{
		{name: "defaults", wantOK: true, check: func(o policyserver.Options) string {
			if o.Addr != "127.0.0.1" || o.Port != 3000 || o.ReadinessProbePort != 8081 || o.PoliciesPath != l.Resolved ||
				o.CertFile != l.tlsFiles().Cert || o.KeyFile != l.tlsFiles().Key {
				return fmt.Sprintf("%+v", o)
			}
			return ""
		}},
		{name: "flags after --", args: []string{"--", "--port", "3443", "--log-level", "debug"}, wantOK: true, check: func(o policyserver.Options) string {
			if o.Port != 3443 || o.LogLevel != "debug" {
				return fmt.Sprintf("port %d, log level %s", o.Port, o.LogLevel)
			}
			return ""
		}},
		{name: "flags without --", args: []string{"--addr=0.0.0.0", "--policy-timeout", "5"}, wantOK: true, check: func(o policyserver.Options) string {
			if o.Addr != "0.0.0.0" || o.PolicyTimeout != 5*time.Second {
				return fmt.Sprintf("addr %s, policy timeout %v", o.Addr, o.PolicyTimeout)
			}
			return ""
		}},
		{name: "environment for flags not given", env: map[string]string{"KUBEWARDEN_PORT": "1", "KUBEWARDEN_READINESS_PROBE_PORT": "9090"},
			wantOK: true, check: func(o policyserver.Options) string {
				if o.Port != 3000 || o.ReadinessProbePort != 9090 {
					return fmt.Sprintf("port %d, readiness port %d", o.Port, o.ReadinessProbePort)
				}
				return ""
			}},
		{name: "help", args: []string{"--help"}, wantOutput: "Usage: go run ./examples [--] [policy-server flags]"},
		{name: "help shows the runner's defaults", args: []string{"-h"}, wantOutput: `Listen on PORT (default 3000)`},
		{name: "unknown flag", args: []string{"--nope"}, wantCode: 2, wantErr: "Error: unknown flag: --nope"},
		{name: "positional argument", args: []string{"--", "--port", "1", "--", "x"}, wantCode: 2, wantErr: `Error: unexpected argument "x"`},
		{name: "invalid options", args: []string{"--workers", "0"}, wantCode: 2, wantErr: "Error: --workers must be positive"},
		{name: "invalid environment", env: map[string]string{"KUBEWARDEN_READINESS_PROBE_PORT": "x"}, wantCode: 2, wantErr: `KUBEWARDEN_READINESS_PROBE_PORT="x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := serverArgs(l.Resolved, l.tlsFiles(), tt.args)
			opts, code, ok := parseServerArgs(args, &stdout, &stderr, func(k string) string { return tt.env[k] })
			if ok != tt.wantOK || code != tt.wantCode {
				t.Fatalf("parseServerArgs = exit %d, ok %v; want %d, %v (stderr %s)", code, ok, tt.wantCode, tt.wantOK, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantOutput) || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stdout %q, stderr %q; want them to contain %q and %q", stdout.String(), stderr.String(), tt.wantOutput, tt.wantErr)
			}
			if tt.check != nil {
				if diff := tt.check(opts.Options); diff != "" {
					t.Errorf("options: %s", diff)
				}
			}
		})
	}
}

func TestRunStopsBeforeBuilding(t *testing.T) {
	tests := []struct {
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{args: []string{"--help"}, wantOut: "Usage: go run ./examples"},
		{args: []string{"--", "--bogus"}, wantCode: 2, wantErr: "unknown flag: --bogus"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append([]string{"examples"}, tt.args...), &stdout, &stderr)
			if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantOut) || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("run = %d, stdout %q, stderr %q; want %d, %q, %q", code, stdout.String(), stderr.String(), tt.wantCode, tt.wantOut, tt.wantErr)
			}
			if strings.Contains(stdout.String(), "Building") {
				t.Errorf("run built the policies: %s", stdout.String())
			}
		})
	}
}

// TestRunPortTaken checks that a taken port stops the runner before it
// builds, with the flags that pick other ports.
func TestRunPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	free := strconv.Itoa(testkit.FreePort(t))
	tests := []struct {
		args []string
		flag string
	}{
		{args: []string{"--port", port, "--readiness-probe-port", free}, flag: "--port " + port},
		{args: []string{"--port", free, "--readiness-probe-port", port}, flag: "--readiness-probe-port " + port},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append([]string{"examples", "--"}, tt.args...), &stdout, &stderr)
			want := "Error: " + tt.flag + ": listen tcp 127.0.0.1:" + port + ": bind: address already in use: " +
				"pick free ports, e.g. go run ./examples -- --port 3443 --readiness-probe-port 8082\n"
			if code != 1 || stderr.String() != want {
				t.Errorf("run = %d, stderr %q; want 1, %q", code, stderr.String(), want)
			}
			if stdout.Len() > 0 {
				t.Errorf("run printed %q: it must stop before building", stdout.String())
			}
		})
	}
}

func TestFindRepoRoot(t *testing.T) {
	root := policybuild.RepoRootForTest(t)
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dir     string
		want    string
		wantErr string
	}{
		{dir: root, want: root},
		{dir: filepath.Join(root, "examples"), want: root},
		{dir: filepath.Join(root, "examples", "policies", "pod-privileged"), want: root}, // below a nested module
		{dir: other, wantErr: "no go.mod of module github.com/wardenhq/warden at or above " + other},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			got, err := policybuild.RepoRoot(tt.dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("RepoRoot = %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("RepoRoot = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestInstructions(t *testing.T) {
	root := policybuild.RepoRootForTest(t)
	doc, err := os.ReadFile(filepath.Join(root, defaultLayout.Policies))
	if err != nil {
		t.Fatal(err)
	}
	policies, err := engine.ParsePolicies(doc)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("every request exists", func(t *testing.T) {
		for _, r := range tryRequests {
			if _, ok := policies[r.Policy]; !ok {
				t.Errorf("policy %s is not in %s", r.Policy, defaultLayout.Policies)
			}
			if _, err := os.Stat(filepath.Join(root, defaultLayout.Requests, r.File)); err != nil {
				t.Error(err)
			}
		}
	})

	opts := policyserver.DefaultOptions()
	opts.Addr, opts.Port, opts.PoliciesPath = defaultAddr, defaultPort, defaultLayout.Policies
	tests := []struct {
		name string
		wd   string
		addr string
		port int
		want []string
	}{
		{name: "from the root", wd: root, addr: defaultAddr, port: defaultPort, want: []string{
			"From another terminal, in this directory:",
			"curl -sS -w '\\n' --cacert examples/build/tls/ca.pem -H 'Content-Type: application/json' --data @examples/requests/privileged-pod.json https://127.0.0.1:3000/validate/pod-privileged\n",
			"readiness        http://127.0.0.1:8081/readiness",
		}},
		{name: "from examples", wd: filepath.Join(root, "examples"), addr: "0.0.0.0", port: 3443, want: []string{
			"--cacert build/tls/ca.pem",
			"--data @requests/latest-tag-pod.json https://127.0.0.1:3443/validate/deny-latest-tag\n",
		}},
		{name: "from below", wd: filepath.Join(root, "internal"), addr: "::", port: 0, want: []string{
			"From another terminal:",
			"--cacert " + shellQuote(filepath.Join(root, "examples", "build", "tls", "ca.pem")),
			"https://[::1]:<port>/validate/default-team-label\n",
			`(--port 0: the log line "policy server listening" has the port)`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.Addr, o.Port = tt.addr, tt.port
			got := instructions(o, defaultLayout, func(p string) string { return displayPath(tt.wd, root, p) })
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("instructions lack %q:\n%s", w, got)
				}
			}
		})
	}
}

func TestAnnounce(t *testing.T) {
	tests := []struct {
		name       string
		notReady   int32 // answers 503 this many times, then 200
		noEndpoint bool  // readiness URL ""
		want       string
	}{
		{name: "ready at once", want: "text"},
		{name: "ready later", notReady: 3, want: "text"},
		{name: "never ready", notReady: 1 << 30},
		{name: "no readiness endpoint", noEndpoint: true, want: "text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/readiness" || calls.Add(1) <= tt.notReady {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			}))
			defer srv.Close()
			url := srv.URL + "/readiness"
			if tt.noEndpoint {
				url = ""
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			var out bytes.Buffer
			announce(ctx, &out, url, "text")
			if out.String() != tt.want {
				t.Errorf("announced %q, want %q", out.String(), tt.want)
			}
		})
	}
}

func TestDisplayPath(t *testing.T) {
	root := filepath.FromSlash("/src/warden")
	tests := []struct {
		wd, path, want string
	}{
		{wd: root, path: "examples/build/tls/ca.pem", want: "examples/build/tls/ca.pem"},
		{wd: filepath.Join(root, "examples"), path: "examples/requests/a.json", want: "requests/a.json"},
		{wd: filepath.Join(root, "internal"), path: "examples/requests/a.json", want: "/src/warden/examples/requests/a.json"},
		{wd: root, path: "/etc/policies.yml", want: "/etc/policies.yml"},
	}
	for _, tt := range tests {
		t.Run(tt.wd+" "+tt.path, func(t *testing.T) {
			if got, want := displayPath(tt.wd, root, filepath.FromSlash(tt.path)), filepath.FromSlash(tt.want); got != want {
				t.Errorf("displayPath = %q, want %q", got, want)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{in: "@examples/requests/a.json", want: "@examples/requests/a.json"},
		{in: "/home/me/My Code/ca.pem", want: "'/home/me/My Code/ca.pem'"},
		{in: "it's", want: `'it'\''s'`},
		{in: "", want: "''"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := shellQuote(tt.in); got != tt.want {
				t.Errorf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestDialHost(t *testing.T) {
	tests := []struct{ addr, want string }{
		{addr: "127.0.0.1", want: "127.0.0.1"},
		{addr: "0.0.0.0", want: "127.0.0.1"},
		{addr: "", want: "127.0.0.1"},
		{addr: "::", want: "::1"},
		{addr: "192.0.2.10", want: "192.0.2.10"},
		{addr: "localhost", want: "localhost"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := dialHost(tt.addr); got != tt.want {
				t.Errorf("dialHost(%q) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
}

// TestRun runs the command as `go run ./examples` does, the README's first
// command, on free ports: it must build the policies, start the server,
// announce it, and answer the announced curl command's request.
func TestRun(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chdir(wd) }) // run changes to the repository root
	port, readiness := testkit.FreePort(t), testkit.FreePort(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stderr := &logtest.Buffer{}, &logtest.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"examples", "--", "--port", fmt.Sprint(port),
			"--readiness-probe-port", fmt.Sprint(readiness), "--cache-dir=", "--log-level", "warn"}, stdout, stderr)
	}()
	giveUp := time.After(2 * time.Minute) // a hang, not a slow start
	for !strings.Contains(stdout.String(), "Warden's policy server is serving ") {
		select {
		case code := <-done:
			t.Fatalf("run exited with %d before announcing the server:\n%s\n%s", code, stdout, stderr)
		case <-giveUp:
			t.Fatalf("the server was not announced:\n%s\n%s", stdout, stderr)
		case <-time.After(50 * time.Millisecond):
		}
	}

	root := policybuild.RepoRootForTest(t)
	ca, err := os.ReadFile(filepath.Join(root, defaultLayout.TLS, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	body, err := os.ReadFile(filepath.Join(root, defaultLayout.Requests, "privileged-pod.json"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post(fmt.Sprintf("https://127.0.0.1:%d/validate/pod-privileged", port), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var review struct{ Response admission.Response }
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
		t.Fatal(err)
	}
	if review.Response.Allowed || review.Response.Status == nil || review.Response.Status.Message != "Privileged container is not allowed" {
		t.Errorf("privileged pod: %+v", review.Response)
	}

	cancel()
	if code := <-done; code != 0 {
		t.Errorf("run exited with %d after Ctrl-C:\n%s", code, stderr)
	}
}
