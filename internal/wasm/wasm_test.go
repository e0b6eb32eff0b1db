package wasm_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/wasm"
)

func newRuntime(t testing.TB, cfg wasm.Config) *wasm.Runtime {
	t.Helper()
	rt, err := wasm.NewRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

func compile(t testing.TB, rt *wasm.Runtime, policy string) *wasm.Module {
	t.Helper()
	b, err := os.ReadFile(policybuild.ForTest(t, policy))
	if err != nil {
		t.Fatal(err)
	}
	m, err := rt.Compile(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newWapc(t testing.TB, rt *wasm.Runtime, policy string) *wasm.Wapc {
	t.Helper()
	w, err := rt.NewWapc(context.Background(), compile(t, rt, policy), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

// recordingHost answers host calls and remembers them.
type recordingHost struct {
	mu    sync.Mutex
	calls []string
}

func (h *recordingHost) HostCall(_ context.Context, binding, ns, op string, payload []byte) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, binding+"/"+ns+"/"+op+" "+string(payload))
	if ns == "tracing" {
		return nil, nil
	}
	return nil, errors.New("not granted")
}

func withTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

const podRequest = `{"request":{"uid":"1","operation":"CREATE","object":{"metadata":{"name":"p","labels":{"env":"prod"}}}},"settings":{"denied_labels":["env"]}}`

func TestCompileRefusesWhatIsNotWasm(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	_, err := rt.Compile(context.Background(), []byte("#!/bin/sh\necho not wasm\n"))
	if err == nil || !errors.Is(err, wasm.ErrNotWasm) {
		t.Fatalf("error = %v, want ErrNotWasm", err)
	}
}

func TestCompileOncePerDigest(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	b, err := os.ReadFile(policybuild.ForTest(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	mods := make([]*wasm.Module, 4)
	for i := range mods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := rt.Compile(context.Background(), b)
			if err != nil {
				t.Error(err)
			}
			mods[i] = m
		}()
	}
	wg.Wait()
	for _, m := range mods[1:] {
		if m != mods[0] {
			t.Fatal("the same bytes were compiled more than once")
		}
	}
}

func TestWapcValidate(t *testing.T) {
	w := newWapc(t, newRuntime(t, wasm.Config{}), "labels")
	tests := []struct {
		name, op, payload, want string
	}{
		{"reject denied label", "validate", podRequest, `"label env is denied"`},
		{"accept", "validate", strings.Replace(podRequest, `"env"]`, `"team"]`, 1), `"accepted":true`},
		{"settings valid", "validate_settings", `{"denied_labels":["a"]}`, `"valid":true`},
		{"settings invalid", "validate_settings", `{"denied_labels":"a"}`, `denied_labels must be a list of strings`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := w.Call(withTimeout(t, 10*time.Second), nil, tt.op, []byte(tt.payload))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("got %s, want it to contain %s", out, tt.want)
			}
		})
	}
	_, err := w.Call(withTimeout(t, 10*time.Second), nil, "no_such_op", nil)
	var gce *wasm.GuestCallError
	if !errors.As(err, &gce) || !strings.HasPrefix(err.Error(), "Guest call failure: ") {
		t.Errorf("unknown operation: error = %v, want a GuestCallError", err)
	}
}

// TestWapcIsolation checks that no state survives from one call to the next:
// the counter policy counts its calls in a package variable and grows its
// heap on request, and must always see itself on its first call.
func TestWapcIsolation(t *testing.T) {
	w := newWapc(t, newRuntime(t, wasm.Config{}), "counter")
	payloads := []string{
		`{"request":{},"settings":{}}`,
		`{"request":{},"settings":{"grow_mb":8}}`, // grows memory: the instance is replaced
		`{"request":{},"settings":{}}`,
	}
	for round := 0; round < 3; round++ {
		for _, p := range payloads {
			out, err := w.Call(withTimeout(t, 10*time.Second), nil, "validate", []byte(p))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), `"call 1"`) {
				t.Fatalf("round %d: state leaked between calls: %s", round, out)
			}
		}
	}
	// Concurrent calls each get their own instance.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				out, err := w.Call(withTimeout(t, 10*time.Second), nil, "validate", []byte(payloads[0]))
				if err != nil || !strings.Contains(string(out), `"call 1"`) {
					t.Errorf("concurrent call: %s, %v", out, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestWapcFailuresLeaveThePolicyUsable(t *testing.T) {
	rt := newRuntime(t, wasm.Config{MemoryLimitBytes: 64 << 20})
	tests := []struct {
		policy  string
		timeout time.Duration
		check   func(t *testing.T, err error)
	}{
		{"trap", 10 * time.Second, func(t *testing.T, err error) {
			var gce *wasm.GuestCallError
			if !errors.As(err, &gce) {
				t.Errorf("error = %v, want a GuestCallError", err)
			}
		}},
		{"loop", 200 * time.Millisecond, func(t *testing.T, err error) {
			if !errors.Is(err, wasm.ErrDeadlineExceeded) {
				t.Errorf("error = %v, want ErrDeadlineExceeded", err)
			}
		}},
		{"oom", 10 * time.Second, func(t *testing.T, err error) {
			if err == nil || !strings.Contains(err.Error(), "out of memory") {
				t.Errorf("error = %v, want an out of memory failure", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			w := newWapc(t, rt, tt.policy)
			for i := 0; i < 2; i++ { // the second call must fail the same way, not worse
				_, err := w.Call(withTimeout(t, tt.timeout), nil, "validate", []byte(podRequest))
				tt.check(t, err)
			}
			out, err := w.Call(withTimeout(t, 10*time.Second), nil, "validate_settings", []byte(`{}`))
			if err != nil || !strings.Contains(string(out), `"valid":true`) {
				t.Errorf("after the failures, validate_settings = %s, %v", out, err)
			}
		})
	}
}

func TestWapcGarbageIsReturnedAsIs(t *testing.T) {
	w := newWapc(t, newRuntime(t, wasm.Config{}), "garbage")
	out, err := w.Call(withTimeout(t, 10*time.Second), nil, "validate", []byte(podRequest))
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "this is not json" {
		t.Errorf("got %q", out)
	}
}

func TestRunWASI(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	t.Run("host.call log and accept", func(t *testing.T) {
		host := &recordingHost{}
		res, err := rt.RunWASI(withTimeout(t, 10*time.Second), compile(t, rt, "wasi-log"), host, "validate",
			[]byte(`{"request":{"kind":{"kind":"Pod"},"object":{"metadata":{"name":"p"}}},"settings":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(res.Stdout), `"accepted":true`) {
			t.Errorf("stdout = %s", res.Stdout)
		}
		if len(host.calls) != 1 || !strings.HasPrefix(host.calls[0], "kubewarden/tracing/log ") || !strings.Contains(host.calls[0], "wasi-log evaluated") {
			t.Errorf("host calls = %q", host.calls)
		}
	})
	t.Run("kubewarden:javy/host call", func(t *testing.T) {
		host := &recordingHost{}
		res, err := rt.RunWASI(withTimeout(t, 10*time.Second), compile(t, rt, "wasi-javy-log"), host, "validate", []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(res.Stdout), `"accepted":true`) || len(host.calls) != 1 || !strings.Contains(host.calls[0], "wasi-javy-log called the host") {
			t.Errorf("stdout %s, host calls %q", res.Stdout, host.calls)
		}
	})
	t.Run("non-zero exit carries stderr", func(t *testing.T) {
		_, err := rt.RunWASI(withTimeout(t, 10*time.Second), compile(t, rt, "wasi-fail"), nil, "validate", []byte(`{}`))
		var exit *wasm.ExitError
		if !errors.As(err, &exit) || exit.Code == 0 || exit.Stderr != "something went wrong" {
			t.Errorf("error = %#v, want an ExitError with the stderr", err)
		}
	})
	t.Run("a waPC module is not a command", func(t *testing.T) {
		_, err := rt.RunWASI(withTimeout(t, 10*time.Second), compile(t, rt, "labels"), nil, "validate", nil)
		if err == nil || !strings.Contains(err.Error(), "not a WASI command") {
			t.Errorf("error = %v", err)
		}
	})
}
