package wardenctl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// PullOptions are the flags of pull.
type PullOptions struct {
	Remote RemoteOptions
	// OutputPath, when set, is where the module is written instead of the
	// store.
	OutputPath string
}

// AddFlags registers the flags, with kwctl's names.
func (o *PullOptions) AddFlags(cmd *cobra.Command) {
	o.Remote.AddFlags(cmd)
	o.Remote.Verification.AddFlags(cmd)
	cmd.Flags().StringVarP(&o.OutputPath, "output-path", "o", "", "Output file; without it the policy goes to the store")
}

func (a *app) pullCommand() *cobra.Command {
	var o PullOptions
	cmd := &cobra.Command{
		Use:   "pull [flags] <uri>",
		Short: "Pull a policy into the store (or to a file)",
		Long: "Download a policy from an OCI registry (registry://host/repo:tag, or host/repo:tag) or a web " +
			"server (https://) into the store, ~/.cache/kubewarden/store, which kwctl shares, or to " +
			"--output-path. A policy already in the store is downloaded again. With the verification flags " +
			"(-k, -a, --verification-config-path) a policy whose cosign signatures do not meet them is not pulled.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Remote.Verification.Validate(); err != nil {
				return err
			}
			uri := argv[0]
			isFile := strings.HasPrefix(uri, "file://")
			if isFile && o.OutputPath == "" {
				return &usageError{errors.New("a file:// policy is read where it is, never stored: give --output-path to copy it")}
			}
			store := a.storeDir()
			if err := os.MkdirAll(store, 0o755); err != nil {
				return fmt.Errorf("creating the store: %w", err)
			}
			// Pull into a scratch store beside the real one, so that a
			// policy already stored is downloaded again and replaced only
			// once the new copy is complete.
			tmp, err := os.MkdirTemp(store, ".pull-")
			if err != nil {
				return fmt.Errorf("creating the store: %w", err)
			}
			defer os.RemoveAll(tmp)
			f, err := a.fetcher(o.Remote, tmp)
			if err != nil {
				return err
			}
			defer f.Close()
			m, err := f.Fetch(cmd.Context(), uri)
			if err != nil {
				return notValidated(uri, err)
			}
			dest := o.OutputPath
			if dest != "" {
				if err := os.WriteFile(dest, m.Bytes, 0o644); err != nil {
					return fmt.Errorf("writing %s: %w", dest, err)
				}
			} else {
				rel, err := filepath.Rel(tmp, m.Path)
				if err != nil || strings.HasPrefix(rel, "..") {
					return fmt.Errorf("pulling %s: the module is not in the store (%s)", uri, m.Path)
				}
				dest = filepath.Join(store, rel)
				if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
					return fmt.Errorf("writing to the store: %w", err)
				}
				if err := os.Rename(m.Path, dest); err != nil {
					return fmt.Errorf("writing to the store: %w", err)
				}
			}
			_, err = fmt.Fprintf(a.out, "%s pulled to %s (%s)\n", m.URI, dest, m.Digest)
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}
