package wardenctl

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestInfo checks the lines of info: version, Rego builtins, store and
// configuration directory, as kwctl info prints them.
func TestInfo(t *testing.T) {
	e := newEnv(t)
	e.env["XDG_CONFIG_HOME"] = filepath.Join(e.home, "xdg")
	r := e.mustRun("info")
	lines := strings.Split(r.stdout, "\n")
	if !strings.HasPrefix(lines[0], "wardenctl version: ") || !strings.Contains(lines[0], "compatible with Kubewarden "+compatVersion) {
		t.Errorf("first line %q", lines[0])
	}
	start := slices.Index(lines, "Open Policy Agent/Gatekeeper implemented builtins:")
	if start < 0 {
		t.Fatalf("no builtins heading:\n%s", r.stdout)
	}
	var builtins []string
	for _, l := range lines[start+1:] {
		name, ok := strings.CutPrefix(l, "  - ")
		if !ok {
			break
		}
		builtins = append(builtins, name)
	}
	if !slices.IsSorted(builtins) {
		t.Error("the builtins are not sorted")
	}
	for _, want := range []string{"glob.match", "json.patch", "regex.match", "sprintf", "time.now_ns", "yaml.unmarshal"} {
		if !slices.Contains(builtins, want) {
			t.Errorf("builtins lack %s", want)
		}
	}
	for _, refused := range []string{"http.send", "net.lookup_ip_addr", "opa.runtime", "json.match_schema", "plus", "eq", "internal.member_2"} {
		if slices.Contains(builtins, refused) {
			t.Errorf("builtins list %s, which Warden does not run for a module", refused)
		}
	}
	for _, want := range []string{
		"Policy store: " + e.storeDir() + "\n",
		"Config directory: " + filepath.Join(e.home, "xdg", "kubewarden") + "\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestCLIDocs writes the documentation of the commands in both formats and
// checks that it has every command and every flag.
func TestCLIDocs(t *testing.T) {
	root := (&app{getenv: func(string) string { return "" }}).rootCommand()
	var cmds []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		cmds = append(cmds, c)
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() {
				walk(s)
			}
		}
	}
	walk(root)
	for _, name := range []string{"wardenctl save", "wardenctl load", "wardenctl info", "wardenctl docs", "wardenctl scaffold vap"} {
		if !slices.ContainsFunc(cmds, func(c *cobra.Command) bool { return c.CommandPath() == name }) {
			t.Errorf("no command %s", name)
		}
	}

	tests := []struct {
		file, title string
		// heading is the heading of a command's section, link its entry
		// in the overview.
		heading, link func(path, anchor string) string
	}{
		{
			file: "cli-docs.md", title: "# Command-Line Help for `wardenctl`\n",
			heading: func(path, _ string) string { return "## `" + path + "`\n" },
			link:    func(path, anchor string) string { return "* [`" + path + "`↴](#" + anchor + ")\n" },
		},
		{
			file: "cli-docs.adoc", title: "= Command-Line Help for `wardenctl`\n",
			heading: func(path, anchor string) string { return "[#" + anchor + "]\n== `" + path + "`\n" },
			link:    func(path, anchor string) string { return "* <<" + anchor + ",`" + path + "`>>\n" },
		},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), tc.file)
			if r := newEnv(t).mustRun("docs", "--output", out); r.stdout != "" {
				t.Errorf("docs printed %q", r.stdout)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			doc := string(b)
			if !strings.HasPrefix(doc, tc.title) {
				t.Errorf("the document starts with %q, want %q", doc[:min(len(doc), 60)], tc.title)
			}
			for _, c := range cmds {
				path, anchor := c.CommandPath(), strings.ReplaceAll(c.CommandPath(), " ", "-")
				heading := tc.heading(path, anchor)
				i := strings.Index(doc, heading)
				if i < 0 {
					t.Errorf("no section %q", heading)
					continue
				}
				if !strings.Contains(doc, tc.link(path, anchor)) {
					t.Errorf("the overview does not link %s", path)
				}
				section := doc[i+len(heading):]
				if end := strings.Index(section, "\n\n\n"); end >= 0 {
					section = section[:end]
				}
				c.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
					if f.Name != "help" && !strings.Contains(section, "`--"+f.Name) {
						t.Errorf("the section of %s lacks --%s", path, f.Name)
					}
				})
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		e := newEnv(t)
		r := e.run("docs")
		if r.code != 2 {
			t.Errorf("no --output: exit %d, want 2", r.code)
		}
		checkError(t, r, "-o/--output is required")
		out := filepath.Join(t.TempDir(), "missing", "docs.md")
		r = e.run("docs", "-o", out)
		if r.code != 1 {
			t.Errorf("unwritable output: exit %d, want 1", r.code)
		}
		checkError(t, r, "cannot write file "+out)
	})
}
