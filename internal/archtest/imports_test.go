package archtest

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// importRule is one import rule, as a package's documentation states it.
type importRule struct {
	// doc is the file holding the sentence, relative to the repository root.
	doc string
	// sentence is the rule in the documentation's words.
	sentence string
	// check returns the imports that break the rule, one description each.
	check func(*sourceTree) []string
	// contradicted, when set, says how the tree contradicts the sentence
	// today: the rule is reported (the subtest is skipped) rather than
	// enforced, until the sentence or the code changes. The test fails once
	// the rule holds again, so that the note goes.
	contradicted string
}

// Names of what the rules speak of. Warden packages are written with w;
// a path ending in "/..." stands for the packages under it too.
const (
	wazero         = "github.com/tetratelabs/wazero/..."
	clientGo       = "k8s.io/client-go/..."
	controllerRT   = "sigs.k8s.io/controller-runtime/..."
	kubernetesPkgs = "k8s.io/..."
	sigsKubernetes = "sigs.k8s.io/..."
)

func w(dir string) string { return modulePath + "/" + dir }

// allCommands, as the binaries of a rule, stands for every package under
// cmd/: the main packages of Warden's production binaries.
var allCommands []string

// testHelpers are the packages whose documentation says "only tests import
// it"; they may import one another from their non-test files.
var testHelpers = []string{
	"internal/clustertest", "internal/logtest", "internal/pkitest",
	"internal/rego/regotest", "internal/verify/verifytest", "internal/observability/otlptest",
	"internal/admission/admissiontest", "internal/testkit/ociregistry",
}

