// Command audit-scanner evaluates the objects already in the cluster against
// the active policies, through the policy servers' /audit endpoint, and
// writes PolicyReports or OpenReports. See internal/auditscanner.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/wardenhq/warden/internal/auditscanner"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := auditscanner.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
