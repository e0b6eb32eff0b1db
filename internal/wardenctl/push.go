package wardenctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/wardenhq/warden/internal/metadata"
)

// PushOptions are the flags of push.
type PushOptions struct {
	Remote RemoteOptions
	// Force pushes a module without metadata.
	Force bool
	// Output is text or json.
	Output string
}

// AddFlags registers the flags, with kwctl's names.
func (o *PushOptions) AddFlags(cmd *cobra.Command) {
	o.Remote.AddFlags(cmd)
	cmd.Flags().BoolVarP(&o.Force, "force", "f", false, "Push also a policy that is not annotated")
	cmd.Flags().StringVarP(&o.Output, "output", "o", "text", "Output format: text or json")
}

// Validate checks the output format.
func (o *PushOptions) Validate() error {
	if o.Output != "text" && o.Output != "json" {
		return &usageError{fmt.Errorf("invalid --output %q: use text or json", o.Output)}
	}
	return nil
}

// sourceAnnotation is copied to ociSourceAnnotation when pushing, so that
// tools such as Renovate find the policy's source.
const (
	sourceAnnotation    = "io.kubewarden.policy.source"
	ociSourceAnnotation = "org.opencontainers.image.source"
	usageAnnotation     = "io.kubewarden.policy.usage"
)

// manifestAnnotations returns the metadata annotations that go on the OCI
// manifest: the single-line ones (the OCI specification has no room for
// others, such as the usage text).
func manifestAnnotations(m *metadata.Metadata) map[string]string {
	if m == nil || len(m.Annotations) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range m.Annotations {
		if !strings.ContainsAny(v, "\r\n") {
			out[k] = v
		}
	}
	if src, ok := out[sourceAnnotation]; ok {
		out[ociSourceAnnotation] = src
	}
	return out
}

func (a *app) pushCommand() *cobra.Command {
	var o PushOptions
	cmd := &cobra.Command{
		Use:   "push [flags] <policy> <registry://host/repository:tag>",
		Short: "Push a policy to an OCI registry",
		Long: "Publish a policy (a local file, a policy URI, or the digest prefix of a policy in the store) " +
			"to an OCI registry as Kubewarden's artifact. The single-line annotations of the policy's " +
			"metadata become annotations of the OCI manifest, and io.kubewarden.policy.source is also " +
			"written as org.opencontainers.image.source. A policy without metadata is refused unless --force.",
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			ref, err := a.resolvePolicy(argv[0])
			if err != nil {
				return err
			}
			target, err := parseRegistryRef(argv[1])
			if err != nil {
				return &usageError{err}
			}
			if _, err := target.Digest(); err == nil {
				return &usageError{fmt.Errorf("%s: push needs a tag, not a digest", argv[1])}
			}
			f, err := a.fetcher(o.Remote, a.storeDir())
			if err != nil {
				return err
			}
			defer f.Close()
			m, err := f.Fetch(ctx, ref.Fetch)
			if err != nil {
				return err
			}
			meta, err := metadata.FromModule(m.Bytes)
			switch {
			case errors.Is(err, metadata.ErrMissing) && o.Force:
				a.logger().WarnContext(ctx, "pushing a policy without metadata", "policy", ref.URI)
			case errors.Is(err, metadata.ErrMissing):
				return fmt.Errorf("%s has no metadata: annotate it with `wardenctl annotate`, or push it anyway with --force", ref.URI)
			case err != nil:
				return fmt.Errorf("reading the metadata of %s: %w", ref.URI, err)
			}
			digest, err := f.Push(ctx, argv[1], m.Bytes, manifestAnnotations(meta))
			if err != nil {
				return err
			}
			immutable := fmt.Sprintf("registry://%s/%s@%s", target.Registry, target.Repository, digest)
			if o.Output == "json" {
				b, err := json.Marshal(map[string]string{"immutable_ref": immutable})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.out, "%s\n", b)
				return err
			}
			_, err = fmt.Fprintf(a.out, "Policy successfully pushed: %s\n", immutable)
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func (a *app) digestCommand() *cobra.Command {
	var o RemoteOptions
	cmd := &cobra.Command{
		Use:   "digest [flags] <registry://host/repository:tag>",
		Short: "Print the digest of a policy's OCI manifest",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if _, err := parseRegistryRef(argv[0]); err != nil {
				return &usageError{err}
			}
			// The fetcher's store is not touched: only the manifest is read.
			f, err := a.fetcher(o, a.storeDir())
			if err != nil {
				return err
			}
			defer f.Close()
			m, err := f.FetchManifest(cmd.Context(), argv[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.out, "%s@%s\n", argv[0], m.Digest)
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func (a *app) policiesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "policies",
		Short: "List the policies of the store",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			entries, err := listStore(a.storeDir())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "POLICY\tMUTATING\tCONTEXT AWARE\tSHA-256\tSIZE")
			for _, e := range entries {
				mutating, contextAware := "unknown", "unknown"
				if b, err := os.ReadFile(e.Path); err == nil {
					if m, err := metadata.FromModule(b); err == nil {
						mutating, contextAware = yesNo(m.Mutating), yesNo(len(m.ContextAwareResources) > 0)
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.URI, mutating, contextAware, e.Digest[:12], humanSize(e.Size))
			}
			return tw.Flush()
		},
	}
}

func (a *app) rmCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rm <uri|sha-prefix>",
		Short: "Remove a policy from the store",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			store := a.storeDir()
			entries, err := findInStore(store, argv[0])
			if err != nil {
				return err
			}
			switch len(entries) {
			case 0:
				return fmt.Errorf("no policy of the store is %s", argv[0])
			case 1:
			default:
				uris := make([]string, len(entries))
				for i, e := range entries {
					uris[i] = e.URI
				}
				sort.Strings(uris)
				return fmt.Errorf("%s matches %d policies of the store (%s): give more digits", argv[0], len(entries), strings.Join(uris, ", "))
			}
			if err := removeFromStore(store, entries[0]); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.out, "Removed %s\n", entries[0].URI)
			return err
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// humanSize prints a byte count with a binary unit.
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
