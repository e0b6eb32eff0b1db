package wasm_test

import (
	"context"
	"os"
	"testing"

	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/wasm"
)

// benchRequest is a Pod CREATE of about 1.6 KB, the body of the load tests.
func benchRequest(b *testing.B) []byte {
	review, err := os.ReadFile("../../hack/loadtest/testdata/pod-review.json")
	if err != nil {
		b.Fatal(err)
	}
	req := []byte(`{"request":`)
	start := indexOf(review, []byte(`"request":`)) + len(`"request":`)
	req = append(req, review[start:len(review)-2]...) // drop the review's closing brace
	return append(req, []byte(`,"settings":{"denied_labels":["forbidden"]}}`)...)
}

func indexOf(b, sub []byte) int {
	for i := 0; i+len(sub) <= len(b); i++ {
		if string(b[i:i+len(sub)]) == string(sub) {
			return i
		}
	}
	return -1
}

// BenchmarkWapcCall is one isolated waPC evaluation of the labels policy:
// take a pooled instance, call validate, reset the instance to its snapshot.
func BenchmarkWapcCall(b *testing.B) {
	w := newWapc(b, newRuntime(b, wasm.Config{}), "labels")
	payload := benchRequest(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := w.Call(ctx, nil, "validate", payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWapcCallParallel is the same with one caller per GOMAXPROCS.
func BenchmarkWapcCallParallel(b *testing.B) {
	w := newWapc(b, newRuntime(b, wasm.Config{}), "labels")
	payload := benchRequest(b)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := w.Call(ctx, nil, "validate", payload); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkWASIRun is one WASI evaluation of the wasi-log policy (a Go
// wasip1 command): a fresh instance, Go runtime initialisation, main.
func BenchmarkWASIRun(b *testing.B) {
	rt := newRuntime(b, wasm.Config{})
	m := compile(b, rt, "wasi-log")
	payload := benchRequest(b)
	host := &recordingHost{}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := rt.RunWASI(ctx, m, host, "validate", payload); err != nil {
			b.Fatal(err)
		}
		host.calls = host.calls[:0]
	}
}

// BenchmarkWASISnapshot compares the two ways of running one WASI evaluation
// of the wasi-log policy (a Go wasip1 command that reads the request, makes
// one host call and writes its answer): "fresh" is RunWASI, a new instance
// and Go runtime initialisation per evaluation; "pool" is a WASIPool, which
// restores an instance to the state it had when it first read stdin.
func BenchmarkWASISnapshot(b *testing.B) {
	rt := newRuntime(b, wasm.Config{})
	m := compile(b, rt, "wasi-log")
	payload := benchRequest(b)
	ctx := context.Background()
	pool, err := rt.NewWASIPool(ctx, m, "validate", 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pool.Close(ctx) })
	runs := []struct {
		name string
		run  func(host wasm.HostCaller) (wasm.WASIResult, error)
	}{
		{"fresh", func(host wasm.HostCaller) (wasm.WASIResult, error) {
			return rt.RunWASI(ctx, m, host, "validate", payload)
		}},
		{"pool", func(host wasm.HostCaller) (wasm.WASIResult, error) {
			return pool.Run(ctx, host, payload)
		}},
	}
	for _, r := range runs {
		b.Run(r.name, func(b *testing.B) {
			host := &recordingHost{}
			b.ReportAllocs()
			for b.Loop() {
				res, err := r.run(host)
				if err != nil || len(res.Stdout) == 0 {
					b.Fatalf("result %q, error %v", res.Stdout, err)
				}
				host.calls = host.calls[:0]
			}
		})
	}
}

// BenchmarkGoWithoutWriteBarriers prices the stop-the-world collection that
// Go modules built without write barriers get (gobuild.go): one waPC
// evaluation of the nowb policy, whose call allocates 27 MiB and so runs
// Go's collector about 8 times, built as cel-policy is (-gcflags
// all="-l -B -wb=false", run with GODEBUG=gcstoptheworld=1) and built the
// same way but with write barriers (all="-l -B", concurrent collection, as
// for any module).
func BenchmarkGoWithoutWriteBarriers(b *testing.B) {
	rt := newRuntime(b, wasm.Config{})
	builds := []struct {
		name    string
		gcflags string
	}{
		{"wb=false stop-the-world", nowbGCFlags},
		{"write barriers concurrent", "all=-l -B"},
	}
	payload := []byte(nowbPayload)
	for _, build := range builds {
		m := compileWith(b, rt, "nowb", policybuild.Options{GCFlags: build.gcflags})
		w, err := rt.NewWapc(context.Background(), m, 1)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { w.Close(context.Background()) })
		b.Run(build.name, func(b *testing.B) {
			for b.Loop() {
				out, err := w.Call(context.Background(), nil, "validate", payload)
				if err != nil || string(out) != nowbAnswer {
					b.Fatalf("answer %s, error %v; want %s", out, err, nowbAnswer)
				}
			}
		})
	}
}

// BenchmarkWapcTrap is one call of the trap policy, whose validate hits an
// out-of-bounds load: the cost of a guest that fails fast, its instance
// replaced or reset for the next call.
func BenchmarkWapcTrap(b *testing.B) {
	w := newWapc(b, newRuntime(b, wasm.Config{}), "trap")
	payload := benchRequest(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := w.Call(ctx, nil, "validate", payload); err == nil {
			b.Fatal("the trap policy answered")
		}
	}
}

// BenchmarkInstrument instruments the labels test policy, a 3.4 MB Go
// module, as every compilation does, from the cache too.
func BenchmarkInstrument(b *testing.B) {
	module := readPolicy(b, "labels")
	b.SetBytes(int64(len(module)))
	for b.Loop() {
		if err := wasm.Instrument(module); err != nil {
			b.Fatal(err)
		}
	}
}
