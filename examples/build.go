package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/wardenhq/warden/internal/policybuild"
)

// buildPolicies builds every policy directory of srcDir (a directory with a
// metadata.yml) in parallel with policybuild, which caches the builds, and
// copies each module to outDir/<name>.wasm. It returns the names of the
// policies, sorted.
func buildPolicies(ctx context.Context, srcDir, outDir string) ([]string, error) {
	metas, err := filepath.Glob(filepath.Join(srcDir, "*", "metadata.yml"))
	if err != nil {
		return nil, err
	}
	if len(metas) == 0 {
		return nil, fmt.Errorf("no policies in %s: want directories with a main.go and a metadata.yml", srcDir)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the build directory: %w", err)
	}
	names := make([]string, len(metas))
	errs := make([]error, len(metas))
	var wg sync.WaitGroup
	for i, meta := range metas {
		dir := filepath.Dir(meta)
		names[i] = filepath.Base(dir)
		wg.Go(func() {
			module, err := policybuild.Build(ctx, dir, policybuild.Options{})
			if err == nil {
				err = copyFile(filepath.Join(outDir, names[i]+".wasm"), module)
			}
			if err != nil {
				errs[i] = fmt.Errorf("policy %s: %w", names[i], err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// copyFile copies src to dst through a temporary file and a rename, so that
// a server reading dst sees the old or the new module, never part of one.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeAtomic(dst, 0o644, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// writeAtomic writes dst with mode perm through write, a temporary file in
// the same directory and a rename.
func writeAtomic(dst string, perm os.FileMode, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), dst)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return nil
}
