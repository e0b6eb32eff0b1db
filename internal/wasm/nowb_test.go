package wasm_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/wasm"
)

// nowbGCFlags are the -gcflags of Kubewarden's cel-policy Makefile: no
// inlining, no bounds checks, no write barriers.
const nowbGCFlags = "all=-l -B -wb=false"

// nowbPayload makes the nowb policies churn 20000 steps: 27 MiB of
// allocation, about 8 collections per evaluation.
const nowbPayload = `{"request":{},"settings":{"steps":20000}}`

// nowbAnswer is the nowb policies' answer to nowbPayload on an intact heap.
const nowbAnswer = `{"accepted":true,"message":"steps 20000 live 7990 sum 114714997"}`

// compileWith compiles a test policy built with opts.
func compileWith(tb testing.TB, rt *wasm.Runtime, policy string, opts policybuild.Options) *wasm.Module {
	tb.Helper()
	b, err := os.ReadFile(policybuild.ForTestWith(tb, policy, opts))
	if err != nil {
		tb.Fatal(err)
	}
	m, err := rt.Compile(context.Background(), b)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// TestGoWithoutWriteBarriers runs Go policies built as cel-policy is,
// without write barriers, whose every evaluation allocates enough for Go's
// collector to run during it while the policy moves pointers between
// objects, and then checks every object it holds. Each evaluation, in each
// mode, on pooled (snapshot-restored) and on new instances, must find its
// heap intact.
func TestGoWithoutWriteBarriers(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	opts := policybuild.Options{GCFlags: nowbGCFlags}
	wapcMod := compileWith(t, rt, "nowb", opts)
	wasiMod := compileWith(t, rt, "wasi-nowb", opts)
	for _, m := range []*wasm.Module{wapcMod, wasiMod} {
		if env := wasm.GuestEnv(m); !slices.Equal(env, []string{"GODEBUG=gcstoptheworld=1"}) {
			t.Fatalf("instances get the environment %q, want GODEBUG=gcstoptheworld=1", env)
		}
	}
	w, err := rt.NewWapc(context.Background(), wapcMod, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	pool, err := rt.NewWASIPool(context.Background(), wasiMod, "validate", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close(context.Background()) })

	payload := []byte(nowbPayload)
	tests := []struct {
		name  string
		evals int
		eval  func(ctx context.Context) ([]byte, error)
	}{
		{"waPC, pooled instance", 12, func(ctx context.Context) ([]byte, error) {
			return w.Call(ctx, nil, "validate", payload)
		}},
		{"waPC, new instance per evaluation", 3, func(ctx context.Context) ([]byte, error) {
			w, err := rt.NewWapc(ctx, wapcMod, 1)
			if err != nil {
				return nil, err
			}
			defer w.Close(ctx)
			return w.Call(ctx, nil, "validate", payload)
		}},
		{"WASI, pooled instance", 12, func(ctx context.Context) ([]byte, error) {
			res, err := pool.Run(ctx, nil, payload)
			return res.Stdout, err
		}},
		{"WASI, new instance per evaluation", 3, func(ctx context.Context) ([]byte, error) {
			res, err := rt.RunWASI(ctx, wasiMod, nil, "validate", payload)
			return res.Stdout, err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.evals {
				out, err := tt.eval(withTimeout(t, 2*time.Minute))
				if err != nil || string(out) != nowbAnswer {
					t.Fatalf("evaluation %d: answer %s, error %v; want %s", i+1, out, err, nowbAnswer)
				}
			}
		})
	}
}

// TestGuestEnv: only Go modules built without write barriers get an
// environment.
func TestGuestEnv(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	tests := []struct {
		policy  string
		gcflags string
		want    []string
	}{
		{"nowb", nowbGCFlags, []string{"GODEBUG=gcstoptheworld=1"}},
		{"nowb", "all=-l -B", nil},
		{"counter", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.policy+" "+tt.gcflags, func(t *testing.T) {
			m := compileWith(t, rt, tt.policy, policybuild.Options{GCFlags: tt.gcflags})
			if env := wasm.GuestEnv(m); !slices.Equal(env, tt.want) {
				t.Errorf("instances get the environment %q, want %q", env, tt.want)
			}
		})
	}
}

// TestGoWithoutWriteBarriersCorruptsConcurrentGC shows that the test above
// tests something: the same WASI policy run with Go's concurrent collector,
// as Warden (and every other host) ran it before, corrupts its heap. One
// failed evaluation is enough; in practice every one fails.
func TestGoWithoutWriteBarriersCorruptsConcurrentGC(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	m := compileWith(t, rt, "wasi-nowb", policybuild.Options{GCFlags: nowbGCFlags})
	wasm.DropGuestEnv(m)
	pool, err := rt.NewWASIPool(context.Background(), m, "validate", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close(context.Background()) })
	for range 8 {
		res, err := pool.Run(withTimeout(t, 2*time.Minute), nil, []byte(nowbPayload))
		if err != nil || string(res.Stdout) != nowbAnswer {
			if err == nil && !strings.Contains(string(res.Stdout), "heap corrupted") {
				t.Fatalf("answer %s, want %s or a heap corrupted rejection", res.Stdout, nowbAnswer)
			}
			t.Logf("failed as expected: %s %v", res.Stdout, err)
			return
		}
	}
	t.Fatal("8 evaluations with the concurrent collector found their heap intact: the nowb policies no longer test write barriers")
}
