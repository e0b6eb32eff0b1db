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
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("policybuild: %v", err)
	}
	path, err := Build(t.Context(), filepath.Join(root, "testdata", "policies", name), Options{})
	if err != nil {
		t.Fatalf("policybuild: test policy %q: %v", name, err)
	}
	return path
}

// repoRoot returns the directory of the go.mod of module rootModule at or
// above the working directory.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		doc, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && modulePath(doc) == rootModule {
			return dir, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s at or above %s", rootModule, wd)
		}
		dir = parent
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
