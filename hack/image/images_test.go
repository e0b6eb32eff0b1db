//go:build images

package main

import (
	"os"
	"runtime"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/wardenhq/warden/internal/testkit/ociregistry"
)

// TestRealImages builds the image of every binary under cmd/ for the
// host's platform with the real flags, pushes it to an in-process registry
// and checks it as TestImage checks the fixture's, down to running
// --version. Compiling every package again under CGO_ENABLED=0 -trimpath
// takes minutes on a cold build cache, which is why it is behind a build
// tag: go test -tags images ./hack/image
func TestRealImages(t *testing.T) {
	host := ociregistry.Start(t, ociregistry.Plain()).Host
	b := newTestBuilder(t)
	b.log = t.Output()
	names, err := binariesIn(b.moduleDir)
	if err != nil {
		t.Fatal(err)
	}
	p := platform{OS: "linux", Arch: runtime.GOARCH}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			a, err := b.build(t.Context(), name, []platform{p})
			if err != nil {
				t.Fatal(err)
			}
			img := a.(v1.Image)
			d, err := img.Digest()
			if err != nil {
				t.Fatal(err)
			}
			ref := host + "/wardenhq/" + imageName(name) + ":" + testMeta.Version
			if _, err := push(t.Context(), ref, img, pushOptions{Insecure: true}); err != nil {
				t.Fatal(err)
			}
			bin := checkPushedImage(t, ref, name, p, d.String())
			data, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			checkStatic(t, data)
			checkVersion(t, bin, name+" (Warden) "+testMeta.Version)
		})
	}
}
