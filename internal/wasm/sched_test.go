package wasm_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/wasm"
)

// TestLoopingCallsLeaveSlotsToShortOnes holds every guest slot, and one
// more, with looping calls whose deadline is far away: calls of a policy
// that behaves must still run, in turn with the loops, rather than wait for
// a loop to be interrupted.
func TestLoopingCallsLeaveSlotsToShortOnes(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	loop := newWapc(t, rt, "loop")
	good := newWapc(t, rt, "labels")
	loopCtx, stopLoops := context.WithTimeout(context.Background(), time.Minute)
	defer stopLoops()
	var loops sync.WaitGroup
	loopErrs := make(chan error, rt.GuestSlots()+1)
	for range rt.GuestSlots() + 1 {
		loops.Add(1)
		go func() {
			defer loops.Done()
			_, err := loop.Call(loopCtx, nil, "validate", []byte(podRequest))
			loopErrs <- err
		}()
	}
	// Let the loops take the slots and run past the point where they count
	// as long.
	time.Sleep(100 * time.Millisecond)

	// The good calls, one after the other, bounded far below the loops'
	// deadline: waiting for a loop to end would exceed it.
	goodCtx := withTimeout(t, 20*time.Second)
	for i := range 50 {
		out, err := good.Call(goodCtx, nil, "validate", []byte(podRequest))
		if err != nil || !strings.Contains(string(out), "label env is denied") {
			t.Fatalf("good call %d while loops hold the slots: %s, %v", i, out, err)
		}
	}
	select {
	case err := <-loopErrs:
		t.Fatalf("a loop ended before the good calls were done: %v", err)
	default:
	}

	// The loops still run, and end at their deadline.
	stopLoops()
	loops.Wait()
	close(loopErrs)
	for err := range loopErrs {
		if !errors.Is(err, wasm.ErrDeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Errorf("loop ended with %v, want its interruption", err)
		}
	}
}
