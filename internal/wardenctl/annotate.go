package wardenctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/wasm"
)

// AnnotateOptions are the flags of annotate.
type AnnotateOptions struct {
	// MetadataPath is the metadata.yml to embed.
	MetadataPath string
	// OutputPath is the annotated module to write.
	OutputPath string
	// UsagePath is a file (usually README.md) embedded as the
	// io.kubewarden.policy.usage annotation.
	UsagePath string
}

// AddFlags registers the flags, with kwctl's names.
func (o *AnnotateOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.MetadataPath, "metadata-path", "m", "", "File containing the metadata (metadata.yml)")
	cmd.Flags().StringVarP(&o.OutputPath, "output-path", "o", "", "Output file")
	cmd.Flags().StringVarP(&o.UsagePath, "usage-path", "u", "", "File containing the usage information of the policy (e.g. README.md)")
}

// Validate checks the required flags.
func (o *AnnotateOptions) Validate() error {
	if o.MetadataPath == "" || o.OutputPath == "" {
		return &usageError{errors.New("--metadata-path and --output-path are required")}
	}
	return nil
}

// protocolUnknown is what kwctl records as the protocol version of modules
// that do not speak waPC.
const protocolUnknown = "Unknown"

func (a *app) annotateCommand() *cobra.Command {
	var o AnnotateOptions
	cmd := &cobra.Command{
		Use:   "annotate [flags] --metadata-path <metadata.yml> --output-path <out.wasm> <policy.wasm>",
		Short: "Add Kubewarden metadata to a WebAssembly module",
		Long: "Write metadata.yml (and the usage file, as the io.kubewarden.policy.usage annotation) into " +
			"the io.kubewarden.metadata custom section of a module, replacing any metadata it had. " +
			"The metadata is checked first; a waPC module without protocolVersion is asked for it, " +
			"as kwctl does.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			module, err := os.ReadFile(argv[0])
			if err != nil {
				return fmt.Errorf("reading the module: %w", err)
			}
			doc, err := os.ReadFile(o.MetadataPath)
			if err != nil {
				return fmt.Errorf("reading the metadata: %w", err)
			}
			m, err := parseMetadataFile(doc)
			if err != nil {
				return fmt.Errorf("%s: %w", o.MetadataPath, err)
			}
			if o.UsagePath != "" {
				usage, err := os.ReadFile(o.UsagePath)
				if err != nil {
					return fmt.Errorf("reading the usage: %w", err)
				}
				if m.Annotations == nil {
					m.Annotations = map[string]string{}
				}
				m.Annotations[usageAnnotation] = string(usage)
			}
			if err := a.completeMetadata(cmd.Context(), module, m); err != nil {
				return err
			}
			out, err := metadata.Embed(module, m)
			if err != nil {
				return fmt.Errorf("annotating %s: %w", argv[0], err)
			}
			if err := os.WriteFile(o.OutputPath, out, 0o644); err != nil {
				return fmt.Errorf("writing the annotated module: %w", err)
			}
			return nil
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// parseMetadataFile reads and checks a metadata.yml.
func parseMetadataFile(doc []byte) (*metadata.Metadata, error) {
	var keys map[string]json.RawMessage
	if err := yaml.Unmarshal(doc, &keys); err != nil {
		return nil, fmt.Errorf("decoding metadata: %w", err)
	}
	if _, ok := keys["mutating"]; !ok {
		return nil, errors.New("invalid metadata: mutating is required (true or false)")
	}
	m, err := metadata.Parse(doc)
	if err != nil {
		return nil, err
	}
	if err := validateMetadata(m); err != nil {
		return nil, fmt.Errorf("invalid metadata: %w", err)
	}
	return m, nil
}

var validOperations = []string{"CREATE", "UPDATE", "DELETE", "CONNECT", "*"}

// validateMetadata checks metadata as Kubewarden does before embedding it:
// known mode and type, rules shaped as Kubernetes webhook rules.
func validateMetadata(m *metadata.Metadata) error {
	switch m.Mode() {
	case metadata.ModeWapc, metadata.ModeWASI, metadata.ModeOPA, metadata.ModeGatekeeper:
	default:
		return fmt.Errorf("unknown executionMode %q: use kubewarden-wapc, wasi, opa or gatekeeper", m.ExecutionMode)
	}
	switch m.Type() {
	case metadata.PolicyTypeKubernetes, metadata.PolicyTypeRaw:
	default:
		return fmt.Errorf("unknown policyType %q: use kubernetes or raw", m.PolicyType)
	}
	if m.Mode() == metadata.ModeWapc && m.ProtocolVersion != "" && m.ProtocolVersion != metadata.ProtocolV1 {
		return fmt.Errorf("protocolVersion %q: waPC policies speak protocol v1", m.ProtocolVersion)
	}
	for i, r := range m.Rules {
		if err := validateRule(r); err != nil {
			return fmt.Errorf("rule %d: %w", i+1, err)
		}
	}
	for i, r := range m.ContextAwareResources {
		if r.APIVersion == "" || r.Kind == "" {
			return fmt.Errorf("contextAwareResources %d: apiVersion and kind are required", i+1)
		}
	}
	return nil
}

func validateRule(r metadata.Rule) error {
	for _, f := range []struct {
		name   string
		values []string
	}{{"apiGroups", r.APIGroups}, {"apiVersions", r.APIVersions}, {"resources", r.Resources}, {"operations", r.Operations}} {
		if len(f.values) == 0 {
			return fmt.Errorf("%s must not be empty", f.name)
		}
		if len(f.values) > 1 && slices.Contains(f.values, "*") {
			return fmt.Errorf("%s: '*' must be the only value when present", f.name)
		}
	}
	for _, op := range r.Operations {
		if !slices.Contains(validOperations, op) {
			return fmt.Errorf("invalid operation %q: use %s", op, strings.Join(validOperations, ", "))
		}
	}
	for _, res := range r.Resources {
		if res == "" || strings.Count(res, "/") > 1 || strings.HasPrefix(res, "/") || strings.HasSuffix(res, "/") {
			return fmt.Errorf("invalid resource %q: use resource, resource/subresource, */subresource or *", res)
		}
	}
	if slices.Contains(r.APIVersions, "") {
		return errors.New("apiVersions must not hold an empty version")
	}
	return nil
}

// completeMetadata checks that the module fits the metadata and fills the
// protocol version: asked from a waPC module, Unknown for the others.
func (a *app) completeMetadata(ctx context.Context, module []byte, m *metadata.Metadata) error {
	rego, err := isRego(module)
	if err != nil {
		return fmt.Errorf("reading the module: %w", err)
	}
	switch mode := m.Mode(); {
	case rego && mode != metadata.ModeOPA && mode != metadata.ModeGatekeeper:
		return fmt.Errorf("the module is a Rego policy: its executionMode must be opa or gatekeeper, not %s", mode)
	case !rego && (mode == metadata.ModeOPA || mode == metadata.ModeGatekeeper):
		return fmt.Errorf("executionMode %s needs a Rego module (built with opa build -t wasm)", mode)
	case mode != metadata.ModeWapc:
		if m.ProtocolVersion == "" {
			m.ProtocolVersion = protocolUnknown
		}
		return nil
	case m.ProtocolVersion != "":
		return nil
	}
	v, err := a.wapcProtocolVersion(ctx, module)
	if err != nil {
		return fmt.Errorf("asking the module for its waPC protocol version (or set protocolVersion: v1 in the metadata): %w", err)
	}
	if v != metadata.ProtocolV1 {
		return fmt.Errorf("the module speaks waPC protocol %q: Kubewarden and Warden run protocol v1 only", v)
	}
	m.ProtocolVersion = v
	return nil
}

// wapcProtocolVersion calls the guest's protocol_version operation.
func (a *app) wapcProtocolVersion(ctx context.Context, module []byte) (string, error) {
	rt, err := wasm.NewRuntime(ctx, wasm.Config{CacheDir: a.wasmCacheDir(), Logger: a.logger()})
	if err != nil {
		return "", err
	}
	defer rt.Close(ctx)
	mod, err := rt.Compile(ctx, module)
	if err != nil {
		return "", err
	}
	w, err := rt.NewWapc(ctx, mod, 1)
	if err != nil {
		return "", err
	}
	defer w.Close(ctx)
	out, err := w.Call(ctx, noHostCalls{}, "protocol_version", nil)
	if err != nil {
		return "", err
	}
	var v string
	if err := json.Unmarshal(out, &v); err != nil {
		return "", fmt.Errorf("the answer %q is not a JSON string", out)
	}
	return strings.ToLower(v), nil
}

// noHostCalls answers no host call: protocol_version needs none.
type noHostCalls struct{}

// HostCall implements wasm.HostCaller.
func (noHostCalls) HostCall(context.Context, string, string, string, []byte) ([]byte, error) {
	return nil, errors.New("host calls are not available while reading the protocol version")
}
