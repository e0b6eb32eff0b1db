package policyserver_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/wardenhq/warden/internal/policyserver"
)

// TestMainSetsControllerRuntimeLogger checks that Main hands its logger to
// controller-runtime, whose cache and client cluster mode uses: without one,
// controller-runtime prints "log.SetLogger(...) was never called" and a
// goroutine stack on stderr (issue 29). controller-runtime's logger is set
// once per process, so the check runs in a child process of its own.
func TestMainSetsControllerRuntimeLogger(t *testing.T) {
	const msg = "a message of controller-runtime"
	if os.Getenv("WARDEN_CTRLLOG_CHILD") == "1" {
		// Main sets up its logging, then fails: there is no policies file.
		code := policyserver.Main(context.Background(),
			[]string{"--policies", t.TempDir() + "/missing.yml", "--log-fmt", "json"},
			os.Stdout, os.Stderr, func(string) string { return "" })
		if code != 1 {
			t.Fatalf("Main exited %d, want 1", code)
		}
		ctrllog.Log.WithName("cache").Info(msg)
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMainSetsControllerRuntimeLogger$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WARDEN_CTRLLOG_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var logged bool
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "{") && strings.Contains(line, `"msg":"`+msg+`"`) && strings.Contains(line, `"logger":"cache"`) {
			logged = true
		}
	}
	if !logged {
		t.Errorf("controller-runtime's message is not a JSON line of the policy server's logger:\n%s", out)
	}
	if strings.Contains(string(out), "was never called") {
		t.Errorf("controller-runtime says its logger was never set:\n%s", out)
	}
}