// importRules are the import rules of the package documentation, one entry
// per sentence. A new "must not import" in a package comment belongs here.
var importRules = []importRule{
	{
		doc:      "api/policies/v1/doc.go",
		sentence: "It may import k8s.io/api and k8s.io/apimachinery only: no controller-runtime, no client-go, nothing from Warden's internal packages.",
		check: all(
			onlyExternal("api/policies/v1", "k8s.io/api/...", "k8s.io/apimachinery/..."),
			onlyWarden("api/policies/v1"),
		),
	},
	{
		doc:      "internal/wasm/doc.go",
		sentence: "It is the only package of Warden that imports wazero.",
		check:    onlyImportedBy(wazero, withTests, "internal/wasm"),
	},
	{
		doc:      "internal/wasm/doc.go",
		sentence: "It must not import any other Warden package but internal/sharedcache, the signed store of compiled code the replicas share.",
		check:    onlyWarden("internal/wasm", w("internal/sharedcache")),
	},
	{
		doc:      "internal/hostcap/doc.go",
		sentence: "This package must not import wazero, internal/wasm or internal/engine: the engine depends on it through a small interface of its own.",
		check:    mustNotImport("internal/hostcap", wazero, w("internal/wasm"), w("internal/engine")),
	},
	{
		doc:      "internal/observability/doc.go",
		sentence: "It is a leaf package: it must not import any other Warden package, nor Kubernetes or wazero packages, so that every other package can import it.",
		check: all(
			onlyWarden("internal/observability"),
			mustNotImport("internal/observability", kubernetesPkgs, sigsKubernetes, wazero),
		),
	},
	{
		doc:      "internal/policyfetch/doc.go",
		sentence: "This package must not import wazero, internal/wasm or internal/engine: it moves bytes and knows nothing about what they do.",
		check:    mustNotImport("internal/policyfetch", wazero, w("internal/wasm"), w("internal/engine")),
	},
	{
		doc:      "internal/certwatch/doc.go",
		sentence: "It imports only internal/observability from Warden (for the log keys) and must not import anything that serves requests.",
		check:    onlyWarden("internal/certwatch", w("internal/observability")),
	},
	{
		doc:      "internal/metadata/metadata.go",
		sentence: "It imports only internal/wasm's binary helpers; it must not import the engine or the server.",
		check:    onlyWarden("internal/metadata", w("internal/wasm")),
	},
	{
		doc:      "internal/sharedcache/sharedcache.go",
		sentence: "It imports nothing from Warden but pki.",
		check:    onlyWarden("internal/sharedcache", w("internal/pki")),
	},
	{
		doc:      "internal/pki/pki.go",
		sentence: "It holds no state and imports nothing from Warden.",
		check:    onlyWarden("internal/pki"),
	},
	{
		doc:      "internal/clustertest/doc.go",
		sentence: "Only tests import this package; it must not import any Warden package, so that every package's cluster tests can use it.",
		check:    all(onlyTests(w("internal/clustertest")), onlyWarden("internal/clustertest")),
	},
	{
		doc:      "internal/rego/doc.go",
		sentence: "It does not know about wasm: it must not import wazero or internal/wasm.",
		check:    mustNotImport("internal/rego", wazero, w("internal/wasm")),
	},
	{
		doc:      "internal/rego/regotest/regotest.go",
		sentence: "Only tests import it.",
		check:    onlyTests(w("internal/rego/regotest")),
	},
	{
		doc:      "internal/cmdline/cmdline.go",
		sentence: "It imports nothing of Warden's.",
		check:    onlyWarden("internal/cmdline"),
	},
	{
		doc:      "internal/pkitest/pkitest.go",
		sentence: "Only tests import it.",
		check:    onlyTests(w("internal/pkitest")),
	},
	{
		doc:      "internal/logtest/logtest.go",
		sentence: "Only tests import it.",
		check:    onlyTests(w("internal/logtest")),
	},
	{
		doc:      "internal/admission/admissiontest/admissiontest.go",
		sentence: "Only tests import it.",
		check:    onlyTests(w("internal/admission/admissiontest")),
	},
	{
		doc:      "internal/reflector/store.go",
		sentence: "This package knows nothing of policies or host calls: it imports nothing of Warden but internal/jsontape, to trim objects, and internal/observability's log keys.",
		check:    onlyWarden("internal/reflector", w("internal/jsontape"), w("internal/observability")),
	},
	{
		doc:      "internal/celpolicy/doc.go",
		sentence: "The package must not import wazero or internal/wasm.",
		check:    mustNotImport("internal/celpolicy", wazero, w("internal/wasm")),
	},
	{
		doc:      "internal/policybuild/doc.go",
		sentence: "It imports only internal/metadata from Warden and must not import the engine, the server or wazero;",
		check: all(
			onlyWarden("internal/policybuild", w("internal/metadata")),
			mustNotImport("internal/policybuild", wazero),
		),
	},
	{
		doc:      "internal/policybuild/doc.go",
		sentence: "production code must not import it, since it shells out to the go command and links package testing.",
		check:    notLinkedBy(w("internal/policybuild"), allCommands...),
	},
	{
		doc:      "internal/testkit/testkit.go",
		sentence: "Tests and test tools only; it imports nothing of Warden's.",
		check:    onlyWarden("internal/testkit"),
	},
	{
		doc:      "internal/testkit/ociregistry/ociregistry.go",
		sentence: "Only tests import it.",
		check:    onlyTests(w("internal/testkit/ociregistry")),
	},
	{
		doc:      "internal/buildinfo/buildinfo.go",
		sentence: "It imports nothing from Warden.",
		check:    onlyWarden("internal/buildinfo"),
	},
	{
		doc:      "internal/verify/verifytest/verifytest.go",
		sentence: "Only tests import it.",
		check:    onlyTests(w("internal/verify/verifytest")),
	},
	{
		doc:      "internal/verify/doc.go",
		sentence: "This package reaches registries only through policyfetch.",
		check: mustNotImport("internal/verify", "net/http", "oras.land/oras-go/v2/registry/remote/...",
			"github.com/google/go-containerregistry/pkg/v1/remote/..."),
	},
	{
		doc:      "internal/verify/doc.go",
		sentence: "It must not import wazero, internal/wasm or internal/engine.",
		check:    mustNotImport("internal/verify", wazero, w("internal/wasm"), w("internal/engine")),
	},
	{
		doc:      "internal/groupexpr/groupexpr.go",
		sentence: "This package must not import the wasm runtime or the engine.",
		check:    mustNotImport("internal/groupexpr", wazero, w("internal/wasm"), w("internal/engine")),
	},
	{
		doc:      "internal/admission/admission.go",
		sentence: "It imports nothing from Warden but jsontape.",
		check:    onlyWarden("internal/admission", w("internal/jsontape")),
	},
	{
		doc:      "internal/wardenctl/doc.go",
		sentence: "nothing imports it but cmd/wardenctl.",
		check:    onlyImportedBy(w("internal/wardenctl"), withoutTests, "cmd/wardenctl"),
	},
	{
		doc:      "internal/jsontape/jsontape.go",
		sentence: "It imports nothing from Warden.",
		check:    onlyWarden("internal/jsontape"),
	},
	{
		doc:      "internal/observability/otlptest/otlptest.go",
		sentence: "Only tests import it.",
		check:    onlyTests(w("internal/observability/otlptest")),
	},
	{
		doc:      "internal/engine/doc.go",
		sentence: "It must not import the packages that serve or configure it (internal/policyserver, internal/policyconfig, internal/wardenctl, internal/controller), nor internal/hostcap or internal/reflector, which it reaches through the HostCapabilities and KubernetesReader interfaces it defines, nor wazero or the Kubernetes client libraries.",
		check: mustNotImport("internal/engine",
			w("internal/policyserver"), w("internal/policyconfig"), w("internal/wardenctl"), w("internal/controller"),
			w("internal/hostcap"), w("internal/reflector"), wazero, clientGo, controllerRT),
	},
	{
		doc:      "internal/policyserver/doc.go",
		sentence: "It must not import wazero (guests run through internal/engine and internal/wasm), internal/controller or internal/wardenctl.",
		check:    mustNotImport("internal/policyserver", wazero, w("internal/controller"), w("internal/wardenctl")),
	},
	{
		doc:      "internal/auditscanner/doc.go",
		sentence: "It must not import the policy server, the controller, or wasm packages: it talks to them over HTTP and the Kubernetes API only.",
		check: mustNotImport("internal/auditscanner",
			w("internal/policyserver"), w("internal/engine"), w("internal/controller"), w("internal/wasm"), wazero),
	},
	{
		doc:      "hack/floorserver/doc.go",
		sentence: "It imports only the standard library and internal/admission's wire types;",
		check:    all(onlyExternal("hack/floorserver"), onlyWarden("hack/floorserver", w("internal/admission"))),
		contradicted: "hack/floorserver imports hack/internal/cmdline (run.go), the command-line parsing " +
			"all the benchmark tools share; the sentence should name it (issue 19)",
	},
	{
		doc:      "hack/floorserver/doc.go",
		sentence: "it must not import the policy server, which it is the baseline for.",
		check:    mustNotImport("hack/floorserver", w("internal/policyserver"), w("internal/engine"), w("internal/wasm")),
	},
	{
		doc:      "hack/loadtest/doc.go",
		sentence: "The package must not import Warden's policy server packages: it measures them from the outside.",
		check:    noneLinkedBy("hack/loadtest", "cmd/policy-server"),
	},
	{
		doc:      "hack/image/doc.go",
		sentence: "It must not import Warden's runtime packages: it builds the binaries with the go command, it does not link them.",
		check:    noneLinkedBy("hack/image", allCommands...),
	},
	{
		doc:      "hack/scalebench/doc.go",
		sentence: "The benchmark imports Warden's test helpers (internal/clustertest, internal/policybuild, internal/rego/regotest) but never the policy server: it measures the server from the outside, as a process.",
		check:    mustNotImportInTests("hack/scalebench", w("internal/policyserver")),
	},
	{
		doc:      "hack/charttest/doc.go",
		sentence: "It is a module of its own so that the main module does not depend on Helm; it imports nothing from the main module, only reads its files.",
		check:    mustNotImportInTests("hack/charttest", modulePath+"/..."),
	},
	{
		doc:      "test/cluster/doc.go",
		sentence: "The package has tests only; nothing imports it.",
		check:    onlyImportedBy(w("test/cluster"), withTests),
	},
	{
		doc:      "internal/archtest/doc.go",
		sentence: "The package has tests only; nothing imports it. It imports no Warden package",
		check:    all(onlyImportedBy(w("internal/archtest"), withTests), mustNotImportInTests("internal/archtest", modulePath+"/...")),
	},
}

