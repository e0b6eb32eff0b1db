package policybuild

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rootModule is the module path of the Warden repository, whose go.mod
// ForTest looks for.
const rootModule = "github.com/wardenhq/warden"

// ForTest builds testdata/policies/<name> of this repository for a test and
// returns the path of the annotated module, failing the test on error. It
// finds the repository by walking up from the working directory (a test runs
// in its package's directory) to the go.mod of module github.com/wardenhq/warden,
// and uses the default Options, so builds are shared by all tests and runs.
func ForTest(t testing.TB, name string) string {
	t.Helper()
	return ForTestWith(t, name, Options{})
}

// ForTestWith is ForTest with opts, for a policy that must be built in a
// way of its own (Options.GCFlags).
func ForTestWith(t testing.TB, name string, opts Options) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("policybuild: %v", err)
	}
	path, err := Build(t.Context(), filepath.Join(root, "testdata", "policies", name), opts)
	if err != nil {
		t.Fatalf("policybuild: test policy %q: %v", name, err)
	}
	return path
}

// RepoRootForTest returns the repository root, found from the working
// directory (a test runs in its package's directory), or fails the test.
func RepoRootForTest(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("policybuild: %v", err)
	}
	return root
}

// repoRoot returns the repository root at or above the working directory.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return RepoRoot(wd)
}

// RepoRoot returns the directory of the go.mod of Warden's module
// (github.com/wardenhq/warden) at or above dir.
func RepoRoot(dir string) (string, error) {
	for d := dir; ; {
		doc, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && modulePath(doc) == rootModule {
			return d, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("looking for the repository root: %w", err)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod of module %s at or above %s", rootModule, dir)
		}
		d = parent
	}
}

// modulePath returns the path of the module directive of a go.mod, or "".
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], "\"`")
		}
	}
	return ""
}
