//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// roleEnv tells a copy of the test binary started by TestExitWithParent
// which process it plays: "parent" (go run) or "child" (the runner).
const roleEnv = "WARDEN_EXAMPLES_TEST_ROLE"

// TestExitWithParent plays go run and the runner: a parent process starts a
// child that calls exitWithParent; the parent is killed with SIGKILL, as
// `kill -9 <pid of go run>` does; the child must then get SIGTERM. The test
// adopts the orphaned child (PR_SET_CHILD_SUBREAPER) to wait for it.
func TestExitWithParent(t *testing.T) {
	switch os.Getenv(roleEnv) {
	case "parent":
		child := exec.Command(os.Args[0], "-test.run=^TestExitWithParent$")
		child.Env = append(os.Environ(), roleEnv+"=child")
		child.Stdout = os.Stdout
		if err := child.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Println("child", child.Process.Pid)
		time.Sleep(time.Hour) // until killed
		os.Exit(2)
	case "child":
		if err := exitWithParent(); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Println("ready")
		time.Sleep(time.Hour) // until signalled
		os.Exit(0)
	}

	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot adopt orphans: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	parent := exec.Command(os.Args[0], "-test.run=^TestExitWithParent$")
	parent.Env = append(os.Environ(), roleEnv+"=parent")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	childPID, ready := 0, false
	lines := bufio.NewScanner(out)
	for (childPID == 0 || !ready) && lines.Scan() {
		switch l := lines.Text(); {
		case strings.HasPrefix(l, "child "):
			childPID, _ = strconv.Atoi(strings.TrimPrefix(l, "child "))
		case l == "ready":
			ready = true
		default:
			t.Errorf("helper: %s", l)
		}
	}
	if childPID == 0 || !ready {
		_ = parent.Process.Kill()
		t.Fatalf("the helpers did not start: child %d, ready %t", childPID, ready)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()

	// The child is ours now. A child that outlives its parent would keep
	// this test waiting: after a minute it is killed and the test fails.
	gaveUp := make(chan struct{})
	timer := time.AfterFunc(time.Minute, func() {
		close(gaveUp)
		_ = unix.Kill(childPID, unix.SIGKILL)
	})
	defer timer.Stop()
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(childPID, &ws, 0, nil)
		if err != unix.EINTR {
			if err != nil {
				t.Fatalf("waiting for the child: %v", err)
			}
			break
		}
	}
	select {
	case <-gaveUp:
		t.Fatal("the child still ran a minute after its parent was killed")
	default:
	}
	if !ws.Signaled() || ws.Signal() != unix.SIGTERM {
		t.Errorf("the child ended with %v (exit status %d), want SIGTERM", ws, ws.ExitStatus())
	}
}
