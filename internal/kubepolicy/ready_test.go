package kubepolicy

import (
	"testing"

	"k8s.io/apiserver/pkg/admission"
)

// TestReadyFuncReadsTheHandlersReadiness pins what readyFunc assumes of
// admission.Handler: without it, every policy's start falls back to
// WaitForReady and sleeps 100 ms or more (BenchmarkLoadVAP).
func TestReadyFuncReadsTheHandlersReadiness(t *testing.T) {
	h := admission.NewHandler(admission.Create)
	if f := readyFunc(h); f != nil {
		t.Errorf("a handler without a readiness gave one")
	}
	calls := 0
	h.SetReadyFunc(func() bool { calls++; return calls > 1 })
	f := readyFunc(h)
	if f == nil {
		t.Fatal("readyFunc does not find the readiness SetReadyFunc set: admission.Handler changed")
	}
	if f() || !f() || calls != 2 {
		t.Errorf("the readiness read is not the one set (%d calls)", calls)
	}
}
