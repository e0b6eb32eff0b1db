package policyfetch

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 4095, 4096, 1 << 20} {
		want := bytes.Repeat([]byte{'w'}, size)
		path := filepath.Join(dir, "m.wasm")
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(path)
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: read %d bytes, not the file's", size, len(got))
		}
	}
	if _, err := ReadFile(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("reading a directory: %v, want an error that names it", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.wasm")); !os.IsNotExist(err) {
		t.Errorf("reading a missing file: %v, want a not-exist error", err)
	}
}

// TestReadFileAllocatesItsSizeOnce checks that a module is read into one
// buffer of its size: a large module read with io.ReadAll allocated about
// twice its size while the buffer doubled.
func TestReadFileAllocatesItsSizeOnce(t *testing.T) {
	const size = 32 << 20
	path := filepath.Join(t.TempDir(), "big.wasm")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	data, err := ReadFile(path)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > size+size/8 {
		t.Errorf("reading a %d-byte module allocated %d bytes", len(data), got)
	}
}
