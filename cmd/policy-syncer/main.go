// Command policy-syncer copies policies from a hub cluster to spoke clusters
// as its PolicySyncs say, and reports what each spoke did with them. See
// internal/policysync.
package main

import (
	"context"
	"os"

	"github.com/wardenhq/warden/internal/cmdline"
	"github.com/wardenhq/warden/internal/policysync"
)

func main() {
	os.Exit(cmdline.Run(func(ctx context.Context) int {
		return policysync.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}))
}
