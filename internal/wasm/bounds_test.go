package wasm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/wasm"
)

// hostileRequest is a ValidationRequest for the hostile test policy with
// the given settings.
func hostileRequest(settings string) []byte {
	return []byte(`{"request":{"uid":"1","operation":"CREATE"},"settings":` + settings + `}`)
}

func TestHostCallPayloadCap(t *testing.T) {
	rt := newRuntime(t, wasm.Config{MaxHostCallBytes: 64 << 10})
	w := newWapc(t, rt, "hostile")
	tests := []struct {
		name     string
		settings string
		want     string // in the guest's answer
		reached  bool   // the host saw the call
	}{
		{"under the cap", `{"log_bytes": 1000}`, "log: ok", true},
		{"over the cap", `{"log_bytes": 1048576}`, "is over the limit of 65536 bytes per host call (--max-host-call-payload-bytes)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := &recordingHost{}
			out, err := w.Call(withTimeout(t, time.Minute), host, "validate", hostileRequest(tt.settings))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("answer = %.300s, want it to contain %q", out, tt.want)
			}
			if reached := len(host.calls) > 0; reached != tt.reached {
				t.Errorf("host reached = %v, want %v", reached, tt.reached)
			}
		})
	}
}

// stuckHost answers every host call only once release is closed, whatever
// the call's context says: a host that does not honour deadlines.
type stuckHost struct{ release chan struct{} }

func (h stuckHost) HostCall(context.Context, string, string, string, []byte) ([]byte, error) {
	<-h.release
	return []byte(`{}`), nil
}

func TestHostCallOutlivingTheDeadlineEndsTheCall(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	w := newWapc(t, rt, "hostile")
	host := stuckHost{release: make(chan struct{})}
	t.Cleanup(func() { close(host.release) })
	req := hostileRequest(`{"host_call": {"namespace": "net", "operation": "v1/dns_lookup_host", "payload": "example.com"}}`)
	errc := make(chan error, 1)
	go func() {
		_, err := w.Call(withTimeout(t, 200*time.Millisecond), host, "validate", req)
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, wasm.ErrDeadlineExceeded) {
			t.Fatalf("error = %v, want ErrDeadlineExceeded", err)
		}
	case <-time.After(time.Minute): // bounds the test only: the host never answers
		t.Fatal("the call waited for a host call past its deadline")
	}
}

func TestGuestResponseCap(t *testing.T) {
	rt := newRuntime(t, wasm.Config{MaxResponseBytes: 1 << 20})
	w := newWapc(t, rt, "hostile")
	out, err := w.Call(withTimeout(t, time.Minute), &recordingHost{}, "validate", hostileRequest(`{"response_bytes": 1000}`))
	if err != nil || len(out) < 1000 {
		t.Fatalf("under the cap: %d bytes, error %v", len(out), err)
	}
	_, err = w.Call(withTimeout(t, time.Minute), &recordingHost{}, "validate", hostileRequest(`{"response_bytes": 2097152}`))
	var tooLarge *wasm.ResponseTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Limit != 1<<20 {
		t.Fatalf("over the cap: error = %v, want a *ResponseTooLargeError with limit 1048576", err)
	}
	if !strings.Contains(err.Error(), "1048576") {
		t.Errorf("error %q does not name the cap", err)
	}
}

// bigHost answers every host call with size bytes of "x", as a JSON string.
type bigHost struct{ size int }

func (h bigHost) HostCall(context.Context, string, string, string, []byte) ([]byte, error) {
	return []byte(`"` + strings.Repeat("x", h.size) + `"`), nil
}

// TestWASIStdoutCap checks the cap on answers for WASI commands, whose
// answer is their stdout: the host-call policy writes the host's 2 MiB
// answer back, over a 1 MiB cap, in a fresh instance and in a pool.
func TestWASIStdoutCap(t *testing.T) {
	rt := newRuntime(t, wasm.Config{MaxResponseBytes: 1 << 20})
	m := compile(t, rt, "host-call")
	pool := newWASIPool(t, rt, "host-call")
	input := []byte(`{"request":{},"settings":{"calls":[{"namespace":"net","operation":"v1/dns_lookup_host","payload":"example.com"}]}}`)
	runs := map[string]func(host wasm.HostCaller) error{
		"fresh instance": func(host wasm.HostCaller) error {
			_, err := rt.RunWASI(withTimeout(t, time.Minute), m, host, "validate", input)
			return err
		},
		"pool": func(host wasm.HostCaller) error {
			_, err := pool.Run(withTimeout(t, time.Minute), host, input)
			return err
		},
	}
	for name, run := range runs {
		t.Run(name, func(t *testing.T) {
			if err := run(bigHost{size: 1000}); err != nil {
				t.Fatalf("under the cap: %v", err)
			}
			err := run(bigHost{size: 2 << 20})
			var tooLarge *wasm.ResponseTooLargeError
			if !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "over the limit of 1048576 bytes per response") {
				t.Fatalf("over the cap: error = %v, want a *ResponseTooLargeError naming the cap", err)
			}
		})
	}
}
