// Command audit-scanner evaluates the objects already in the cluster against
// the active policies, through the policy servers' /audit endpoint, and
// writes PolicyReports or OpenReports. See internal/auditscanner.
package main

import (
	"context"
	"os"

	"github.com/wardenhq/warden/internal/auditscanner"
	"github.com/wardenhq/warden/internal/cmdline"
)

func main() {
	os.Exit(cmdline.Run(func(ctx context.Context) int {
		return auditscanner.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	}))
}
