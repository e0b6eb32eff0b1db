package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/testkit"
)

// TestALoopingPolicyShedsWhatItCannotServe fills a looping policy's turns
// and its queue: the next request is answered at once, with the answer of
// a timeout, instead of waiting behind the loops; a policy that behaves
// keeps answering meanwhile.
func TestALoopingPolicyShedsWhatItCannotServe(t *testing.T) {
	f := newEnvFixture(t, nil)
	if err := f.env.Init(context.Background(), f.configs(`
loop: {module: "{loop}", timeoutEvalSeconds: 600}
labels: {module: "{labels}", settings: {denied_labels: [blocked]}}
`)); err != nil {
		t.Fatal(err)
	}
	e := f.env.acquire()
	defer f.env.release(e)
	p, _ := e.Policy("loop")
	held := cap(p.calls.run) + int(p.calls.limit)

	// The loops end when their requests are cancelled, at the end.
	loopCtx, stopLoops := context.WithCancel(context.Background())
	validate := func(_ context.Context, id string, req *admission.Request, origin Origin) (*admission.Response, error) {
		return e.Validate(loopCtx, id, req, origin)
	}
	var wg sync.WaitGroup
	answers := make(chan string, held)
	for range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers <- answerPod(validate, "loop", "")
		}()
	}
	testkit.Eventually(t, 30*time.Second, "the loop policy's turns and queue are full", func() bool {
		return len(p.calls.run) == cap(p.calls.run) && p.calls.waiting.Load() == p.calls.limit
	})
	if got := f.answer("loop", ""); got != msgTimeout {
		t.Errorf("a request beyond the queue: %q, want the timeout answer %q", got, msgTimeout)
	}
	if got := f.answer("labels", "blocked"); !strings.Contains(got, "label blocked is denied") {
		t.Errorf("the policy that behaves answered %q while the loops run", got)
	}
	select {
	case got := <-answers:
		t.Fatalf("a looping request ended before the checks: %q", got)
	default:
	}
	stopLoops()
	wg.Wait()
}

// TestTheTimeLimitCoversTheWait checks a request waiting for its policy's
// turn is bounded by the policy's time limit, not by its client: with the
// loops holding every turn for a minute, a request of a policy with a 1 s
// limit is answered with the timeout, long before.
func TestTheTimeLimitCoversTheWait(t *testing.T) {
	f := newEnvFixture(t, nil)
	if err := f.env.Init(context.Background(), f.configs(`loop: {module: "{loop}", timeoutEvalSeconds: 1}`)); err != nil {
		t.Fatal(err)
	}
	e := f.env.acquire()
	defer f.env.release(e)
	p, _ := e.Policy("loop")
	for range cap(p.calls.run) {
		p.calls.run <- struct{}{} // every turn taken, as by calls that do not end
	}
	defer func() {
		for range cap(p.calls.run) {
			<-p.calls.run
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan string, 1)
	go func() { done <- answerPod(e.Validate, "loop", "") }()
	select {
	case got := <-done:
		if got != msgTimeout {
			t.Errorf("the waiting request: %q, want the timeout answer", got)
		}
	case <-ctx.Done():
		t.Fatal("the waiting request was not answered within a minute")
	}
}
