//go:build unix

package policyfetch

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFetchFileRefusesWhatIsNotAModuleFile checks that file:// modules are
// bounded as downloads are: regular files of at most 256 MiB. A device such
// as /dev/zero would be read forever, a named pipe would block the open.
func TestFetchFileRefusesWhatIsNotAModuleFile(t *testing.T) {
	f := newFetcher(t, nil, "")
	dir := t.TempDir()
	big := filepath.Join(dir, "big.wasm")
	if err := os.WriteFile(big, wasm(""), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, maxModuleSize+1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantErr string
	}{
		{name: "a character device", path: "/dev/null",
			wantErr: "fetching file:///dev/null: /dev/null is a character device: a module must be a regular file"},
		{name: "a directory", path: dir,
			wantErr: "fetching file://" + dir + ": " + dir + " is a directory: a module must be a regular file"},
		{name: "a named pipe", path: fifo,
			wantErr: "fetching file://" + fifo + ": " + fifo + " is a named pipe: a module must be a regular file"},
		{name: "larger than a download may be", path: big,
			wantErr: "fetching file://" + big + ": " + big + " is 268435457 bytes, more than the 268435456 limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := f.Fetch(context.Background(), "file://"+tt.path)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute): // not a timing assertion: a guard against a hang
				if w, err := os.OpenFile(tt.path, os.O_WRONLY, 0); err == nil {
					_ = w.Close() // lets a read of the named pipe end
				}
				t.Fatal("Fetch blocked")
			}
			checkErr(t, err, tt.wantErr)
		})
	}
}
