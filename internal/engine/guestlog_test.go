package engine

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGuestLogIsBounded checks the bounds of the tracing/log capability:
// a line over maxLogBytes is cut, and past its rate a policy's lines are
// dropped and counted. The call never fails either way, as in Kubewarden.
func TestGuestLogIsBounded(t *testing.T) {
	t.Run("size", func(t *testing.T) {
		var logs bytes.Buffer
		h := &hostCalls{policyID: "p", logger: slog.New(slog.NewTextHandler(&logs, nil))}
		payload := `{"level":"info","message":"` + strings.Repeat("x", 1<<20) + `"}`
		if _, err := h.HostCall(context.Background(), "kubewarden", "tracing", "log", []byte(payload)); err != nil {
			t.Fatal(err)
		}
		if logs.Len() > 2*maxLogBytes {
			t.Errorf("a 1 MiB log payload became %d bytes of log", logs.Len())
		}
		if !strings.Contains(logs.String(), "truncated_bytes=") {
			t.Errorf("the cut line does not say so:\n%.300s", logs.String())
		}
	})
	t.Run("rate", func(t *testing.T) {
		var logs bytes.Buffer
		now := time.Unix(1000, 0)
		h := &hostCalls{policyID: "p", logger: slog.New(slog.NewTextHandler(&logs, nil))}
		h.logs.now = func() time.Time { return now }
		for range 10 * logBurst {
			if _, err := h.HostCall(context.Background(), "kubewarden", "tracing", "log", []byte(`{"level":"info","message":"hi"}`)); err != nil {
				t.Fatal(err)
			}
		}
		if n := strings.Count(logs.String(), `msg="policy log"`); n != logBurst {
			t.Errorf("%d lines logged at once, want the burst, %d", n, logBurst)
		}
		now = now.Add(2 * time.Second) // tokens again, and time to report
		if _, err := h.HostCall(context.Background(), "kubewarden", "tracing", "log", []byte(`{"level":"info","message":"later"}`)); err != nil {
			t.Fatal(err)
		}
		want := `msg="policy log lines dropped: over the rate limit" policy_id=p dropped=` + strconv.Itoa(9*logBurst)
		if !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "message=later") {
			t.Errorf("log lacks %q or the later line:\n%s", want, tail(logs.String(), 400))
		}
	})
}

func tail(s string, n int) string { return s[max(len(s)-n, 0):] }
