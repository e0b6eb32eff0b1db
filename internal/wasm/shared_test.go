package wasm_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/pkitest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/sharedcache"
	"github.com/wardenhq/warden/internal/wasm"
)

// replicaStore opens the shared cache at dir as a replica would: a
// code-signing certificate of its own, issued by ca.
func replicaStore(t *testing.T, ca *pkitest.CA, dir string) *sharedcache.Store {
	t.Helper()
	keys := t.TempDir()
	cert, key := ca.CodeSigning(t, "policy-server cache").WriteFiles(t, keys, "")
	st, err := sharedcache.Open(sharedcache.Options{Dir: dir, Version: "v-test", CertFile: cert, KeyFile: key, CAFile: ca.WriteCA(t, keys)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// privateFiles lists the files of wazero's cache in a runtime's CacheDir.
func privateFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	matches, _ := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, m)
		files[filepath.ToSlash(rel)] = b
	}
	return files
}

func TestSharedCache(t *testing.T) {
	skipUnderRace(t)
	module, err := os.ReadFile(policybuild.ForTest(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(module)
	digest := hex.EncodeToString(sum[:])
	ca := pkitest.NewCA(t, "warden-ca")
	shared := t.TempDir()

	// The leader compiles and stores the code, signed.
	leaderDir := t.TempDir()
	leader := newRuntime(t, wasm.Config{CacheDir: leaderDir, Shared: replicaStore(t, ca, shared)})
	if _, err := leader.Compile(context.Background(), module); err != nil {
		t.Fatal(err)
	}
	compiled := privateFiles(t, leaderDir)
	if len(compiled) != 1 {
		t.Fatalf("the leader's private cache holds %d files, want 1", len(compiled))
	}
	store := replicaStore(t, ca, shared)
	blobs, errs := store.Get(digest)
	if len(blobs) != 1 || len(errs) != 0 || string(blobs[0].Data) != string(compiled[blobs[0].Name]) {
		t.Fatalf("shared cache after the leader's compilation: %d blobs, %v; want the leader's code", len(blobs), errs)
	}

	// A replica with an empty private cache takes the code from the shared
	// cache: its private cache ends up with exactly the leader's file, and
	// the module runs.
	replicaDir := t.TempDir()
	var logs logtest.Buffer
	replica := newRuntime(t, wasm.Config{CacheDir: replicaDir, Shared: replicaStore(t, ca, shared),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	w := newWapcOf(t, replica, module)
	assertValidates(t, w)
	if got := privateFiles(t, replicaDir); len(got) != 1 || string(got[blobs[0].Name]) != string(blobs[0].Data) {
		t.Errorf("the replica's private cache holds %d files; want only the shared blob", len(got))
	}
	if !strings.Contains(logs.String(), "copied from the shared cache") || strings.Contains(logs.String(), "stored in the shared cache") {
		t.Errorf("the replica compiled the module itself; its log:\n%s", logs.String())
	}

	// A tampered blob is refused (and removed), the module compiled again,
	// and good code stored in its place.
	path := filepath.Join(store.Dir(), digest, filepath.FromSlash(blobs[0].Name))
	tampered := append([]byte(nil), blobs[0].Data...)
	tampered[len(tampered)/2] ^= 0xff
	if err := os.WriteFile(path, tampered, 0o644); err != nil {
		t.Fatal(err)
	}
	freshStore := replicaStore(t, ca, shared)
	freshDir := t.TempDir()
	fresh := newRuntime(t, wasm.Config{CacheDir: freshDir, Shared: freshStore})
	assertValidates(t, newWapcOf(t, fresh, module))
	if freshStore.Refused() != 1 {
		t.Errorf("refused %d blobs, want the tampered one", freshStore.Refused())
	}
	if got := privateFiles(t, freshDir); string(got[blobs[0].Name]) == string(tampered) {
		t.Error("the tampered blob reached the private cache")
	}
	rebuilt, errs := store.Get(digest)
	if len(rebuilt) != 1 || len(errs) != 0 || string(rebuilt[0].Data) == string(tampered) {
		t.Fatalf("after the refusal the shared cache holds %d blobs (%v); want good code again", len(rebuilt), errs)
	}

	// A replica that compiled the module before, into a private cache it
	// keeps across restarts, stores it again when the shared blob is gone.
	if err := os.RemoveAll(filepath.Join(store.Dir(), digest)); err != nil {
		t.Fatal(err)
	}
	restarted := newRuntime(t, wasm.Config{CacheDir: freshDir, Shared: replicaStore(t, ca, shared)})
	if _, err := restarted.Compile(context.Background(), module); err != nil {
		t.Fatal(err)
	}
	if again, errs := store.Get(digest); len(again) != 1 || len(errs) != 0 {
		t.Errorf("a module compiled from the private cache was not stored again: %d blobs, %v", len(again), errs)
	}
}

func TestSharedCacheNeedsACacheDir(t *testing.T) {
	st := replicaStore(t, pkitest.NewCA(t, "warden-ca"), t.TempDir())
	if _, err := wasm.NewRuntime(context.Background(), wasm.Config{Shared: st}); err == nil || !strings.Contains(err.Error(), "cache directory") {
		t.Fatalf("NewRuntime = %v, want an error about the cache directory", err)
	}
}

func newWapcOf(t *testing.T, rt *wasm.Runtime, module []byte) *wasm.Wapc {
	t.Helper()
	m, err := rt.Compile(context.Background(), module)
	if err != nil {
		t.Fatal(err)
	}
	w, err := rt.NewWapc(context.Background(), m, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

func assertValidates(t *testing.T, w *wasm.Wapc) {
	t.Helper()
	out, err := w.Call(withTimeout(t, 10*time.Second), nil, "validate", []byte(podRequest))
	if err != nil || !strings.Contains(string(out), "label env is denied") {
		t.Fatalf("validate = %s, %v; want the label denied", out, err)
	}
}
