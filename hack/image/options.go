package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
)

// defaultCACertificates is where Debian (and the golang images) keep the CA
// bundle; Go's crypto/x509 reads the same path first on Linux.
const defaultCACertificates = "/etc/ssl/certs/ca-certificates.crt"

// Options are the flags of the image builder. Empty Version, Revision and
// Created are filled from git by defaults.
type Options struct {
	// Binaries is a comma-separated list of directories under cmd/, or
	// "all" for every one of them.
	Binaries string
	// Repo is the repository prefix of the images, e.g. ghcr.io/wardenhq.
	Repo string
	// Tag is the tag of every image; empty means Version.
	Tag string
	// Platforms is a comma-separated list of os/arch[/variant].
	Platforms string
	// Version is linked into the binaries (internal/buildinfo.Version) and
	// labelled; empty means `git describe --tags --always`, else "dev".
	Version string
	// Revision is the source commit, labelled; empty means git's HEAD.
	Revision string
	// Created is the time of every file and of the image config, in Unix
	// seconds; empty means $SOURCE_DATE_EPOCH, else the HEAD commit's time.
	Created string
	// Source and License are the org.opencontainers.image.source and
	// .licenses labels; an empty License adds no label.
	Source  string
	License string
	// CACertificates is the CA bundle copied into the images; "none" leaves
	// it out.
	CACertificates string
	// Push uploads the images; Insecure talks plain HTTP to the registry.
	Push     bool
	Insecure bool
	// Out is an OCI image layout directory to add the images to, or a
	// tarball for docker load when it ends in .tar.
	Out string
}

// AddFlags registers the options on fs, with their defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Binaries, "binary", "all", "comma-separated `names` of binaries under cmd/, or all")
	fs.StringVar(&o.Repo, "repo", "ghcr.io/wardenhq", "`repository` prefix of the images")
	fs.StringVar(&o.Tag, "tag", "", "image `tag` (default: the version)")
	fs.StringVar(&o.Platforms, "platform", "linux/amd64,linux/arm64", "comma-separated `platforms` (os/arch[/variant]); more than one makes an image index")
	fs.StringVar(&o.Version, "version", "", "`version` linked into the binaries and labelled (default: git describe --tags --always, else dev)")
	fs.StringVar(&o.Revision, "revision", "", "source `commit` for the org.opencontainers.image.revision label (default: git rev-parse HEAD)")
	fs.StringVar(&o.Created, "created", "", "creation time of the files and the image in Unix `seconds` (default: $SOURCE_DATE_EPOCH, else the HEAD commit's time)")
	fs.StringVar(&o.Source, "source", "https://github.com/wardenhq/warden", "`URL` for the org.opencontainers.image.source label")
	fs.StringVar(&o.License, "license", "", "SPDX `expression` for the org.opencontainers.image.licenses label (default: no label)")
	fs.StringVar(&o.CACertificates, "ca-certificates", defaultCACertificates, "CA bundle `file` copied into the images, or none (a missing default is skipped with a warning)")
	fs.BoolVar(&o.Push, "push", false, "push the images to their registry")
	fs.BoolVar(&o.Insecure, "insecure", false, "talk plain HTTP to the registry (a local test registry)")
	fs.StringVar(&o.Out, "out", "", "OCI image layout `directory` to add the images to, or a tarball for docker load when it ends in .tar")
}

// tagPattern is the grammar of an image tag.
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if strings.TrimSpace(o.Binaries) == "" {
		errs = append(errs, errors.New("-binary is required"))
	}
	// A prefix names a registry host and a path, with no tag or digest; a
	// colon is the host's port only.
	last := o.Repo[strings.LastIndex(o.Repo, "/")+1:]
	if o.Repo == "" || strings.HasSuffix(o.Repo, "/") || strings.Contains(o.Repo, "@") || strings.Contains(o.Repo, "/") && strings.Contains(last, ":") {
		errs = append(errs, fmt.Errorf("-repo %q: want a repository prefix such as ghcr.io/wardenhq or 127.0.0.1:5000/wardenhq", o.Repo))
	}
	if o.Tag != "" && !tagPattern.MatchString(o.Tag) {
		errs = append(errs, fmt.Errorf("-tag %q is not a valid image tag", o.Tag))
	}
	platforms, err := parsePlatforms(o.Platforms)
	if err != nil {
		errs = append(errs, fmt.Errorf("-platform: %w", err))
	}
	if strings.HasSuffix(o.Out, ".tar") && len(platforms) > 1 {
		errs = append(errs, errors.New("-out *.tar holds one platform per image: give a single -platform, or an OCI layout directory"))
	}
	if o.Insecure && !o.Push {
		errs = append(errs, errors.New("-insecure only matters with -push"))
	}
	return errors.Join(errs...)
}

// imageName is the repository name of a binary's image, as the Helm chart
// names them: warden-controller, warden-policy-server; wardenctl stays
// wardenctl.
func imageName(binary string) string {
	if strings.HasPrefix(binary, "warden") {
		return binary
	}
	return "warden-" + binary
}
