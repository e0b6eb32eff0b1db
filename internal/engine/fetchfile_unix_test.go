//go:build unix

package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFetchFileRefusesWhatIsNotAModuleFile checks that file:// modules are
// read as downloads are: regular files of at most 256 MiB.
func TestFetchFileRefusesWhatIsNotAModuleFile(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.wasm")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxModuleSize + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	_ = f.Close()
	tests := []struct {
		name, path, wantErr string
	}{
		{name: "a character device", path: "/dev/null", wantErr: "/dev/null is a character device: a module must be a regular file"},
		{name: "a directory", path: dir, wantErr: "is a directory: a module must be a regular file"},
		{name: "larger than downloads may be", path: big, wantErr: "is 268435457 bytes, more than the 268435456 limit"},
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests = append(tests, struct{ name, path, wantErr string }{name: "a named pipe", path: fifo, wantErr: "is a named pipe"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			type result struct {
				b   []byte
				err error
			}
			done := make(chan result, 1)
			go func() {
				b, err := FetchFile(context.Background(), "file://"+tt.path)
				done <- result{b, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(time.Minute): // not a timing assertion: a guard against a hang
				if w, err := os.OpenFile(tt.path, os.O_WRONLY, 0); err == nil {
					_ = w.Close() // lets a read of the named pipe end
				}
				t.Fatal("FetchFile blocked")
			}
			if r.err == nil || !strings.Contains(r.err.Error(), tt.wantErr) {
				t.Fatalf("FetchFile = %d bytes, %v; want an error containing %q", len(r.b), r.err, tt.wantErr)
			}
		})
	}
}
