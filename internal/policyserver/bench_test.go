package policyserver_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policyserver"
	"github.com/wardenhq/warden/internal/verify/verifytest"
)

// padModule returns module grown to size bytes by a custom section named
// "padding", which compilers and Warden skip: the bytes a pull moves, the
// code of the module.
func padModule(module []byte, size int) []byte {
	const name = "padding"
	header := func(payload int) []byte {
		h := []byte{0} // custom section
		h = binary.AppendUvarint(h, uint64(1+len(name)+payload))
		h = binary.AppendUvarint(h, uint64(len(name)))
		return append(h, name...)
	}
	payload := size - len(module) - len(header(size))
	if payload < 0 {
		return module
	}
	for len(module)+len(header(payload))+payload < size { // a shorter header
		payload++
	}
	out := append(append([]byte(nil), module...), header(payload)...)
	return append(out, make([]byte, payload)...)
}

// BenchmarkPullAndLoad5MB measures what a policy server does before it
// serves a registry policy (policyserver.New: pull, check, compile, load,
// bind the listeners): the wasi-log test policy (Go wasip1, 3.4 MB of
// code) padded to 5 MiB, in a registry on 127.0.0.1 over TLS with a custom
// CA (sources.yml). cold: empty download directory and compilation cache;
// pulled: the module in the download directory, an empty compilation cache;
// cached: both filled, a restart.
//
//	go test -run '^$' -bench PullAndLoad5MB -benchtime 10x -count 3 ./internal/policyserver/
func BenchmarkPullAndLoad5MB(b *testing.B) {
	built, err := os.ReadFile(policybuild.ForTest(b, "wasi-log"))
	if err != nil {
		b.Fatal(err)
	}
	module := padModule(built, 5<<20)
	if len(module) != 5<<20 {
		b.Fatalf("padded module: %d bytes", len(module))
	}
	reg := verifytest.StartRegistry(b)
	uri := "registry://" + reg.Host + "/policies/big:v1"
	verifytest.Push(b, reg.Fetcher(b, nil), uri, module)
	policies := filepath.Join(b.TempDir(), "policies.yml")
	if err := os.WriteFile(policies, []byte(fmt.Sprintf("big:\n  module: %s\n", uri)), 0o600); err != nil {
		b.Fatal(err)
	}
	opts := policyserver.DefaultOptions()
	opts.Addr, opts.Port, opts.ReadinessProbePort = "127.0.0.1", 0, 0
	opts.PoliciesPath, opts.SourcesPath = policies, reg.SourcesFile(b)
	opts.DockerConfigPath = filepath.Join(b.TempDir(), "no-docker-config.json")
	logger := slog.New(slog.DiscardHandler)
	load := func(b *testing.B, downloadDir, cacheDir string) {
		o := opts
		o.DownloadDir, o.CacheDir = downloadDir, cacheDir
		srv, err := policyserver.New(context.Background(), o, logger)
		if err != nil {
			b.Fatal(err)
		}
		srv.Close(context.Background())
	}
	// fresh returns an empty directory; the timer is stopped while the
	// previous iteration's is removed.
	fresh := func(b *testing.B, prev *string) string {
		b.StopTimer()
		defer b.StartTimer()
		if *prev != "" {
			if err := os.RemoveAll(*prev); err != nil {
				b.Fatal(err)
			}
		}
		dir, err := os.MkdirTemp(b.TempDir(), "dir")
		if err != nil {
			b.Fatal(err)
		}
		*prev = dir
		return dir
	}

	b.Run("cold", func(b *testing.B) {
		var download, cache string
		for b.Loop() {
			load(b, fresh(b, &download), fresh(b, &cache))
		}
	})
	b.Run("pulled", func(b *testing.B) {
		download := b.TempDir()
		load(b, download, b.TempDir())
		var cache string
		for b.Loop() {
			load(b, download, fresh(b, &cache))
		}
	})
	b.Run("cached", func(b *testing.B) {
		download, cache := b.TempDir(), b.TempDir()
		load(b, download, cache)
		for b.Loop() {
			load(b, download, cache)
		}
	})
}
