package archtest

import (
	"bufio"
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// compatPage is the page of Kubewarden behaviour that comments link to,
// relative to the repository root.
const compatPage = "docs/compatibility.md"

var (
	// compatLink matches a link to an anchor of compatibility.md, from any
	// directory: "docs/compatibility.md#wapc-protocol", and
	// "compatibility.md#host-capabilities" in another page of docs/.
	compatLink = regexp.MustCompile(`compatibility\.md#([\p{L}\p{N}_-]*)`)
	// inPageLink matches a link of compatibility.md to one of its own
	// anchors: "[OPA mode](#opa-mode)".
	inPageLink = regexp.MustCompile(`\]\(#([\p{L}\p{N}_-]*)\)`)
	// compatSection matches a citation of Kubewarden compatibility notes
	// that are not in the repository: the word compat followed by a
	// section number (or by "section" and a number), or the notes' file
	// name. TestCompatSection lists examples.
	compatSection = regexp.MustCompile(`(?i)\bcompat\s+(?:section\s+|§\s*)?[0-9]+(?:\.[0-9]+)*|kubewarden-compat\b`)
	// headingLine matches an ATX heading: "## Policy groups".
	headingLine = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?[ \t]*$`)
	// closingHashes is the optional closing sequence of an ATX heading.
	closingHashes = regexp.MustCompile(`(^|[ \t]+)#+$`)
	// inlineLink is a link in a heading; its anchor keeps the text only.
	inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// TestCompatLinks checks that the links to docs/compatibility.md lead
// somewhere: every link to one of its anchors in a Go comment or a markdown
// file, and every in-page link of compatibility.md itself, must name a
// heading of compatibility.md, by GitHub's anchor for it. It also checks
// that no Go comment cites the numbered sections of compatibility notes
// that are not in the repository (compatSection): a reader cannot follow
// those.
func TestCompatLinks(t *testing.T) {
	root, err := repositoryRoot()
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(compatPage)))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, a := range headingAnchors(string(page)) {
		anchors[a] = true
	}

	files, err := linkingFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	var links int
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		var texts []lineText
		if strings.HasSuffix(rel, ".go") {
			texts = goComments(rel, b)
		} else {
			texts = markdownLines(b)
		}
		for _, tx := range texts {
			for _, m := range compatLink.FindAllStringSubmatch(tx.text, -1) {
				links++
				if !anchors[m[1]] {
					t.Errorf("%s:%d: %s names no heading of %s", rel, tx.line, m[0], compatPage)
				}
			}
			if rel == compatPage {
				for _, m := range inPageLink.FindAllStringSubmatch(tx.text, -1) {
					links++
					if !anchors[m[1]] {
						t.Errorf("%s:%d: the link to #%s names no heading of the page", rel, tx.line, m[1])
					}
				}
			}
			if strings.HasSuffix(rel, ".go") {
				if m := compatSection.FindString(tx.text); m != "" {
					t.Errorf("%s:%d: %q cites compatibility notes that are not in the repository: "+
						"link the section of %s that says it instead (%s#<anchor>)", rel, tx.line, m, compatPage, compatPage)
				}
			}
		}
	}
	if links == 0 {
		t.Errorf("no link to %s found: the test reads nothing", compatPage)
	}
	if t.Failed() {
		t.Logf("the anchors of %s: %s", compatPage, strings.Join(sortedKeys(anchors), ", "))
	}
}

// TestHeadingAnchors checks the anchors computed for headings against
// those GitHub gives them.
func TestHeadingAnchors(t *testing.T) {
	tests := []struct {
		name string
		page string
		want []string
	}{
		{"words", "## Policy groups", []string{"policy-groups"}},
		{"case and acronyms", "## waPC protocol\n## HTTP routes", []string{"wapc-protocol", "http-routes"}},
		{"punctuation dropped", "### Recorded sessions (wardenctl)\n## policies.yml format", []string{"recorded-sessions-wardenctl", "policiesyml-format"}},
		{"hyphens and underscores kept", "## Post-processing\n## `--log-fmt otlp`\n## a_b", []string{"post-processing", "--log-fmt-otlp", "a_b"}},
		{"closing hashes", "## TLS ##", []string{"tls"}},
		{"link text only", "## See [the page](other.md#x)", []string{"see-the-page"}},
		{"duplicates numbered", "## Tests\n### Tests\n# Tests", []string{"tests", "tests-1", "tests-2"}},
		{"code blocks skipped", "## Run\n```sh\n# not a heading\n```\n~~~\n## nor this\n~~~\n#notaheading", []string{"run"}},
		{"empty heading", "##\n## x", []string{"", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := headingAnchors(tt.page); !slices.Equal(got, tt.want) {
				t.Errorf("headingAnchors(%q) = %q, want %q", tt.page, got, tt.want)
			}
		})
	}
}

