package wardenctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/metadata"
)

// fetchedPolicy is a policy argument, resolved and read.
type fetchedPolicy struct {
	URI    string
	Digest string
	Bytes  []byte
}

// fetchPolicy resolves a policy argument and reads its module, pulling it
// into the store when it is remote.
func (a *app) fetchPolicy(ctx context.Context, o RemoteOptions, arg string) (*fetchedPolicy, error) {
	ref, err := a.resolvePolicy(arg)
	if err != nil {
		return nil, err
	}
	if ref.URI == engine.NativeCELModule {
		return nil, fmt.Errorf("%s is Warden's native CEL policy: it has no module and no metadata", ref.URI)
	}
	f, err := a.fetcher(o, a.storeDir())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := f.Fetch(ctx, ref.Fetch)
	if err != nil {
		return nil, err
	}
	return &fetchedPolicy{URI: ref.URI, Digest: m.Digest, Bytes: m.Bytes}, nil
}

// policyMetadata reads the metadata of a fetched policy, with kwctl's hint
// when there is none.
func policyMetadata(p *fetchedPolicy) (*metadata.Metadata, error) {
	m, err := metadata.FromModule(p.Bytes)
	if errors.Is(err, metadata.ErrMissing) {
		return nil, fmt.Errorf("no Kubewarden metadata found inside of %s: annotate the policy with `wardenctl annotate`", p.URI)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the metadata of %s: %w", p.URI, err)
	}
	return m, nil
}

// InspectOptions are the flags of inspect.
type InspectOptions struct {
	Remote RemoteOptions
	// Output is "" (for people) or yaml.
	Output string
	// ShowSignatures asks for the policy's Sigstore signatures.
	ShowSignatures bool
}

// AddFlags registers the flags, with kwctl's names.
func (o *InspectOptions) AddFlags(cmd *cobra.Command) {
	o.Remote.AddFlags(cmd)
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "Output format: yaml (default: for people)")
	cmd.Flags().BoolVar(&o.ShowSignatures, "show-signatures", false, "Show the Sigstore signatures of the policy")
}

// Validate checks the output format.
func (o *InspectOptions) Validate() error {
	if o.Output != "" && o.Output != "yaml" {
		return &usageError{fmt.Errorf("invalid --output %q: the only format is yaml", o.Output)}
	}
	return nil
}

// The annotations inspect shows as details, in this order.
var detailAnnotations = []string{
	"io.kubewarden.policy.title",
	"io.kubewarden.policy.description",
	"io.kubewarden.policy.author",
	"io.kubewarden.policy.url",
	sourceAnnotation,
	"io.kubewarden.policy.license",
}

func (a *app) inspectCommand() *cobra.Command {
	var o InspectOptions
	cmd := &cobra.Command{
		Use:   "inspect [flags] <uri|sha-prefix|path>",
		Short: "Show the metadata of a policy",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			p, err := a.fetchPolicy(cmd.Context(), o.Remote, argv[0])
			if err != nil {
				return err
			}
			m, err := policyMetadata(p)
			if err != nil {
				return err
			}
			if o.Output == "yaml" {
				b, err := jsonToYAML(m)
				if err != nil {
					return err
				}
				_, err = a.out.Write(b)
				return err
			}
			return a.printMetadata(p, m, o.ShowSignatures)
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// printMetadata prints metadata for people: details, annotations, rules,
// usage.
func (a *app) printMetadata(p *fetchedPolicy, m *metadata.Metadata, signatures bool) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Details")
	fmt.Fprintf(tw, "policy:\t%s\n", p.URI)
	fmt.Fprintf(tw, "sha256:\t%s\n", strings.TrimPrefix(p.Digest, "sha256:"))
	annotations := map[string]string{}
	for k, v := range m.Annotations {
		annotations[k] = v
	}
	for _, k := range detailAnnotations {
		if v, ok := annotations[k]; ok {
			fmt.Fprintf(tw, "%s:\t%s\n", strings.TrimPrefix(k, "io.kubewarden.policy."), v)
			delete(annotations, k)
		}
	}
	fmt.Fprintf(tw, "mutating:\t%t\n", m.Mutating)
	fmt.Fprintf(tw, "background audit:\t%t\n", m.BackgroundAudit == nil || *m.BackgroundAudit)
	fmt.Fprintf(tw, "execution mode:\t%s\n", m.Mode())
	fmt.Fprintf(tw, "policy type:\t%s\n", m.Type())
	if m.Mode() == metadata.ModeWapc {
		fmt.Fprintf(tw, "protocol version:\t%s\n", orNone(m.ProtocolVersion))
	}
	if m.MinimumKubewardenVersion != "" {
		fmt.Fprintf(tw, "minimum Kubewarden version:\t%s\n", m.MinimumKubewardenVersion)
	}
	var car []string
	for _, r := range m.ContextAwareResources {
		car = append(car, r.APIVersion+"/"+r.Kind)
	}
	fmt.Fprintf(tw, "context aware resources:\t%s\n", orNone(strings.Join(car, ", ")))
	if len(m.HostCapabilities) > 0 {
		fmt.Fprintf(tw, "host capabilities:\t%s\n", strings.Join(m.HostCapabilities, ", "))
	}
	usage, hasUsage := annotations[usageAnnotation]
	delete(annotations, usageAnnotation)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(annotations) > 0 {
		fmt.Fprintf(a.out, "\nAnnotations\n")
		keys := make([]string, 0, len(annotations))
		for k := range annotations {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tw = tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%s\n", k, oneLine(annotations[k]))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	rules, err := jsonToYAML(m.Rules)
	if err != nil {
		return err
	}
	if len(m.Rules) == 0 {
		rules = []byte("none\n")
	}
	fmt.Fprintf(a.out, "\nRules\n%s", rules)
	if hasUsage {
		fmt.Fprintf(a.out, "\nUsage\n%s\n", strings.TrimRight(usage, "\n"))
	}
	if signatures {
		fmt.Fprintf(a.out, "\nSignatures\nsignature information not available: this version of Warden does not read Sigstore signatures\n")
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// jsonToYAML writes v as block-style YAML in the order of its JSON encoding
// (struct field order), which sigs.k8s.io/yaml would sort.
func jsonToYAML(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var n yamlv3.Node
	if err := yamlv3.Unmarshal(js, &n); err != nil {
		return nil, err
	}
	plainStyle(&n)
	var sb strings.Builder
	enc := yamlv3.NewEncoder(&sb)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(sb.String()), nil
}

// plainStyle clears the flow and quoting styles that JSON input gives the
// nodes; the encoder quotes what needs quoting.
func plainStyle(n *yamlv3.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plainStyle(c)
	}
}
