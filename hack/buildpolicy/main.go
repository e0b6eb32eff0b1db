// Command buildpolicy builds a Go policy source directory (main.go and
// metadata.yml, as under testdata/policies) into an annotated wasm module and
// prints its path. It is a development tool for benchmarks and manual tests.
//
//	go run ./hack/buildpolicy testdata/policies/labels
//	go run ./hack/buildpolicy -copies 20 -o /tmp/mods testdata/policies/labels
//
// With -copies N it writes N modules into -o, each with a different policy
// title in its metadata, so they have distinct digests and are compiled
// separately (as N different policies would be).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/policybuild"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("buildpolicy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	copies := fs.Int("copies", 0, "write this many distinct copies into -o")
	out := fs.String("o", "", "output directory for -copies")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || (*copies > 0 && *out == "") {
		fmt.Fprintln(stderr, "usage: buildpolicy [-copies N -o DIR] POLICY_DIR")
		return 2
	}
	path, err := policybuild.Build(ctx, fs.Arg(0), policybuild.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	if *copies == 0 {
		fmt.Fprintln(stdout, path)
		return 0
	}
	if err := writeCopies(fs.Arg(0), path, *out, *copies, stdout); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	return 0
}

func writeCopies(src, path, dir string, n int, stdout io.Writer) error {
	module, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	meta, err := metadata.FromModule(module)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Base(filepath.Clean(src))
	for i := 1; i <= n; i++ {
		m := *meta
		m.Annotations = map[string]string{"io.kubewarden.policy.title": "copy-" + strconv.Itoa(i)}
		b, err := metadata.Embed(module, &m)
		if err != nil {
			return err
		}
		name := filepath.Join(dir, fmt.Sprintf("%s-%d.wasm", base, i))
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stdout, name)
	}
	return nil
}
