package wasm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/wasm"
)

// TestWapcKeepsGrownInstances: an instance whose memory a call grew by a
// few MiB (a large host-call answer) is put back in the snapshot state and
// kept; one grown far beyond keepGrown's bound is closed. Either way the
// next call sees nothing of the one before.
func TestWapcKeepsGrownInstances(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	w := newWapc(t, rt, "counter")
	tests := []struct {
		name    string
		payload string
		live    int64 // instances alive after the call: the idle one, or none
	}{
		{"grown by 2 MiB", `{"request":{},"settings":{"grow_mb":2}}`, 1},
		{"not grown", `{"request":{},"settings":{}}`, 1},
		{"grown by 2 MiB again", `{"request":{},"settings":{"grow_mb":2}}`, 1},
		{"grown by 18 MiB, as a Go guest by a 1 MB answer", `{"request":{},"settings":{"grow_mb":18}}`, 1},
		{"grown by 128 MiB", `{"request":{},"settings":{"grow_mb":128}}`, 0},
		{"on a new instance", `{"request":{},"settings":{"grow_mb":2}}`, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := w.Call(withTimeout(t, 10*time.Second), nil, "validate", []byte(tt.payload))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), `"call 1"`) {
				t.Errorf("state leaked between calls: %s", out)
			}
			if n := rt.LiveInstances(); n != tt.live {
				t.Errorf("%d live instances after the call, want %d", n, tt.live)
			}
		})
	}
}

// TestWapcKeepsInstancesAfterAFailedCall: an instance whose call trapped,
// or was interrupted at its deadline, is put back in the snapshot state and
// kept rather than replaced (instantiation costs about seventy calls), and
// the next call sees nothing of the failed one.
func TestWapcKeepsInstancesAfterAFailedCall(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	w := newWapc(t, rt, "counter")
	tests := []struct {
		name     string
		payload  string
		deadline time.Duration
	}{
		{"a trap", `{"request":{},"settings":{"fail":"trap"}}`, 10 * time.Second},
		{"a trap after growing the memory", `{"request":{},"settings":{"grow_mb":2,"fail":"trap"}}`, 10 * time.Second},
		{"a loop interrupted", `{"request":{},"settings":{"fail":"loop"}}`, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := w.Call(withTimeout(t, tt.deadline), nil, "validate", []byte(tt.payload)); err == nil {
				t.Fatal("the failing call answered")
			}
			if n := rt.LiveInstances(); n != 1 {
				t.Errorf("%d live instances after the failed call, want the one kept", n)
			}
			out, err := w.Call(withTimeout(t, 10*time.Second), nil, "validate", []byte(`{"request":{},"settings":{}}`))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), `"call 1"`) {
				t.Errorf("state leaked from the failed call: %s", out)
			}
		})
	}
}
