package wardenctl

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/wardenhq/warden/internal/buildinfo"
)

// compatVersion is the Kubewarden release Warden matches; policies'
// minimumKubewardenVersion is checked against it, as the policy server does.
const compatVersion = buildinfo.KubewardenVersion

func versionLine() string {
	return fmt.Sprintf("wardenctl (Warden) %s, compatible with Kubewarden %s", buildinfo.String(), compatVersion)
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(a.out, "%s (%s, %s/%s)\n", versionLine(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
