package policyfetch

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
)

// A registry pull reports its layer's bytes as they arrive, up to the
// layer's size; the module's manifest is not reported.
func TestFetchReportsProgress(t *testing.T) {
	reg := startRegistry(t, registryOptions{})
	pusher := newFetcher(t, insecure(reg.host), "")
	module := wasm(string(bytes.Repeat([]byte("x"), 200_000)))
	push(t, pusher, "registry://"+reg.host+"/policies/big:v1", module)

	var calls []int64
	var total int64
	f, err := New(Options{
		StoreDir: t.TempDir(), Sources: insecure(reg.host),
		DockerConfigPath: filepath.Join(t.TempDir(), "none.json"),
		Progress: func(done, size int64) {
			calls = append(calls, done)
			total = size
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Fetch(context.Background(), "registry://"+reg.host+"/policies/big:v1"); err != nil {
		t.Fatal(err)
	}
	if len(calls) == 0 {
		t.Fatal("no progress reported")
	}
	if total != int64(len(module)) || calls[len(calls)-1] != total {
		t.Errorf("last report %d of %d, want %d of %d", calls[len(calls)-1], total, len(module), len(module))
	}
	for i := 1; i < len(calls); i++ {
		if calls[i] < calls[i-1] {
			t.Fatalf("progress went back: %v", calls)
		}
	}
}
