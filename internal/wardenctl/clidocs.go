package wardenctl

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// DocsOptions are the flags of docs.
type DocsOptions struct {
	// Output is the file written: Markdown when its name ends in .md,
	// AsciiDoc otherwise.
	Output string
}

// AddFlags registers the flags, with kwctl's names.
func (o *DocsOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "Path of the documentation file written (required)")
}

// Validate checks the flags.
func (o *DocsOptions) Validate() error {
	if o.Output == "" {
		return &usageError{errors.New("-o/--output is required")}
	}
	return nil
}

func (a *app) docsCommand(root *cobra.Command) *cobra.Command {
	var o DocsOptions
	cmd := &cobra.Command{
		Use:   "docs --output <file>",
		Short: "Generate the documentation of the commands: Markdown for a .md file, AsciiDoc otherwise",
		Long: "Write the help of every command and flag to a file, as kwctl docs does: Markdown when the file's " +
			"name ends in .md, AsciiDoc otherwise.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			var text string
			if strings.HasSuffix(o.Output, ".md") {
				text = cliDocs(root, markdownDocs)
			} else {
				text = cliDocs(root, asciidocDocs)
			}
			if err := os.WriteFile(o.Output, []byte(text), 0o644); err != nil {
				return fmt.Errorf("cannot write file %s: %w", o.Output, err)
			}
			return nil
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// docsFormat is the markup of a documentation file; the shape of both is
// that of kwctl's (clap-markdown).
type docsFormat struct {
	title    string // the document's title line, %s: the program
	overview string // the heading of the list of commands
	link     string // an item of that list, %[1]s: the command, %[2]s: its anchor
	heading  string // a command's heading, %[1]s: the command, %[2]s: its anchor
	section  string // a section's heading, %s: its name
	usage    string // the usage line, %s: the usage
}

var (
	markdownDocs = docsFormat{
		title:    "# Command-Line Help for `%s`\n",
		overview: "**Command Overview:**\n",
		link:     "* [`%[1]s`↴](#%[2]s)\n",
		heading:  "## `%[1]s`\n",
		section:  "###### **%s:**\n",
		usage:    "**Usage:** `%s`\n",
	}
	asciidocDocs = docsFormat{
		title:    "= Command-Line Help for `%s`\n",
		overview: "*Command Overview:*\n",
		link:     "* <<%[2]s,`%[1]s`>>\n",
		heading:  "[#%[2]s]\n== `%[1]s`\n",
		section:  "=== *%s:*\n",
		usage:    "*Usage:* `%s`\n",
	}
)

// cliDocs documents root and every command under it, depth first.
func cliDocs(root *cobra.Command, f docsFormat) string {
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		cmds = append(cmds, c)
		for _, sub := range documentedCommands(c) {
			walk(sub)
		}
	}
	walk(root)

	var b strings.Builder
	fmt.Fprintf(&b, f.title, root.Name())
	fmt.Fprintf(&b, "\nThis document contains the help content for the `%s` command-line program.\n\n", root.Name())
	b.WriteString(f.overview + "\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, f.link, c.CommandPath(), docsAnchor(c))
	}
	for _, c := range cmds {
		b.WriteString("\n")
		fmt.Fprintf(&b, f.heading, c.CommandPath(), docsAnchor(c))
		desc := c.Long
		if desc == "" {
			desc = c.Short
		}
		fmt.Fprintf(&b, "\n%s\n\n", desc)
		usage := c.UseLine()
		if c.HasAvailableSubCommands() && !c.Runnable() {
			usage = c.CommandPath() + " <COMMAND>"
		}
		fmt.Fprintf(&b, f.usage, usage)
		if subs := documentedCommands(c); len(subs) > 0 {
			b.WriteString("\n")
			fmt.Fprintf(&b, f.section, "Subcommands")
			b.WriteString("\n")
			for _, s := range subs {
				fmt.Fprintf(&b, "* `%s` — %s\n", s.Name(), s.Short)
			}
		}
		var flags []string
		c.NonInheritedFlags().VisitAll(func(fl *pflag.Flag) {
			if fl.Hidden || fl.Name == "help" {
				return
			}
			flags = append(flags, docsFlag(fl))
		})
		if len(flags) > 0 {
			b.WriteString("\n")
			fmt.Fprintf(&b, f.section, "Options")
			b.WriteString("\n")
			b.WriteString(strings.Join(flags, ""))
		}
		b.WriteString("\n\n")
	}
	return b.String()
}

// documentedCommands are the subcommands of c shown in the docs: those
// cobra shows in help.
func documentedCommands(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			out = append(out, s)
		}
	}
	return out
}

// docsAnchor is the anchor of a command's section: its path, words joined
// by dashes, as kwctl's.
func docsAnchor(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-")
}

// docsFlag is the item of a flag: its names, its value, its help and its
// default.
func docsFlag(fl *pflag.Flag) string {
	var b strings.Builder
	b.WriteString("* ")
	if fl.Shorthand != "" {
		fmt.Fprintf(&b, "`-%s`, ", fl.Shorthand)
	}
	varname, usage := pflag.UnquoteUsage(fl)
	if varname == "" {
		fmt.Fprintf(&b, "`--%s`", fl.Name)
	} else {
		switch varname {
		case "string", "stringArray", "strings":
			varname = "value"
		}
		fmt.Fprintf(&b, "`--%s <%s>`", fl.Name, strings.ToUpper(varname))
	}
	fmt.Fprintf(&b, " — %s\n", usage)
	switch fl.DefValue {
	case "", "false", "[]", "0":
	default:
		fmt.Fprintf(&b, "\n  Default value: `%s`\n", fl.DefValue)
	}
	return b.String()
}
