package heapcheck

import (
	"runtime"
	"testing"
)

// TestCheck runs the churn natively, with write barriers and a collection
// forced midway through: the heap must check out, and the summary must
// depend only on the number of steps.
func TestCheck(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.GC()
	}()
	first, err := Check(20000)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	again, err := Check(20000)
	if err != nil {
		t.Fatal(err)
	}
	if first != again {
		t.Errorf("summaries differ: %q, then %q", first, again)
	}
}