// TestCompatSection checks what counts as a citation of the compatibility
// notes that are not in the repository.
func TestCompatSection(t *testing.T) {
	// The citations are split, so that grep finds none in the repository.
	const compat = "compat "
	tests := []struct {
		text string
		want bool
	}{
		{"the waPC protocol (" + compat + "1.1)", true},
		{"Kubewarden's names (" + compat + "section 4)", true},
		{"(Compat 6)", true},
		{compat + "5.3 to 5.5", true},
		{"see ../shared/docs/kubewarden-compat.md", true},
		{"compatible with kwctl", false},
		{"compatVersion is the version", false},
		{"docs/compatibility.md#metrics", false},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			if got := compatSection.MatchString(tt.text); got != tt.want {
				t.Errorf("compatSection matches %q: %v, want %v", tt.text, got, tt.want)
			}
		})
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a
// markdown page, in order: the heading's text without its markup, in lower
// case, with spaces turned into hyphens and punctuation other than hyphens
// and underscores dropped; a repeated anchor gets "-1", "-2", ... Lines in
// fenced code blocks are not headings.
func headingAnchors(page string) []string {
	var anchors []string
	seen := map[string]int{}
	fence := ""
	for line := range strings.Lines(page) {
		line = strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
			continue
		}
		if len(line)-len(trimmed) <= 3 && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence = trimmed[:3]
			continue
		}
		m := headingLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := anchor(m[1])
		if n, ok := seen[a]; ok {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n+1)
		} else {
			seen[a] = 0
		}
		anchors = append(anchors, a)
	}
	return anchors
}

// anchor is GitHub's anchor for the text of one heading.
func anchor(heading string) string {
	text := closingHashes.ReplaceAllString(heading, "")
	text = inlineLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// lineText is some text of a file and the line it starts on.
type lineText struct {
	line int
	text string
}

// goComments returns the comments of a Go file, one entry per line. The
// file is read with go/scanner, which also reads files that do not build
// (test data), and strings are not comments.
func goComments(name string, src []byte) []lineText {
	fset := token.NewFileSet()
	file := fset.AddFile(name, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, func(token.Position, string) {}, scanner.ScanComments)
	var out []lineText
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		if tok != token.COMMENT {
			continue
		}
		first := fset.Position(pos).Line
		for i, l := range strings.Split(lit, "\n") {
			out = append(out, lineText{line: first + i, text: l})
		}
	}
}

// markdownLines returns the lines of a markdown file.
func markdownLines(b []byte) []lineText {
	var out []lineText
	n := 0
	for line := range strings.Lines(string(b)) {
		n++
		out = append(out, lineText{line: n, text: line})
	}
	return out
}

// linkingFiles returns the Go and markdown files of the repository,
// relative to root and slash-separated, sorted. Like the go command, it
// skips directories whose names start with "." or "_"; it also skips the
// directories that .gitignore ignores at the root ("/scratch/"), which hold
// files that are not in the repository.
func linkingFiles(root string) ([]string, error) {
	ignored, err := ignoredRootDirs(root)
	if err != nil {
		return nil, err
	}
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || ignored[rel]) {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := path.Ext(rel); ext == ".go" || ext == ".md" {
			files = append(files, rel)
		}
		return nil
	})
	slices.Sort(files)
	return files, err
}

// ignoredRootDirs returns the directories that the root .gitignore names
// as "/dir/".
func ignoredRootDirs(root string) (map[string]bool, error) {
	dirs := map[string]bool{}
	f, err := os.Open(filepath.Join(root, ".gitignore"))
	if os.IsNotExist(err) {
		return dirs, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if dir, ok := strings.CutPrefix(line, "/"); ok && strings.HasSuffix(dir, "/") {
			dir = strings.TrimSuffix(dir, "/")
			if dir != "" && !strings.ContainsAny(dir, "*?[/") {
				dirs[dir] = true
			}
		}
	}
	return dirs, sc.Err()
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