// TestImportRules checks every rule of importRules against the tree.
func TestImportRules(t *testing.T) {
	st := loadTree(t)
	for _, r := range importRules {
		t.Run(r.doc, func(t *testing.T) {
			if !docSays(t, st, r.doc, r.sentence) {
				t.Errorf("%s no longer says %q: update the rule with the sentence", r.doc, r.sentence)
			}
			violations := r.check(st)
			switch {
			case r.contradicted != "" && len(violations) == 0:
				t.Errorf("%s: %q holds now: remove the rule's contradicted note", r.doc, r.sentence)
			case r.contradicted != "":
				t.Skipf("%s: %q is not enforced: %s (%s)", r.doc, r.sentence, r.contradicted, strings.Join(violations, "; "))
			default:
				for _, v := range violations {
					t.Errorf("%s, which %s says: %q", v, r.doc, r.sentence)
				}
			}
		})
	}
}

// statedRule finds the wordings of an import rule in a package comment.
var statedRule = regexp.MustCompile(`(?i)must not import|imports nothing|imports only|imports no |only tests import|nothing imports`)

// TestEveryStatedRuleIsEncoded checks that every package comment that
// states an import rule has its entries in importRules.
func TestEveryStatedRuleIsEncoded(t *testing.T) {
	st := loadTree(t)
	encoded := map[string]bool{}
	for _, r := range importRules {
		encoded[r.doc] = true
	}
	fset := token.NewFileSet()
	for _, dir := range sortedDirs(st) {
		names, err := filepath.Glob(filepath.Join(st.root, filepath.FromSlash(dir), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			f, err := parser.ParseFile(fset, name, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			file := dir + "/" + filepath.Base(name)
			if f.Doc != nil && statedRule.MatchString(f.Doc.Text()) && !encoded[file] {
				t.Errorf("the package comment in %s states an import rule (%q) that importRules does not encode: add an entry per sentence",
					file, statedRule.FindString(f.Doc.Text()))
			}
		}
	}
}

// TestImportRulesSeeViolations checks that the checks can fail: each is run
// against a tree made to break it.
func TestImportRulesSeeViolations(t *testing.T) {
	pkg := func(dir string, imports ...string) *goPackage {
		p := &goPackage{dir: dir, module: ".", imports: map[string][]string{}, testImports: map[string][]string{}}
		for _, ip := range imports {
			p.imports[ip] = []string{"x.go"}
		}
		return p
	}
	st := &sourceTree{packages: map[string]*goPackage{}}
	for _, p := range []*goPackage{
		pkg("cmd/policy-server", w("internal/a")),
		pkg("internal/a", w("internal/helper"), "github.com/tetratelabs/wazero/api", "k8s.io/client-go/rest"),
		pkg("internal/helper"),
		pkg("hack/tool", w("internal/a")),
	} {
		st.packages[p.dir] = p
	}
	st.packages["internal/b"] = &goPackage{dir: "internal/b", module: ".", imports: map[string][]string{},
		testImports: map[string][]string{w("internal/helper"): {"b_test.go"}, w("internal/a"): {"b_test.go"}}}
	for _, tc := range []struct {
		name  string
		check func(*sourceTree) []string
		want  int
	}{
		{"mustNotImport subtree", mustNotImport("internal/a", wazero), 1},
		{"mustNotImport exact", mustNotImport("internal/a", w("internal/helper")), 1},
		{"mustNotImport other", mustNotImport("internal/a", w("internal/b")), 0},
		{"mustNotImportInTests", mustNotImportInTests("internal/b", w("internal/a")), 1},
		{"onlyWarden", onlyWarden("internal/a"), 1},
		{"onlyWarden allowed", onlyWarden("internal/a", w("internal/helper")), 0},
		{"onlyExternal", onlyExternal("internal/a", "k8s.io/client-go/..."), 1},
		{"onlyImportedBy", onlyImportedBy(w("internal/a"), withoutTests, "cmd/policy-server"), 1},
		{"onlyImportedBy with tests", onlyImportedBy(w("internal/a"), withTests, "cmd/policy-server", "hack/tool"), 1},
		{"onlyTests", onlyTests(w("internal/helper")), 1},
		{"notLinkedBy", notLinkedBy(w("internal/helper"), "cmd/policy-server"), 1},
		{"notLinkedBy every command", notLinkedBy(w("internal/helper"), allCommands...), 1},
		{"noneLinkedBy", noneLinkedBy("hack/tool", "cmd/policy-server"), 1},
		{"missing package", onlyWarden("internal/gone"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.check(st); len(got) != tc.want {
				t.Errorf("violations = %q, want %d", got, tc.want)
			}
		})
	}
}

// docSays reports whether the comments of a Go file hold sentence, the
// lines of a comment joined with single spaces.
func docSays(t *testing.T, st *sourceTree, file, sentence string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(st.root, filepath.FromSlash(file)))
	if err != nil {
		t.Error(err)
		return false
	}
	var text []string
	for line := range strings.Lines(string(b)) {
		if c, ok := strings.CutPrefix(strings.TrimSpace(line), "//"); ok {
			text = append(text, strings.Fields(c)...)
		}
	}
	return strings.Contains(strings.Join(text, " "), strings.Join(strings.Fields(sentence), " "))
}

// matches reports whether import path ip is pattern, or lies under it
// when pattern ends in "/...".
func matches(pattern, ip string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return ip == prefix || strings.HasPrefix(ip, prefix+"/")
	}
	return ip == pattern
}

