package wasm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/wardenhq/warden/internal/sharedcache"
)

// A runtime with a shared cache (Config.Shared) keeps wazero's compilation
// cache in its private CacheDir as usual, and moves code between it and
// the shared cache around each compilation: before, the verified blobs of
// the module are copied into the private cache, where wazero finds them;
// after, the files wazero added are signed and stored in the shared cache.
// wazero's cache cannot be replaced by one of ours (its interface is
// opaque), but its files are plain: <CacheDir>/wazero-<version>-<arch>-<os>/<key>,
// where the key hashes the module, wazero's version and the CPU's
// features. Their names are all the shared cache needs to know.

// fromShared copies the verified blobs of the module with digest into the
// private cache, and reports whether there was one. Refused blobs are
// logged: the shared cache has removed them, and the compilation that
// follows stores new ones.
func (r *Runtime) fromShared(ctx context.Context, digest string) bool {
	blobs, errs := r.shared.Get(digest)
	for _, err := range errs {
		r.logger.WarnContext(ctx, "a compiled module in the shared cache is refused; compiling it again",
			"module", digest, "error", err)
	}
	found := false
	for _, b := range blobs {
		path := filepath.Join(r.cacheDir, filepath.FromSlash(b.Name))
		if _, err := os.Stat(path); err == nil {
			found = true // compiled or copied here before
			continue
		}
		if err := writePrivate(path, b.Data); err != nil {
			r.logger.WarnContext(ctx, "cannot copy a compiled module from the shared cache", "module", digest, "error", err)
			continue
		}
		r.logger.InfoContext(ctx, "compiled module copied from the shared cache", "module", digest, "size", len(b.Data))
		found = true
	}
	return found
}

// toShared stores in the shared cache the private cache files of the
// module with digest that its compilation created, or, when it created
// none and the shared cache had nothing (the code came from the private
// cache, compiled here earlier, maybe by an earlier process), those
// compiled here earlier: the private cache keeps their names.
func (r *Runtime) toShared(ctx context.Context, digest string, created []string, found bool) {
	names := created
	if len(created) > 0 {
		r.rememberNames(digest, created)
	} else if !found {
		names = r.compiledNames(digest)
	}
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(r.cacheDir, filepath.FromSlash(name)))
		if err == nil {
			err = r.shared.Put(digest, sharedcache.Blob{Name: name, Data: data})
		}
		if err != nil {
			r.logger.WarnContext(ctx, "cannot store a compiled module in the shared cache", "module", digest, "error", err)
			continue
		}
		r.logger.InfoContext(ctx, "compiled module stored in the shared cache", "module", digest, "size", len(data))
	}
}

// namesFile lists the private cache files compiled here for the module
// with digest, one name a line.
func (r *Runtime) namesFile(digest string) string {
	return filepath.Join(r.cacheDir, "shared-names", digest)
}

// compiledNames returns the private cache files compiled here for the
// module with digest that are still there.
func (r *Runtime) compiledNames(digest string) []string {
	b, _ := os.ReadFile(r.namesFile(digest))
	var names []string
	for _, name := range strings.Fields(string(b)) {
		if _, err := os.Stat(filepath.Join(r.cacheDir, filepath.FromSlash(name))); err == nil {
			names = append(names, name)
		}
	}
	return names
}

// rememberNames adds names to the private cache files compiled here for
// the module with digest.
func (r *Runtime) rememberNames(digest string, names []string) {
	all := append(r.compiledNames(digest), names...)
	slices.Sort(all)
	if err := writePrivate(r.namesFile(digest), []byte(strings.Join(slices.Compact(all), "\n")+"\n")); err != nil {
		r.logger.Warn("cannot note the name of a compiled module", "module", digest, "error", err)
	}
}

// cacheFiles lists the files of wazero's compilation cache, as names
// relative to CacheDir. The caller holds codeMu, so that no compilation
// adds one meanwhile.
func (r *Runtime) cacheFiles() map[string]bool {
	files := map[string]bool{}
	for _, d := range r.wazeroDirs() {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if e.Type().IsRegular() && !strings.HasSuffix(e.Name(), ".tmp") {
				files[filepath.Base(d)+"/"+e.Name()] = true
			}
		}
	}
	return files
}

// newCacheFiles returns the files of wazero's cache not in before.
func (r *Runtime) newCacheFiles(before map[string]bool) []string {
	var created []string
	for name := range r.cacheFiles() {
		if !before[name] {
			created = append(created, name)
		}
	}
	slices.Sort(created)
	return created
}

// writePrivate writes a file of the private cache, so that wazero never
// reads a part of it.
func writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return sharedcache.WriteFile(path, data)
}
