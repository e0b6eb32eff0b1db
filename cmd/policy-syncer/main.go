// Command policy-syncer copies policies from a hub cluster to spoke clusters
// as its PolicySyncs say, and reports what each spoke did with them. See
// internal/policysync.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/wardenhq/warden/internal/policysync"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := policysync.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
