// Command controller reconciles Warden's policies.kubewarden.io resources:
// PolicyServers and the policies they serve. See internal/controller.
package main

import (
	"context"
	"os"

	"github.com/wardenhq/warden/internal/cmdline"
	"github.com/wardenhq/warden/internal/controller"
)

func main() {
	os.Exit(cmdline.Run(func(ctx context.Context) int {
		return controller.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}))
}
