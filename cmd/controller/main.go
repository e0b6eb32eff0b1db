// Command controller reconciles Warden's policies.kubewarden.io resources:
// PolicyServers and the policies they serve. See internal/controller.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/wardenhq/warden/internal/controller"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := controller.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
