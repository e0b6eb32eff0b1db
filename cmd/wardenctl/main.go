// Command wardenctl is Warden's command-line tool for policy authors and
// cluster administrators, compatible with Kubewarden's kwctl. See
// internal/wardenctl.
package main

import (
	"context"
	"os"

	"github.com/wardenhq/warden/internal/cmdline"
	"github.com/wardenhq/warden/internal/wardenctl"
)

func main() {
	os.Exit(cmdline.Run(func(ctx context.Context) int {
		return wardenctl.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	}))
}
