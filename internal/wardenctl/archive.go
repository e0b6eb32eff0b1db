package wardenctl

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Archives of policies, for clusters without access to registries: save
// writes policies of the store to a tar.gz, load adds those of a tar.gz to
// the store. The layout is kwctl's: one regular file per policy, named by
// its path in the store ("registry/ghcr.io/kubewarden/policies/x:v1"), so
// that archives pass between kwctl and wardenctl.

// SaveOptions are the flags of save.
type SaveOptions struct {
	// Output is the tar.gz written.
	Output string
}

// AddFlags registers the flags, with kwctl's names.
func (o *SaveOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "Path of the tar.gz file written (required)")
}

// Validate checks the flags.
func (o *SaveOptions) Validate() error {
	if o.Output == "" {
		return &usageError{errors.New("-o/--output is required")}
	}
	return nil
}

func (a *app) saveCommand() *cobra.Command {
	var o SaveOptions
	cmd := &cobra.Command{
		Use:   "save --output <file.tar.gz> <policy>...",
		Short: "Save policies of the store to a tar.gz file",
		Long: "Write policies of the store (~/.cache/kubewarden/store), named by URI or by a prefix of their " +
			"digest, to a tar.gz file that load (or kwctl load) adds to another store, as on a machine without " +
			"access to the registries. Each policy is a file named by its path in the store, as kwctl writes " +
			"them. Pull the policies first; the file is written only when every policy is found.",
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			var entries []storeEntry
			for _, arg := range argv {
				found, err := a.storedPolicies(arg)
				if err != nil {
					return err
				}
				for _, e := range found {
					if !slices.ContainsFunc(entries, func(x storeEntry) bool { return x.Path == e.Path }) {
						entries = append(entries, e)
					}
				}
			}
			return writeArchive(o.Output, a.storeDir(), entries)
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// storedPolicies finds the policy of the store that arg names: its URI (a
// bare reference means registry://) or a prefix of its digest, which
// names every URI the module was pulled under.
func (a *app) storedPolicies(arg string) ([]storeEntry, error) {
	entries, err := findInStore(a.storeDir(), arg)
	if err != nil {
		return nil, err
	}
	switch {
	case len(entries) == 0:
		return nil, fmt.Errorf("cannot find policy %s in the store: pull it first (wardenctl pull)", arg)
	case !sameDigest(entries):
		return nil, fmt.Errorf("policy %s: the digest prefix matches %d different policies of the store: give more digits, or the URI", arg, len(entries))
	}
	return entries, nil
}

// writeArchive writes the entries of the store at dir to a tar.gz at out,
// through a temporary file, so that a failed save leaves no archive.
func writeArchive(out, dir string, entries []storeEntry) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return fmt.Errorf("cannot create file %s: %w", out, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	zw := gzip.NewWriter(tmp)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := addToArchive(tw, dir, e); err != nil {
			return fmt.Errorf("cannot add policy %s to %s: %w", e.URI, out, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

// addToArchive writes one store file, named by its path in the store.
func addToArchive(tw *tar.Writer, dir string, e storeEntry) error {
	rel, err := filepath.Rel(dir, e.Path)
	if err != nil {
		return err
	}
	f, err := os.Open(e.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     filepath.ToSlash(rel),
		Mode:     0o644,
		Size:     fi.Size(),
		ModTime:  fi.ModTime(),
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// LoadOptions are the flags of load.
type LoadOptions struct {
	// Input is the tar.gz read.
	Input string
}

// AddFlags registers the flags, with kwctl's names.
func (o *LoadOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Input, "input", "", "Path of the tar.gz file of policies, written by save (required)")
}

// Validate checks the flags.
func (o *LoadOptions) Validate() error {
	if o.Input == "" {
		return &usageError{errors.New("--input is required")}
	}
	return nil
}

func (a *app) loadCommand() *cobra.Command {
	var o LoadOptions
	cmd := &cobra.Command{
		Use:   "load --input <file.tar.gz>",
		Short: "Load policies from a tar.gz file into the store",
		Long: "Add the policies of a tar.gz file written by save (or kwctl save) to the store " +
			"(~/.cache/kubewarden/store), replacing the copies already there. Nothing is added unless the whole " +
			"file can be read, and every entry is a regular file under registry/, https/ or http/.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			loaded, err := loadArchive(o.Input, a.storeDir())
			if err != nil {
				return err
			}
			if len(loaded) == 0 {
				a.logger().WarnContext(cmd.Context(), "the file holds no policy", "path", o.Input)
			}
			for _, uri := range loaded {
				a.logger().InfoContext(cmd.Context(), "policy loaded", "policy", uri)
			}
			return nil
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// loadArchive unpacks the tar.gz at in into a scratch directory of the
// store at dir, then moves each file into place. It returns the URIs of
// the policies loaded.
func loadArchive(in, dir string) ([]string, error) {
	f, err := os.Open(in)
	if err != nil {
		return nil, fmt.Errorf("cannot open file %s: %w", in, err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("cannot unpack file %s: %w", in, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the store: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".load-")
	if err != nil {
		return nil, fmt.Errorf("creating the store: %w", err)
	}
	defer os.RemoveAll(tmp)

	var names []string
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("cannot unpack file %s: %w", in, err)
		}
		name, err := archiveEntryName(hdr)
		if err != nil {
			return nil, fmt.Errorf("cannot unpack file %s: entry %q: %w", in, hdr.Name, err)
		}
		if name == "" { // a directory
			continue
		}
		if err := extractEntry(tr, filepath.Join(tmp, filepath.FromSlash(name))); err != nil {
			return nil, fmt.Errorf("cannot unpack file %s: entry %q: %w", in, hdr.Name, err)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if err := zr.Close(); err != nil {
		return nil, fmt.Errorf("cannot unpack file %s: %w", in, err)
	}
	uris := make([]string, 0, len(names))
	for _, name := range names {
		dest := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return uris, fmt.Errorf("writing to the store: %w", err)
		}
		if err := os.Rename(filepath.Join(tmp, filepath.FromSlash(name)), dest); err != nil {
			return uris, fmt.Errorf("writing to the store: %w", err)
		}
		scheme, rest, _ := strings.Cut(name, "/")
		uris = append(uris, scheme+"://"+rest)
	}
	return uris, nil
}

// archiveEntryName checks an entry of an archive of policies and returns
// its path in the store, or "" for a directory, which is skipped.
func archiveEntryName(hdr *tar.Header) (string, error) {
	name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
	switch hdr.Typeflag {
	case tar.TypeDir:
		return "", nil
	case tar.TypeReg:
	default:
		return "", errors.New("not a regular file: an archive of policies holds only files")
	}
	if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
		return "", errors.New("the path leaves the store")
	}
	parts := strings.Split(name, "/")
	if !slices.Contains(storeSchemes, parts[0]) || len(parts) < 3 {
		return "", fmt.Errorf("not a policy of the store: want a path such as registry/<host>/<repository>:<tag>, or one under %s/", strings.Join(storeSchemes[1:], "/ or "))
	}
	for _, p := range parts {
		if strings.HasPrefix(p, ".") {
			return "", errors.New("hidden files and directories are not policies")
		}
	}
	return name, nil
}

// extractEntry writes the content of the current entry of tr to dest.
func extractEntry(tr *tar.Reader, dest string) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dest, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, tr); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
