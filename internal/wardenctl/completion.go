package wardenctl

import (
	"fmt"

	"github.com/spf13/cobra"
)

// CompletionOptions are the flags of completions.
type CompletionOptions struct {
	// Shell is bash, zsh, fish or powershell.
	Shell string
}

// AddFlags registers the flags, with kwctl's names.
func (o *CompletionOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.Shell, "shell", "s", "", "Shell type: bash, zsh, fish or powershell")
}

// Validate checks the shell.
func (o *CompletionOptions) Validate() error {
	switch o.Shell {
	case "bash", "zsh", "fish", "powershell":
		return nil
	case "":
		return &usageError{fmt.Errorf("a shell is required: --shell bash|zsh|fish|powershell")}
	case "elvish":
		return &usageError{fmt.Errorf("elvish completions are not available in wardenctl: use bash, zsh, fish or powershell")}
	}
	return &usageError{fmt.Errorf("unknown shell %q: use bash, zsh, fish or powershell", o.Shell)}
}

// completionCommand generates shell completions for root. kwctl names it
// completions and takes --shell; cobra's usual "completion <shell>" works too.
func (a *app) completionCommand(root *cobra.Command) *cobra.Command {
	var o CompletionOptions
	cmd := &cobra.Command{
		Use:       "completions [bash|zsh|fish|powershell]",
		Aliases:   []string{"completion"},
		Short:     "Generate shell completions",
		Args:      args(cobra.MaximumNArgs(1)),
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		RunE: func(cmd *cobra.Command, argv []string) error {
			if len(argv) == 1 {
				if o.Shell != "" && o.Shell != argv[0] {
					return &usageError{fmt.Errorf("the shell is given twice: %q and --shell %q", argv[0], o.Shell)}
				}
				o.Shell = argv[0]
			}
			if err := o.Validate(); err != nil {
				return err
			}
			switch o.Shell {
			case "bash":
				return root.GenBashCompletionV2(a.out, true)
			case "zsh":
				return root.GenZshCompletion(a.out)
			case "fish":
				return root.GenFishCompletion(a.out, true)
			default:
				return root.GenPowerShellCompletionWithDesc(a.out)
			}
		},
	}
	o.AddFlags(cmd)
	return cmd
}
