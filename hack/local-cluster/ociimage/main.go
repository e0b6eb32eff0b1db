// Command ociimage packs one static binary as a single-layer container image
// and writes it as a tarball that `ctr images import` reads (the format of
// docker save). hack/local-cluster.sh builds the local cluster's pause and
// probe images with it, so that no image is ever pulled:
//
//	go run ./hack/local-cluster/ociimage -binary BIN -name REF -out FILE.tar [-user UID:GID] [-cmd ARG]...
//
// The binary is /<its base name>, mode 0755, owned by root, and is the
// image's entrypoint; -cmd arguments are its default arguments. The image is
// for the platform the tool runs on, and every timestamp is the Unix epoch,
// so the same binary gives the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// args is a repeatable string flag.
type args []string

func (a *args) String() string     { return strings.Join(*a, " ") }
func (a *args) Set(s string) error { *a = append(*a, s); return nil }

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
}

func run(argv []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	binary := fs.String("binary", "", "static executable `file` to pack")
	ref := fs.String("name", "", "image `reference`, with a tag")
	out := fs.String("out", "", "tarball `file` to write")
	user := fs.String("user", "65532:65532", "`uid:gid` the image runs as")
	var cmd args
	fs.Var(&cmd, "cmd", "a default `argument` of the entrypoint (repeat it)")
	if err := fs.Parse(argv); err != nil {
		return err
	}
	if *binary == "" || *ref == "" || *out == "" || fs.NArg() > 0 {
		return errors.New("usage: ociimage -binary FILE -name REF -out FILE.tar [-user UID:GID] [-cmd ARG ...]")
	}
	tag, err := name.NewTag(*ref, name.StrictValidation)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	entry := "/" + filepath.Base(*binary)
	layer, err := binaryLayer(entry, data)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS = runtime.GOOS
	cf.Architecture = runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = []string{entry}
	cf.Config.Cmd = cmd
	cf.Config.User = *user
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tmp := *out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, *out)
}

// binaryLayer is a layer holding data at path, executable, owned by root.
func binaryLayer(path string, data []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(path, "/"),
		Mode:     0o755,
		Size:     int64(len(data)),
		ModTime:  time.Unix(0, 0),
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	})
}
