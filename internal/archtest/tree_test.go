package archtest

import (
	"bufio"
	"bytes"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// modulePath is the import path of the main module.
const modulePath = "github.com/wardenhq/warden"

// goPackage is one directory of Go files.
type goPackage struct {
	// dir is the directory, slash-separated and relative to the repository
	// root ("." for the root itself).
	dir string
	// module is the directory of the module the package belongs to: "." for
	// the main module, else that of a nested go.mod (hack/charttest).
	module string
	// imports maps each import path to the files that import it, for the
	// non-test files (imports) and the _test.go files (testImports).
	imports, testImports map[string][]string
}

// importPath is the package's import path, for a package of the main
// module.
func (p *goPackage) importPath() string {
	if p.dir == "." {
		return modulePath
	}
	return modulePath + "/" + p.dir
}

// sourceTree is what the tests know of the repository.
type sourceTree struct {
	root     string                // absolute path of the repository root
	packages map[string]*goPackage // by dir, every module's
	// modules are the directories of the nested modules (those with a
	// go.mod of their own), sorted.
	modules []string
}

var (
	treeOnce sync.Once
	tree     *sourceTree
	treeErr  error
)

// loadTree reads the repository once per test binary.
func loadTree(t *testing.T) *sourceTree {
	t.Helper()
	treeOnce.Do(func() { tree, treeErr = readTree() })
	if treeErr != nil {
		t.Fatal(treeErr)
	}
	return tree
}

// repositoryRoot returns the closest directory above the working directory
// that holds the main module's go.mod.
func repositoryRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && moduleName(mod) == modulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// moduleName returns the path of a go.mod's module directive.
func moduleName(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			name := strings.TrimSpace(rest)
			if unquoted, err := strconv.Unquote(name); err == nil {
				name = unquoted
			}
			return name
		}
	}
	return ""
}

// readTree walks the repository as the go command sees it: directories
// whose names start with "." or "_" are skipped, and so are the Go files
// under testdata (though a go.mod there still counts as a nested module).
// Build constraints are ignored: every file counts, whatever its tags.
func readTree() (*sourceTree, error) {
	root, err := repositoryRoot()
	if err != nil {
		return nil, err
	}
	st := &sourceTree{root: root, packages: map[string]*goPackage{}}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		dir := path.Dir(rel)
		if name == "go.mod" && dir != "." {
			st.modules = append(st.modules, dir)
			return nil
		}
		if !strings.HasSuffix(name, ".go") || underTestdata(dir) {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := st.packages[dir]
		if pkg == nil {
			pkg = &goPackage{dir: dir, imports: map[string][]string{}, testImports: map[string][]string{}}
			st.packages[dir] = pkg
		}
		imports := pkg.imports
		if strings.HasSuffix(name, "_test.go") {
			imports = pkg.testImports
		}
		for _, spec := range f.Imports {
			ip, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			imports[ip] = append(imports[ip], name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(st.modules)
	for _, pkg := range st.packages {
		pkg.module = "."
		for _, m := range st.modules {
			if pkg.dir == m || strings.HasPrefix(pkg.dir, m+"/") {
				pkg.module = m // the nested modules do not nest further
			}
		}
	}
	return st, nil
}

func underTestdata(dir string) bool {
	return slices.Contains(strings.Split(dir, "/"), "testdata")
}

// mainPackages returns the directories of the main module's packages,
// sorted.
func (st *sourceTree) mainPackages() []string {
	var dirs []string
	for dir, pkg := range st.packages {
		if pkg.module == "." {
			dirs = append(dirs, dir)
		}
	}
	slices.Sort(dirs)
	return dirs
}

// byImportPath returns the main module's package with that import path.
func (st *sourceTree) byImportPath(ip string) (*goPackage, bool) {
	dir, ok := wardenDir(ip)
	if !ok {
		return nil, false
	}
	pkg, ok := st.packages[dir]
	if !ok || pkg.module != "." {
		return nil, false
	}
	return pkg, true
}

// wardenDir returns the directory of a main-module import path.
func wardenDir(ip string) (string, bool) {
	if ip == modulePath {
		return ".", true
	}
	return strings.CutPrefix(ip, modulePath+"/")
}

// wardenImports returns the directories of the main-module packages that
// pkg's non-test files import, sorted.
func (pkg *goPackage) wardenImports() []string {
	var dirs []string
	for ip := range pkg.imports {
		if dir, ok := wardenDir(ip); ok {
			dirs = append(dirs, dir)
		}
	}
	slices.Sort(dirs)
	return dirs
}

// linkedBy returns the import paths of the main-module packages that the
// package in dir links: its non-test imports, transitively, itself
// included.
func (st *sourceTree) linkedBy(dir string) map[string]bool {
	seen := map[string]bool{}
	var visit func(pkg *goPackage)
	visit = func(pkg *goPackage) {
		if seen[pkg.importPath()] {
			return
		}
		seen[pkg.importPath()] = true
		for ip := range pkg.imports {
			if dep, ok := st.byImportPath(ip); ok {
				visit(dep)
			}
		}
	}
	if pkg, ok := st.packages[dir]; ok {
		visit(pkg)
	}
	return seen
}
