// Command buildpolicy builds a Go policy source directory (main.go and
// metadata.yml, as under testdata/policies) into an annotated wasm module and
// prints its path. It is a development tool for benchmarks and manual tests.
//
//	go run ./hack/buildpolicy testdata/policies/labels
//	go run ./hack/buildpolicy -copies 20 -o /tmp/mods testdata/policies/labels
//
// With -copies N it writes N modules into -o, each with a different policy
// title in its metadata and a different module name in its name section,
// so they have distinct digests and are compiled separately (as N
// different policies would be): Warden compiles a module without its
// metadata, and would compile copies that differ only there once.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/wasm"
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
		if b, err = withModuleName(b, "copy-"+strconv.Itoa(i)); err != nil {
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

// withModuleName gives module the name in the module-name subsection (id 0)
// of its name section, replacing any it had.
func withModuleName(module []byte, name string) ([]byte, error) {
	names, _, err := wasm.CustomSection(module, "name")
	if err != nil {
		return nil, err
	}
	var rest []byte // the other subsections, which follow the module name
	for off := 0; off < len(names); {
		id := names[off]
		size, n := binary.Uvarint(names[off+1:])
		if n <= 0 || uint64(len(names)-off-1-n) < size {
			return nil, fmt.Errorf("the name section's subsection at offset %d is malformed", off)
		}
		end := off + 1 + n + int(size)
		if id != 0 {
			rest = append(rest, names[off:end]...)
		}
		off = end
	}
	sub := binary.AppendUvarint(nil, uint64(len(name)))
	sub = append(sub, name...)
	section := append([]byte{0}, binary.AppendUvarint(nil, uint64(len(sub)))...)
	section = append(append(section, sub...), rest...)
	return wasm.WithCustomSection(module, "name", section)
}
