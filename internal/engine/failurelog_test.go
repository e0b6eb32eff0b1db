package engine

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/logtest"
)

// TestFailureLogsAreBounded checks that the log lines of a policy's failed
// evaluations are bounded as its own log lines are: a policy that fails
// every request logs the burst, then the rate, and counts the rest in a
// warning. Each failed request still gets its answer.
func TestFailureLogsAreBounded(t *testing.T) {
	var logs logtest.Buffer
	f := newEnvFixtureWith(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := f.env.Init(context.Background(), f.configs(`trap: {module: "{trap}"}`)); err != nil {
		t.Fatal(err)
	}
	e := f.env.acquire()
	defer f.env.release(e)
	p, _ := e.Policy("trap")
	now := time.Unix(1000, 0)
	p.failureLogs.now = func() time.Time { return now }

	const failures = 3 * logBurst
	for range failures {
		if got := f.answer("trap", ""); !strings.Contains(got, "out of bounds memory access") {
			t.Fatalf("a trapping policy answered %q", got)
		}
	}
	if n := strings.Count(logs.String(), `msg="policy evaluation failed"`); n != logBurst {
		t.Errorf("%d failures logged at once, want the burst, %d", n, logBurst)
	}
	now = now.Add(2 * time.Second) // tokens again, and time to report
	f.answer("trap", "")
	out := logs.String()
	want := `msg="log lines of failed evaluations dropped: over the rate limit" policy_id=trap dropped=` + strconv.Itoa(failures-logBurst)
	if !strings.Contains(out, want) {
		t.Errorf("log lacks %q:\n%s", want, tail(out, 600))
	}
	if n := strings.Count(out, `msg="policy evaluation failed"`); n != logBurst+1 {
		t.Errorf("%d failures logged, want %d: the burst and the one with tokens again", n, logBurst+1)
	}
}
