package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/testkit"
)

// TestNoEvaluationForAClientThatHasGone checks that a request whose
// context is done before its evaluation starts (its client has gone) is
// not evaluated: not when the policy has a free turn, and not when it
// waited for one.
func TestNoEvaluationForAClientThatHasGone(t *testing.T) {
	f := newEnvFixture(t, nil)
	if err := f.env.Init(context.Background(), f.configs(`labels: {module: "{labels}", settings: {denied_labels: [blocked]}}`)); err != nil {
		t.Fatal(err)
	}
	req, err := admission.DecodeReview(admissiontest.New(admissiontest.WithLabels(map[string]string{"blocked": "yes"})).JSON())
	if err != nil {
		t.Fatal(err)
	}
	defer req.Release()
	t.Run("a free turn", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		resp, err := f.env.Validate(ctx, "labels", req, OriginValidate)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("answer %+v, error %v: want context.Canceled", resp, err)
		}
	})
	t.Run("after waiting for a turn", func(t *testing.T) {
		e := f.env.acquire()
		defer f.env.release(e)
		p, _ := e.Policy("labels")
		for range cap(p.calls.run) {
			p.calls.run <- struct{}{} // every turn taken
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := e.Validate(ctx, "labels", req, OriginValidate)
			errc <- err
		}()
		testkit.Eventually(t, 30*time.Second, "the request waits for a turn", func() bool { return p.calls.waiting.Load() == 1 })
		cancel()
		for range cap(p.calls.run) {
			<-p.calls.run
		}
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
	})
	if got := f.answer("labels", "blocked"); !strings.Contains(got, "label blocked is denied") {
		t.Errorf("a request whose client waits: %q", got)
	}
}

// TestFailureReport checks that WithFailureReport hears of evaluations
// that failed, and not of rejections.
func TestFailureReport(t *testing.T) {
	f := newEnvFixture(t, nil)
	if err := f.env.Init(context.Background(), f.configs(`
labels: {module: "{labels}", settings: {denied_labels: [blocked]}}
loop: {module: "{loop}", timeoutEvalSeconds: 1}
`)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var failures []string
	ctx := WithFailureReport(context.Background(), func(policyID, reason string) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, policyID+": "+reason)
	})
	validate := func(_ context.Context, id string, req *admission.Request, origin Origin) (*admission.Response, error) {
		return f.env.Validate(ctx, id, req, origin)
	}
	if got := answerPod(validate, "labels", "blocked"); !strings.Contains(got, "label blocked is denied") {
		t.Fatalf("labels: %q", got)
	}
	if len(failures) != 0 {
		t.Fatalf("a rejection was reported as a failure: %q", failures)
	}
	if got := answerPod(validate, "loop", ""); got != msgTimeout {
		t.Fatalf("loop: %q", got)
	}
	if len(failures) != 1 || failures[0] != "loop: "+msgTimeout {
		t.Fatalf("failures %q, want the loop's timeout", failures)
	}
}

// TestLeftBeforeTheGuestRan checks how a runner's error tells a request
// whose client left while it waited for a guest slot (not evaluated) from
// one whose guest the same cancellation interrupted.
func TestLeftBeforeTheGuestRan(t *testing.T) {
	gone := errors.New("the client closed its connection")
	cancelled := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{name: "waited for a slot, cancelled with a cause", ctx: cancelled(gone), err: context.Canceled, want: true},
		{name: "waited for a slot, cancelled", ctx: cancelled(nil), err: context.Canceled, want: true},
		{name: "interrupted, cancelled with a cause", ctx: cancelled(gone), err: fmt.Errorf("guest call interrupted: %w", gone)},
		{name: "interrupted, cancelled (nobody reads it)", ctx: cancelled(nil), err: fmt.Errorf("guest call interrupted: %w", context.Canceled), want: true},
		{name: "the context is alive", ctx: context.Background(), err: context.Canceled},
		{name: "another error", ctx: cancelled(gone), err: errors.New("trap")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := leftBeforeTheGuestRan(tt.ctx, tt.err); got != tt.want {
				t.Errorf("leftBeforeTheGuestRan = %t, want %t", got, tt.want)
			}
		})
	}
}
