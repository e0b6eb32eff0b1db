package archtest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The sections of ARCHITECTURE.md that these tests read.
const (
	sectionPackageMap   = "## Package map"
	sectionImports      = "## Who imports whom"
	sectionOtherModules = "## Other modules"
)

// TestPackageMap checks that the package map of ARCHITECTURE.md names every
// package of the main module, once, and nothing else.
func TestPackageMap(t *testing.T) {
	st := loadTree(t)
	section := readSection(t, st, sectionPackageMap)
	named := tableNames(section)
	checkSameSet(t, sectionPackageMap, named, st.mainPackages(),
		"a package that the map does not name: add a row for it",
		"a row for a package that does not exist: remove it or fix its path")
}

// TestOtherModules checks that ARCHITECTURE.md names every nested module
// (a directory with a go.mod of its own), and nothing else.
func TestOtherModules(t *testing.T) {
	st := loadTree(t)
	section := readSection(t, st, sectionOtherModules)
	checkSameSet(t, sectionOtherModules, tableNames(section), st.modules,
		"a module that the section does not name: add a row for it",
		"a row for a module that does not exist: remove it or fix its path")
}

// TestImportList checks ARCHITECTURE.md's list of who imports whom: one
// item per package of the main module, listing exactly the Warden packages
// its non-test files import, and every item below the items of the
// packages it imports, so that the list reads as layers from the leaves
// up.
func TestImportList(t *testing.T) {
	st := loadTree(t)
	items := importItems(t, readSection(t, st, sectionImports))
	var names []string
	for _, it := range items {
		names = append(names, it.pkg)
	}
	checkSameSet(t, sectionImports, names, st.mainPackages(),
		"a package that the list does not name: add an item for it",
		"an item for a package that does not exist: remove it or fix its path")
	for _, dir := range st.mainPackages() {
		if !slices.Contains(names, dir) {
			t.Logf("the item that says what %s imports today:\n%s", dir, importLine(dir, st.packages[dir].wardenImports()))
		}
	}

	above := map[string]bool{}
	for _, it := range items {
		pkg, ok := st.packages[it.pkg]
		if !ok || pkg.module != "." {
			above[it.pkg] = true
			continue // reported above
		}
		got := pkg.wardenImports()
		var problems []string
		for _, dir := range got {
			if !slices.Contains(it.imports, dir) {
				problems = append(problems, fmt.Sprintf("%s imports %s (%s), which its item does not list",
					it.pkg, dir, strings.Join(pkg.imports[importPathOf(dir)], ", ")))
			}
		}
		for _, dir := range it.imports {
			if !slices.Contains(got, dir) {
				problems = append(problems, fmt.Sprintf("the item of %s lists %s, which its non-test files do not import", it.pkg, dir))
			} else if !above[dir] {
				problems = append(problems, fmt.Sprintf("%s imports %s, whose item must come above it", it.pkg, dir))
			}
		}
		for _, p := range problems {
			t.Errorf("ARCHITECTURE.md, %s: %s", sectionImports, p)
		}
		if len(problems) > 0 {
			t.Logf("the item that says what %s imports today:\n%s", it.pkg, importLine(it.pkg, got))
		}
		above[it.pkg] = true
	}
}

// importLine is the item of the import list for a package that imports
// dirs.
func importLine(pkg string, dirs []string) string {
	if len(dirs) == 0 {
		return "- `" + pkg + "`: nothing from Warden"
	}
	return "- `" + pkg + "`: `" + strings.Join(dirs, "`, `") + "`"
}

func importPathOf(dir string) string {
	if dir == "." {
		return modulePath
	}
	return modulePath + "/" + dir
}

// readSection returns the lines of ARCHITECTURE.md under heading, up to the
// next second-level heading.
func readSection(t *testing.T, st *sourceTree, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(st.root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == heading:
			in = true
		case in && strings.HasPrefix(line, "## "):
			return out
		case in:
			out = append(out, line)
		}
	}
	if !in {
		t.Fatalf("ARCHITECTURE.md has no %q section", heading)
	}
	return out
}

// backquoted matches a name written as code.
var backquoted = regexp.MustCompile("`([^`]+)`")

// tableNames returns the first cell of every table row of lines whose first
// cell is a single name written as code: "| `internal/wasm` | ... |".
func tableNames(lines []string) []string {
	var names []string
	for _, line := range lines {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 {
			continue
		}
		first := strings.TrimSpace(cells[1])
		if m := backquoted.FindStringSubmatch(first); m != nil && m[0] == first {
			names = append(names, m[1])
		}
	}
	return names
}

// importItem is one item of the import list.
type importItem struct {
	pkg     string
	imports []string
}

// importItems reads the list items of lines: "- `pkg`: `a`, `b`" or
// "- `pkg`: nothing from Warden", an item running on over indented lines.
func importItems(t *testing.T, lines []string) []importItem {
	t.Helper()
	var texts []string
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "- `"):
			texts = append(texts, line[2:])
		case len(texts) > 0 && strings.HasPrefix(line, "  ") && strings.TrimSpace(line) != "":
			texts[len(texts)-1] += " " + strings.TrimSpace(line)
		}
	}
	var items []importItem
	for _, text := range texts {
		head, rest, ok := strings.Cut(text, ":")
		m := backquoted.FindStringSubmatch(head)
		if !ok || m == nil || m[0] != strings.TrimSpace(head) {
			t.Errorf("ARCHITECTURE.md, %s: cannot read the item %q: want \"- `package`: `import`, ...\"", sectionImports, text)
			continue
		}
		it := importItem{pkg: m[1]}
		for _, imp := range backquoted.FindAllStringSubmatch(rest, -1) {
			it.imports = append(it.imports, imp[1])
		}
		items = append(items, it)
	}
	return items
}

// checkSameSet reports the names of want missing from got, the names of
// got not in want, and the names got holds twice.
func checkSameSet(t *testing.T, section string, got, want []string, missing, extra string) {
	t.Helper()
	seen := map[string]bool{}
	for _, name := range got {
		if seen[name] {
			t.Errorf("ARCHITECTURE.md, %s: %s is named twice", section, name)
		}
		seen[name] = true
		if !slices.Contains(want, name) {
			t.Errorf("ARCHITECTURE.md, %s: %s: %s", section, name, extra)
		}
	}
	for _, name := range want {
		if !seen[name] {
			t.Errorf("ARCHITECTURE.md, %s: %s: %s", section, name, missing)
		}
	}
	if t.Failed() {
		t.Logf("the tree has: %s", strings.Join(want, ", "))
	}
}
