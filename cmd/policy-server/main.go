// Command policy-server is Warden's admission webhook: it evaluates
// AdmissionReviews with the policies of a policies.yml. See
// internal/policyserver.
package main

import (
	"context"
	"os"

	"github.com/wardenhq/warden/internal/cmdline"
	"github.com/wardenhq/warden/internal/policyserver"
)

func main() {
	os.Exit(cmdline.Run(func(ctx context.Context) int {
		return policyserver.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	}))
}
