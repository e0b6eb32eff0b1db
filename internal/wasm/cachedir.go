package wasm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/tetratelabs/wazero"
)

// wazero's compilation cache is an optimisation, and the runtime treats it
// as one. A directory it cannot create or write (a read-only root file
// system) leaves the runtime without a cache, after a warning (NewRuntime).
// A compilation that fails because wazero cannot read a cache entry (one
// truncated or corrupted: wazero says "compilationcache: checksum mismatch"
// or "compilationcache: error reading header: EOF"; or one it cannot open)
// empties the cache and compiles once more (compileLocked).
// A compilation that fails because wazero cannot write its entry (a volume
// that has filled up, or become read-only) makes the runtime compile in
// memory, this module and every later one, after a warning: wazero keeps
// the module it failed to write, without its function listeners, so the
// same runtime must not compile those bytes again (inMemoryLocked). At
// start, the write probe (probeWrite) writes and syncs some data, so that
// a volume already full is seen then and the runtime starts without a
// cache.
// wazero does not say which file failed, and its file names hash the module
// with values it keeps internal (the function listeners, the CPU's
// features), so the whole cache goes: the other modules are compiled again
// at their next compilation, or copied again from the shared cache.

// openCompilationCache opens wazero's compilation cache in dir, creating
// dir if needed, and checks that the cache can write its files.
func openCompilationCache(ctx context.Context, dir string) (wazero.CompilationCache, error) {
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, err
	}
	for i, d := range []string{dir, filepath.Join(dir, wazeroCacheSubdir())} {
		if _, err := os.Stat(d); i > 0 && errors.Is(err, fs.ErrNotExist) {
			continue // not wazero's name after all: compileLocked copes
		}
		if err := probeWrite(d); err != nil {
			_ = cache.Close(ctx)
			return nil, err
		}
	}
	return cache, nil
}

// wazeroCacheSubdir is the directory of the cache directory where wazero
// keeps its files: wazero-<version>-<arch>-<os>, the version read from the
// build information as wazero reads it (its internal/version).
func wazeroCacheSubdir() string {
	missing := func(v string) bool { return v == "" || v == "(devel)" }
	version := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if strings.Contains(dep.Path, "github.com/tetratelabs/wazero") {
				version = dep.Version
			}
		}
		if missing(version) {
			version = info.Main.Version
		}
	}
	if missing(version) {
		version = "dev"
	}
	return "wazero-" + version + "-" + runtime.GOARCH + "-" + runtime.GOOS
}

// wazeroDirs returns the directories of wazero's cache files: the one this
// build's wazero uses, or, when it is not there, every wazero-* one.
func (r *Runtime) wazeroDirs() []string {
	dirs := []string{filepath.Join(r.cacheDir, wazeroCacheSubdir())}
	if _, err := os.Stat(dirs[0]); err != nil {
		dirs, _ = filepath.Glob(filepath.Join(r.cacheDir, "wazero-*"))
	}
	return dirs
}

// probeSize is what probeWrite writes: a full volume refuses it where it
// may still create an empty file.
const probeSize = 64 << 10

// probeWrite creates a file of probeSize bytes in dir, syncs it, and
// removes it.
func probeWrite(dir string) error {
	f, err := os.CreateTemp(dir, "probe-*.tmp")
	if err != nil {
		return fmt.Errorf("cannot write in the cache directory: %w", err)
	}
	if _, err = f.Write(make([]byte, probeSize)); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(f.Name()); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("cannot write in the cache directory: %w", err)
	}
	return nil
}

// isCacheReadError reports whether a compilation failed because wazero
// could not read a cache entry (open or decode it) rather than because of
// the module. Such a failure happens before wazero compiles anything, so
// compiling again is safe. A failure to write an entry is not one: wazero
// has then kept the module in memory without its function listeners, and
// compiling the same bytes again in this runtime would return that module
// (it panics when instantiated), so that error stays an error; the write
// probe of NewRuntime keeps it from happening but for a disk that fills up.
func (r *Runtime) isCacheReadError(err error) bool {
	if r.cache == nil {
		return false
	}
	if strings.Contains(err.Error(), "compilationcache: ") {
		return true
	}
	var pathErr *fs.PathError
	if !errors.As(err, &pathErr) || strings.HasSuffix(pathErr.Path, ".tmp") { // wazero writes entries through .tmp files
		return false
	}
	dir, aerr := filepath.Abs(r.cacheDir) // wazero's paths are absolute
	return aerr == nil && strings.HasPrefix(pathErr.Path, dir+string(filepath.Separator))
}

// isCacheWriteError reports whether a compilation failed because wazero
// could not write the module's cache entry: wazero writes it through a
// temporary file, "<entry>.*.tmp" in the cache directory, and an error
// about such a file is a failure to create, write or sync it.
func (r *Runtime) isCacheWriteError(err error) bool {
	if r.cache == nil {
		return false
	}
	var pathErr *fs.PathError
	if !errors.As(err, &pathErr) || !strings.HasSuffix(pathErr.Path, ".tmp") {
		return false
	}
	dir, aerr := filepath.Abs(r.cacheDir) // wazero's paths are absolute
	return aerr == nil && strings.HasPrefix(pathErr.Path, dir+string(filepath.Separator))
}

// inMemory reports whether the runtime compiles in memory, its cache
// having failed to write.
func (r *Runtime) inMemory() bool {
	codeMu.Lock()
	defer codeMu.Unlock()
	return r.memRT != nil
}

// inMemoryLocked returns the runtime without a cache that compiles once the
// cache cannot be written, creating it the first time, with the host
// modules of the runtime's own. The caller holds codeMu.
func (r *Runtime) inMemoryLocked(ctx context.Context) (wazero.Runtime, error) {
	if r.memRT != nil {
		return r.memRT, nil
	}
	rt := wazero.NewRuntimeWithConfig(ctx, r.memConfig)
	err := r.instantiateHostModules(ctx, rt)
	if err == nil && r.rt.Module(opaEnvModule) != nil {
		err = r.instantiateOPAHostIn(ctx, rt)
	}
	if err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("compiling in memory: %w", err)
	}
	r.memRT = rt
	return rt, nil
}

// emptyCache removes the files of wazero's cache, and keeps its directory,
// where wazero writes. The caller holds codeMu, so that no compilation of
// this runtime reads or writes them meanwhile.
func (r *Runtime) emptyCache(ctx context.Context) {
	for _, d := range r.wazeroDirs() {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue // not a directory
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			if err := os.Remove(filepath.Join(d, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				r.logger.WarnContext(ctx, "cannot remove a file of the compilation cache", "dir", d, "error", err)
			}
		}
	}
}
