// Command pause is the sandbox ("pause") container of the pods of the local
// cluster that hack/local-cluster.sh starts: it holds the pod's namespaces
// open, reaps the zombies handed to it when it is the pod's PID 1, and exits
// 0 on SIGINT or SIGTERM. hack/local-cluster/ociimage packs it as an image,
// so that nothing prebuilt is pulled. Build it static (CGO_ENABLED=0).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited; several exits can share one
// SIGCHLD.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
