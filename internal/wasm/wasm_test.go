package wasm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
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

// withTimeout returns a context that expires after d. Go evaluates a call's
// arguments left to right, so a deadline made in the argument list starts
// before any later argument's work: compile modules first, then call with
// withTimeout, so the deadline bounds only the guest call (compiling under
// -race on a loaded machine has taken 34 s).
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
		`{"request":{},"settings":{"grow_mb":8}}`, // grows memory: kept, or replaced once grown too much
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
		m, host := compile(t, rt, "wasi-log"), &recordingHost{}
		res, err := rt.RunWASI(withTimeout(t, 10*time.Second), m, host, "validate",
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
		m, host := compile(t, rt, "wasi-javy-log"), &recordingHost{}
		res, err := rt.RunWASI(withTimeout(t, 10*time.Second), m, host, "validate", []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(res.Stdout), `"accepted":true`) || len(host.calls) != 1 || !strings.Contains(host.calls[0], "wasi-javy-log called the host") {
			t.Errorf("stdout %s, host calls %q", res.Stdout, host.calls)
		}
	})
	t.Run("non-zero exit carries stderr", func(t *testing.T) {
		m := compile(t, rt, "wasi-fail")
		_, err := rt.RunWASI(withTimeout(t, 10*time.Second), m, nil, "validate", []byte(`{}`))
		var exit *wasm.ExitError
		if !errors.As(err, &exit) || exit.Code == 0 || exit.Stderr != "something went wrong" {
			t.Errorf("error = %#v, want an ExitError with the stderr", err)
		}
	})
	t.Run("a waPC module is not a command", func(t *testing.T) {
		m := compile(t, rt, "labels")
		_, err := rt.RunWASI(withTimeout(t, 10*time.Second), m, nil, "validate", nil)
		if err == nil || !strings.Contains(err.Error(), "not a WASI command") {
			t.Errorf("error = %v", err)
		}
	})
}

func newWASIPool(t testing.TB, rt *wasm.Runtime, policy string) *wasm.WASIPool {
	t.Helper()
	p, err := rt.NewWASIPool(context.Background(), compile(t, rt, policy), "validate", 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

const wasiPodRequest = `{"request":{"kind":{"kind":"Pod"},"object":{"metadata":{"name":"p"%s}}},"settings":{}}`

// TestWASIPoolMatchesRunWASI runs each WASI test policy several times on one
// pool, alternating inputs: every run must give exactly what RunWASI gives
// (stdout, stderr, error, host calls), and the pool must have served them all
// from its first instance.
func TestWASIPoolMatchesRunWASI(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	accept := fmt.Sprintf(wasiPodRequest, "")
	reject := fmt.Sprintf(wasiPodRequest, `,"labels":{"reject":"true"}`)
	tests := []struct {
		policy string
		inputs []string
		want   string // in the stdout of the first input
	}{
		{"wasi-log", []string{accept, reject}, `"accepted":true`},
		{"wasi-javy-log", []string{`{}`, accept}, `"accepted":true`},
		{"wasi-garbage", []string{accept}, "this is not json"},
		{"wasi-fail", []string{accept, `{}`}, ""},
	}
	type run struct {
		res   wasm.WASIResult
		err   string
		calls []string
	}
	do := func(f func(host wasm.HostCaller) (wasm.WASIResult, error)) run {
		host := &recordingHost{}
		res, err := f(host)
		r := run{res: res, calls: host.calls}
		if err != nil {
			r.err = err.Error()
		}
		return r
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			m := compile(t, rt, tt.policy)
			p := newWASIPool(t, rt, tt.policy)
			var want []run
			for _, in := range tt.inputs {
				want = append(want, do(func(host wasm.HostCaller) (wasm.WASIResult, error) {
					return rt.RunWASI(withTimeout(t, 10*time.Second), m, host, "validate", []byte(in))
				}))
			}
			if !strings.Contains(string(want[0].res.Stdout), tt.want) {
				t.Fatalf("RunWASI stdout = %q, want it to contain %q", want[0].res.Stdout, tt.want)
			}
			for round := 0; round < 3; round++ {
				for i, in := range tt.inputs {
					got := do(func(host wasm.HostCaller) (wasm.WASIResult, error) {
						return p.Run(withTimeout(t, 10*time.Second), host, []byte(in))
					})
					if !reflect.DeepEqual(got, want[i]) {
						t.Errorf("round %d, input %d: pool gave %+v, RunWASI %+v", round, i, got, want[i])
					}
				}
			}
			if created, _, fresh := wasm.WASIPoolStats(p); created != 1 || fresh {
				t.Errorf("the pool created %d instances (fresh %v), want 1 reused", created, fresh)
			}
		})
	}
}