func matchesAny(patterns []string, ip string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(p, ip) })
}

// isStandard reports whether ip is a standard-library package: its first
// element has no dot.
func isStandard(ip string) bool {
	first, _, _ := strings.Cut(ip, "/")
	return !strings.Contains(first, ".")
}

func all(checks ...func(*sourceTree) []string) func(*sourceTree) []string {
	return func(st *sourceTree) []string {
		var out []string
		for _, c := range checks {
			out = append(out, c(st)...)
		}
		return out
	}
}

// files says which files of the importers a rule reads.
type files bool

const (
	withoutTests files = false // the non-test files: what the binaries link
	withTests    files = true  // the _test.go files too
)

// importsOf calls f with every import of the package in dir (only its
// non-test files unless tests is withTests), or returns a violation when
// there is no such package.
func importsOf(st *sourceTree, dir string, tests files, f func(ip, file string) []string) []string {
	pkg, ok := st.packages[dir]
	if !ok {
		return []string{fmt.Sprintf("%s is not a package any more: update the rule", dir)}
	}
	var out []string
	sets := []map[string][]string{pkg.imports}
	if tests == withTests {
		sets = append(sets, pkg.testImports)
	}
	for _, set := range sets {
		for ip, names := range set {
			for _, name := range names {
				out = append(out, f(ip, dir+"/"+name)...)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// mustNotImport: the non-test files of dir import nothing that targets
// match.
func mustNotImport(dir string, targets ...string) func(*sourceTree) []string {
	return forbid(dir, withoutTests, targets)
}

// mustNotImportInTests: no file of dir, test files included, imports
// anything that targets match.
func mustNotImportInTests(dir string, targets ...string) func(*sourceTree) []string {
	return forbid(dir, withTests, targets)
}

func forbid(dir string, tests files, targets []string) func(*sourceTree) []string {
	return func(st *sourceTree) []string {
		return importsOf(st, dir, tests, func(ip, file string) []string {
			if matchesAny(targets, ip) {
				return []string{file + " imports " + ip}
			}
			return nil
		})
	}
}

// onlyWarden: the non-test files of dir import no package of the main
// module but allowed.
func onlyWarden(dir string, allowed ...string) func(*sourceTree) []string {
	return func(st *sourceTree) []string {
		return importsOf(st, dir, withoutTests, func(ip, file string) []string {
			if _, warden := wardenDir(ip); warden && !matchesAny(allowed, ip) {
				return []string{file + " imports " + ip}
			}
			return nil
		})
	}
}

// onlyExternal: besides the main module's packages, which other checks
// judge, the non-test files of dir import only the standard library and
// allowed.
func onlyExternal(dir string, allowed ...string) func(*sourceTree) []string {
	return func(st *sourceTree) []string {
		return importsOf(st, dir, withoutTests, func(ip, file string) []string {
			if _, warden := wardenDir(ip); !warden && !isStandard(ip) && !matchesAny(allowed, ip) {
				return []string{file + " imports " + ip}
			}
			return nil
		})
	}
}

// onlyImportedBy: no package of the tree but importers imports target
// (from its non-test files, or from any file with withTests).
func onlyImportedBy(target string, tests files, importers ...string) func(*sourceTree) []string {
	return func(st *sourceTree) []string {
		var out []string
		for _, dir := range sortedDirs(st) {
			if slices.Contains(importers, dir) || matches(target, importPathOf(dir)) {
				continue
			}
			out = append(out, forbid(dir, tests, []string{target})(st)...)
		}
		return out
	}
}

// onlyTests: only _test.go files, and the test helpers, import target.
func onlyTests(target string) func(*sourceTree) []string {
	return func(st *sourceTree) []string {
		if _, ok := st.byImportPath(strings.TrimSuffix(target, "/...")); !ok {
			return []string{target + " is not a package any more: update the rule"}
		}
		var out []string
		for _, dir := range sortedDirs(st) {
			if slices.Contains(testHelpers, dir) {
				continue
			}
			out = append(out, forbid(dir, withoutTests, []string{target})(st)...)
		}
		return out
	}
}

// notLinkedBy: none of the main packages in bins (none given: every
// package under cmd/) links target, directly or not.
func notLinkedBy(target string, bins ...string) func(*sourceTree) []string {
	return func(st *sourceTree) []string {
		var out []string
		for _, bin := range commandsOr(st, bins) {
			if _, ok := st.packages[bin]; !ok {
				out = append(out, bin+" is not a package any more: update the rule")
				continue
			}
			for ip := range st.linkedBy(bin) {
				if matches(target, ip) {
					out = append(out, bin+" links "+ip)
				}
			}
		}
		slices.Sort(out)
		return out
	}
}

// noneLinkedBy: the non-test files of dir import no Warden package that
// one of the main packages in bins (none given: every package under cmd/)
// links.
func noneLinkedBy(dir string, bins ...string) func(*sourceTree) []string {
	return func(st *sourceTree) []string {
		linked := map[string]bool{}
		for _, bin := range commandsOr(st, bins) {
			if _, ok := st.packages[bin]; !ok {
				return []string{bin + " is not a package any more: update the rule"}
			}
			for ip := range st.linkedBy(bin) {
				linked[ip] = true
			}
		}
		return importsOf(st, dir, withoutTests, func(ip, file string) []string {
			if linked[ip] {
				return []string{file + " imports " + ip + ", which the binaries link"}
			}
			return nil
		})
	}
}

// commandsOr returns bins, or when it is empty every main-module package
// under cmd/.
func commandsOr(st *sourceTree, bins []string) []string {
	if len(bins) > 0 {
		return bins
	}
	var cmds []string
	for _, dir := range st.mainPackages() {
		if strings.HasPrefix(dir, "cmd/") {
			cmds = append(cmds, dir)
		}
	}
	return cmds
}

func sortedDirs(st *sourceTree) []string {
	var dirs []string
	for dir := range st.packages {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	return dirs
}
