package wardenctl

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/spf13/cobra"

	"github.com/wardenhq/warden/internal/buildinfo"
	"github.com/wardenhq/warden/internal/rego"
)

func (a *app) infoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Display system information",
		Long: "Print, as kwctl info does, the version, the Rego builtins Warden runs for Open Policy Agent and " +
			"Gatekeeper policies, the policy store and the configuration directory (sources.yaml, " +
			"verification-config.yml).",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var b strings.Builder
			fmt.Fprintf(&b, "wardenctl version: %s (Warden, compatible with Kubewarden %s)\n\n", buildinfo.String(), compatVersion)
			b.WriteString("Open Policy Agent/Gatekeeper implemented builtins:\n")
			for _, name := range regoBuiltins() {
				fmt.Fprintf(&b, "  - %s\n", name)
			}
			fmt.Fprintf(&b, "\nPolicy store: %s\n", a.storeDir())
			fmt.Fprintf(&b, "Config directory: %s\n", filepath.Join(a.configHome(), "kubewarden"))
			_, err := fmt.Fprint(a.out, b.String())
			return err
		},
	}
}

// regoBuiltins returns, sorted, the builtins that Warden runs for a policy
// compiled to WebAssembly by OPA when the module leaves them to its host:
// every builtin function of OPA that internal/rego does not refuse.
// Operators and OPA's internal builtins, which the module always runs
// itself, are left out.
func regoBuiltins() []string {
	var out []string
	for _, b := range ast.Builtins {
		if b.Infix != "" || strings.HasPrefix(b.Name, "internal.") {
			continue
		}
		if _, err := rego.NewBuiltins([]string{b.Name}); err != nil {
			continue
		}
		out = append(out, b.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