// TestWASIPoolIsolation checks that no state survives from one request to
// the next: the wasi-counter policy counts its calls in a package variable
// and must always see itself on its first call; it writes a line on stderr
// at start-up, which every request must get; its random value must differ
// between requests.
func TestWASIPoolIsolation(t *testing.T) {
	p := newWASIPool(t, newRuntime(t, wasm.Config{}), "wasi-counter")
	payloads := []string{
		`{"request":{},"settings":{}}`,
		`{"request":{},"settings":{"grow_mb":8}}`, // grows memory: the instance is replaced
		`{"request":{},"settings":{}}`,
	}
	const rounds = 3
	seen := map[string]bool{}
	check := func(out wasm.WASIResult, err error) error {
		if err != nil {
			return err
		}
		msg := string(out.Stdout)
		i := strings.Index(msg, "random ")
		if !strings.Contains(msg, `"call 1 random `) || i < 0 || out.Stderr != "wasi-counter ready" {
			return fmt.Errorf("state leaked between requests: stdout %s, stderr %q", out.Stdout, out.Stderr)
		}
		if seen[msg[i:]] {
			return fmt.Errorf("random value repeated: %s", out.Stdout)
		}
		seen[msg[i:]] = true
		return nil
	}
	for round := 0; round < rounds; round++ {
		for _, payload := range payloads {
			if err := check(p.Run(withTimeout(t, 10*time.Second), nil, []byte(payload))); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	if created, _, _ := wasm.WASIPoolStats(p); created != 1+rounds {
		t.Errorf("the pool created %d instances, want %d: one, and one more after each memory growth", created, 1+rounds)
	}
	// Concurrent requests each get an instance of their own.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				out, err := p.Run(withTimeout(t, 10*time.Second), nil, []byte(payloads[0]))
				mu.Lock()
				err = check(out, err)
				mu.Unlock()
				if err != nil {
					t.Errorf("concurrent request: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestWASIPoolFailures checks that a request that fails leaves the pool
// usable: an exit with a non-zero code keeps the instance; a deadline, a
// trap or a closed file descriptor discards it.
func TestWASIPoolFailures(t *testing.T) {
	p := newWASIPool(t, newRuntime(t, wasm.Config{}), "wasi-counter")
	ok := func(t *testing.T) {
		t.Helper()
		out, err := p.Run(withTimeout(t, 10*time.Second), nil, []byte(`{"request":{},"settings":{}}`))
		if err != nil || !strings.Contains(string(out.Stdout), `"call 1 random `) {
			t.Fatalf("plain request: stdout %s, error %v", out.Stdout, err)
		}
	}
	tests := []struct {
		name     string
		settings string
		timeout  time.Duration
		check    func(t *testing.T, err error)
		replaced int // instances created by the two failures and the request after them
	}{
		{"exit 1", `{"fail":true}`, 10 * time.Second, func(t *testing.T, err error) {
			var exit *wasm.ExitError
			if !errors.As(err, &exit) || exit.Code != 1 || exit.Stderr != "wasi-counter readyfailed at call 1" {
				t.Errorf("error = %#v, want an ExitError with the stderr", err)
			}
		}, 0},
		{"deadline", `{"loop":true}`, 200 * time.Millisecond, func(t *testing.T, err error) {
			if !errors.Is(err, wasm.ErrDeadlineExceeded) {
				t.Errorf("error = %v, want ErrDeadlineExceeded", err)
			}
		}, 2},
		{"closed stdout", `{"close_stdout":true}`, 10 * time.Second, func(t *testing.T, err error) {
			// The descriptor table is not part of the snapshot: the
			// instance must not serve another request.
			var exit *wasm.ExitError
			if !errors.As(err, &exit) || exit.Code != 1 || !strings.Contains(exit.Stderr, "writing the response") {
				t.Errorf("error = %#v, want an ExitError for the failed write", err)
			}
		}, 2},
		{"trap", `{"trap":true}`, 10 * time.Second, func(t *testing.T, err error) {
			var trap *wasm.TrapError
			if !errors.As(err, &trap) || !strings.Contains(err.Error(), "out of bounds memory access") {
				t.Errorf("error = %v, want an out of bounds TrapError", err)
			}
		}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok(t) // an instance waits in the snapshot state
			before, _, _ := wasm.WASIPoolStats(p)
			for i := 0; i < 2; i++ { // the second fails the same way, on a new instance or the same
				// A guest that loops holds its P until the interrupt flag
				// stops it, and a garbage collection that needs every P to
				// reach a safe point meanwhile also stops the timer that
				// would set the flag: start from a finished collection.
				runtime.GC()
				_, err := p.Run(withTimeout(t, tt.timeout), nil, []byte(`{"request":{},"settings":`+tt.settings+`}`))
				tt.check(t, err)
			}
			ok(t)
			after, _, fresh := wasm.WASIPoolStats(p)
			if after-before != tt.replaced || fresh {
				t.Errorf("the pool created %d instances (fresh %v), want %d", after-before, fresh, tt.replaced)
			}
		})
	}
}

// TestWASIPoolFallback checks the modules a pool cannot snapshot: one that
// never reads stdin runs in a fresh instance per request, and a waPC module
// is refused.
func TestWASIPoolFallback(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	p := newWASIPool(t, rt, "wasi-nostdin")
	for i := 0; i < 3; i++ {
		out, err := p.Run(withTimeout(t, 10*time.Second), nil, []byte(`{}`))
		if err != nil || string(out.Stdout) != `{"accepted":true}` {
			t.Fatalf("run %d: stdout %s, error %v", i, out.Stdout, err)
		}
	}
	if created, idle, fresh := wasm.WASIPoolStats(p); created != 1 || idle != 0 || !fresh {
		t.Errorf("created %d, idle %d, fresh %v: want the first instance only, then fresh instances", created, idle, fresh)
	}
	_, err := rt.NewWASIPool(context.Background(), compile(t, rt, "labels"), "validate", 1)
	if err == nil || !strings.Contains(err.Error(), "not a WASI command") {
		t.Errorf("waPC module: error = %v", err)
	}
}

// TestWASIPoolClose checks that Close ends the goroutines of the instances
// and that requests after Close still run, without leaving any behind.
func TestWASIPoolClose(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	m := compile(t, rt, "wasi-log")
	settle := func(want int) int {
		n := runtime.NumGoroutine()
		for deadline := time.Now().Add(10 * time.Second); n > want && time.Now().Before(deadline); n = runtime.NumGoroutine() {
			time.Sleep(10 * time.Millisecond)
		}
		return n
	}
	baseline := runtime.NumGoroutine()
	p, err := rt.NewWASIPool(context.Background(), m, "validate", 4)
	if err != nil {
		t.Fatal(err)
	}
	run := func() {
		t.Helper()
		out, err := p.Run(withTimeout(t, 10*time.Second), &recordingHost{}, []byte(fmt.Sprintf(wasiPodRequest, "")))
		if err != nil || !strings.Contains(string(out.Stdout), `"accepted":true`) {
			t.Fatalf("stdout %s, error %v", out.Stdout, err)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	wg.Wait()
	if _, idle, _ := wasm.WASIPoolStats(p); idle == 0 || runtime.NumGoroutine() <= baseline {
		t.Fatalf("%d instances idle, %d goroutines for %d before: want parked instances", idle, runtime.NumGoroutine(), baseline)
	}
	p.Close(context.Background())
	if n := settle(baseline); n > baseline {
		t.Errorf("%d goroutines after Close, want %d", n, baseline)
	}
	run()
	if created, idle, _ := wasm.WASIPoolStats(p); idle != 0 || settle(baseline) > baseline {
		t.Errorf("after Close: %d created, %d idle, %d goroutines for %d", created, idle, runtime.NumGoroutine(), baseline)
	}
}

// TestReleaseFreesModules checks the reference counting that lets a policy
// server swap policies forever: a module lives while any Compile of its
// bytes is not released, instances are counted until closed, and a freed
// module compiles again.
func TestReleaseFreesModules(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	a, b := compile(t, rt, "labels"), compile(t, rt, "labels")
	if a != b || rt.CompiledModules() != 1 {
		t.Fatalf("two compilations of the same bytes: same module %v, %d compiled; want one shared", a == b, rt.CompiledModules())
	}
	for _, policy := range []string{"labels", "wasi-log"} {
		m := compile(t, rt, policy)
		if policy == "labels" {
			w, err := rt.NewWapc(context.Background(), m, 2)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Call(withTimeout(t, 10*time.Second), nil, "validate", []byte(podRequest)); err != nil {
				t.Fatal(err)
			}
			if rt.LiveInstances() == 0 {
				t.Error("a waPC pool with an idle instance counts no instance")
			}
			w.Close(context.Background())
		} else {
			p, err := rt.NewWASIPool(context.Background(), m, "validate", 2)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Run(withTimeout(t, 10*time.Second), &recordingHost{}, []byte(fmt.Sprintf(wasiPodRequest, ""))); err != nil {
				t.Fatal(err)
			}
			p.Close(context.Background())
		}
		rt.Release(context.Background(), m)
	}
	if n := rt.LiveInstances(); n != 0 {
		t.Errorf("%d instances live after their pools closed", n)
	}
	rt.Release(context.Background(), a)
	if rt.CompiledModules() != 1 {
		t.Errorf("%d modules compiled after releasing one of two references, want 1", rt.CompiledModules())
	}
	rt.Release(context.Background(), b)
	rt.Release(context.Background(), b) // one too many: ignored
	if rt.CompiledModules() != 0 {
		t.Errorf("%d modules compiled after releasing every reference, want 0", rt.CompiledModules())
	}
	w := newWapc(t, rt, "labels")
	if out, err := w.Call(withTimeout(t, 10*time.Second), nil, "validate", []byte(podRequest)); err != nil || !strings.Contains(string(out), `"accepted":false`) {
		t.Errorf("a module compiled again after being freed answers %s, %v", out, err)
	}
}
