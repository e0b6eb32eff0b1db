package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The non-root user the images run as, with the ids of distroless's
// nonroot user.
const (
	nonrootID   = 65532
	nonrootHome = "/home/nonroot"
)

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
	// nsswitch.conf makes Go's resolver read /etc/hosts before DNS, as
	// glibc does.
	nsswitch = "hosts: files dns\n"
)

// file is one entry of a layer. A nil Data with Dir set is a directory.
type file struct {
	Path     string // without a leading slash
	Dir      bool
	Mode     int64 // permission bits, with 01000 for sticky
	UID, GID int
	Data     []byte
}

// baseFiles are the files every image holds besides its binary. caBundle
// nil leaves the CA certificates out.
func baseFiles(caBundle []byte) []file {
	files := []file{
		{Path: "etc", Dir: true, Mode: 0o755},
		{Path: "etc/group", Mode: 0o644, Data: []byte(group)},
		{Path: "etc/nsswitch.conf", Mode: 0o644, Data: []byte(nsswitch)},
		{Path: "etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Path: "home", Dir: true, Mode: 0o755},
		{Path: "home/nonroot", Dir: true, Mode: 0o700, UID: nonrootID, GID: nonrootID},
		{Path: "tmp", Dir: true, Mode: 0o1777},
	}
	if caBundle != nil {
		files = append(files,
			file{Path: "etc/ssl", Dir: true, Mode: 0o755},
			file{Path: "etc/ssl/certs", Dir: true, Mode: 0o755},
			file{Path: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: caBundle})
	}
	return files
}

// layer is a gzipped tar of files, sorted by path (so a directory comes
// before what it holds), every entry stamped with mtime and numeric owners
// only, gzipped by the standard library with no name or time in the gzip
// header: the same files give the same bytes.
func layer(files []file, mtime time.Time) (v1.Layer, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b file) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for i, f := range files {
		if i > 0 && files[i-1].Path == f.Path {
			return nil, fmt.Errorf("%s is in the layer twice", f.Path)
		}
		h := &tar.Header{
			Name:    f.Path,
			Mode:    f.Mode,
			Uid:     f.UID,
			Gid:     f.GID,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if f.Dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("writing %s: %w", f.Path, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("writing %s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var gzBuf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gzBuf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	gz := gzBuf.Bytes()
	// Given gzipped bytes, go-containerregistry serves them as they are
	// and computes the diff id by decompressing them.
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
