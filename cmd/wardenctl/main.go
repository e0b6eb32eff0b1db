// Command wardenctl is Warden's command-line tool for policy authors and
// cluster administrators, compatible with Kubewarden's kwctl. See
// internal/wardenctl.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/wardenhq/warden/internal/wardenctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := wardenctl.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
