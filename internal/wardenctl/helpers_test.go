package wardenctl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/wasm"
)

// wasmCache is shared by the tests of the package, so that each module is
// compiled once per run; every test has a home (and store) of its own.
var wasmCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wardenctl-test-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wasmCache = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testEnv is a process environment for Main: a home directory of its own
// (and so a store), and the shared compilation cache.
type testEnv struct {
	t    testing.TB
	home string
	env  map[string]string
}

func newEnv(t testing.TB) *testEnv {
	t.Helper()
	home := t.TempDir()
	return &testEnv{t: t, home: home, env: map[string]string{
		"HOME":             home,
		"WARDEN_CACHE_DIR": wasmCache,
		"DOCKER_CONFIG":    filepath.Join(home, "no-docker"),
	}}
}

// storeDir is the store of the environment.
func (e *testEnv) storeDir() string { return filepath.Join(e.home, ".cache", "kubewarden", "store") }

// result is what one run of Main produced.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs Main with args and no standard input.
func (e *testEnv) run(args ...string) result { return e.runStdin("", args...) }

// runStdin runs Main with args and stdin as standard input.
func (e *testEnv) runStdin(stdin string, args ...string) result {
	e.t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, strings.NewReader(stdin), &out, &errOut, func(k string) string { return e.env[k] })
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// mustRun runs Main and fails the test unless it exits 0.
func (e *testEnv) mustRun(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("wardenctl %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// write writes a file under dir and returns its path.
func write(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// policy builds a test policy of testdata/policies.
func policy(t testing.TB, name string) string {
	t.Helper()
	return policybuild.ForTest(t, name)
}

// bareModule writes a copy of a test policy without its metadata.
func bareModule(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(policy(t, name))
	if err != nil {
		t.Fatal(err)
	}
	if b, err = wasm.WithoutCustomSection(b, metadata.SectionName); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name+"-bare.wasm")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// podYAML is a pod with a label.
const podYAML = `apiVersion: v1
kind: Pod
metadata:
  name: nginx
  labels:
    app: web
spec:
  containers:
    - name: nginx
      image: nginx:1.27
`

// podReview is the review of a request to create the Pod nginx, uid u-1,
// with labels (a JSON object).
func podReview(t testing.TB, labels string) *admissiontest.Review {
	t.Helper()
	var set map[string]string
	if err := json.Unmarshal([]byte(labels), &set); err != nil {
		t.Fatal(err)
	}
	return admissiontest.New(admissiontest.WithUID("u-1"), admissiontest.WithLabels(set))
}

// requestFile writes the AdmissionRequest of podReview(labels) and returns
// its path; review writes the whole AdmissionReview.
func requestFile(t testing.TB, labels string, review bool) string {
	t.Helper()
	r := podReview(t, labels)
	doc := r.RequestJSON()
	if review {
		doc = r.JSON()
	}
	return write(t, t.TempDir(), "request.json", string(doc))
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkError checks that a run failed with one error line, the last of
// stderr, that contains want.
func checkError(t testing.TB, r result, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "Error: ") || !strings.Contains(last, want) {
		t.Errorf("last line of stderr %q, want \"Error: ...%s...\"\n%s", last, want, r)
	}
	if n := strings.Count(r.stderr, "Error: "); n != 1 {
		t.Errorf("%d error lines, want 1\n%s", n, r)
	}
}
