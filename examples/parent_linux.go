//go:build linux

package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// exitWithParent asks the kernel to send the runner SIGTERM, which stops it
// as Ctrl-C does, when the process that started it exits. go run starts the
// runner as its child and does not pass SIGTERM or SIGKILL on: without this,
// stopping go run by its PID would leave the server running on its ports.
// (Linux sends the signal when the thread that started the runner exits;
// neither go run nor a shell ends that thread before it exits itself.)
func exitWithParent() error {
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0); err != nil {
		return fmt.Errorf("asking to stop with the parent process: %w", err)
	}
	if os.Getppid() != parent { // the parent exited before the request took effect
		return unix.Kill(os.Getpid(), unix.SIGTERM)
	}
	return nil
}
