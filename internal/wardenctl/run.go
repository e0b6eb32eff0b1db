package wardenctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/engine"
)

// RunOptions are the flags of run, shared by bench.
type RunOptions struct {
	Remote   RemoteOptions
	Settings SettingsOptions
	// RequestPath is the request file ("-": standard input).
	RequestPath string
	// ExecutionMode is kwctl's --execution-mode: opa, gatekeeper,
	// kubewarden or wasi.
	ExecutionMode string
	// Raw evaluates a raw request (compat 2.5).
	Raw bool
	// AllowContextAware grants the policy the Kubernetes resources of its
	// metadata; Warden cannot yet, so it is refused.
	AllowContextAware bool
	// AllowedHostCapabilities are the host capabilities granted ("*": all).
	AllowedHostCapabilities []string
	// DisableWasmtimeCache compiles modules without the on-disk cache (the
	// flag keeps kwctl's name).
	DisableWasmtimeCache bool
}

// AddFlags registers the flags, with kwctl's names.
func (o *RunOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	o.Remote.AddFlags(cmd)
	o.Remote.Verification.AddFlags(cmd)
	f.StringVarP(&o.Settings.SettingsPath, "settings-path", "s", "", "File containing the settings for this policy (YAML or JSON)")
	f.StringVar(&o.Settings.SettingsJSON, "settings-json", "", "JSON string containing the settings for this policy")
	f.StringVarP(&o.RequestPath, "request-path", "r", "", "File containing the admission request (an AdmissionReview or an AdmissionRequest, JSON or YAML; - for standard input)")
	f.StringVarP(&o.ExecutionMode, "execution-mode", "e", "", "The runtime to use: opa, gatekeeper, kubewarden or wasi (a module with metadata must agree)")
	f.BoolVar(&o.Raw, "raw", false, "Validate a raw request")
	f.BoolVar(&o.AllowContextAware, "allow-context-aware", false, "Grant access to the Kubernetes resources of the policy's contextAwareResources (not available in Warden yet)")
	f.StringSliceVar(&o.AllowedHostCapabilities, "allowed-host-capabilities", []string{"*"}, "Host capabilities the policy may use (\"*\": all)")
	f.BoolVar(&o.DisableWasmtimeCache, "disable-wasmtime-cache", false, "Do not use the cache of compiled modules")
}

// Validate checks the flags.
func (o *RunOptions) Validate() error {
	if o.RequestPath == "" {
		return &usageError{errors.New("--request-path is required")}
	}
	if _, err := parseExecutionMode(o.ExecutionMode); err != nil {
		return err
	}
	if err := o.Remote.Verification.Validate(); err != nil {
		return err
	}
	if o.AllowContextAware {
		return errors.New("--allow-context-aware: this version of Warden cannot give policies access to Kubernetes resources (the kubernetes host capabilities are not available yet)")
	}
	return o.Settings.Validate()
}

// prepared is what run and bench evaluate: policies, loaded, and a request.
type prepared struct {
	sess     *session
	policies []namedPolicy
	req      *admission.Request
	raw      json.RawMessage
}

// prepare resolves the policy argument (a module or a YAML file of policy
// resources), reads the request and loads the policies.
func (a *app) prepare(ctx context.Context, arg string, o *RunOptions) (*prepared, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	mode, _ := parseExecutionMode(o.ExecutionMode)
	var policies []namedPolicy
	if isYAMLFile(arg) {
		if o.Raw {
			return nil, &usageError{fmt.Errorf("--raw cannot be used with a YAML file of policy resources: %s", arg)}
		}
		doc, err := a.readInput(strings.TrimPrefix(arg, "file://"))
		if err != nil {
			return nil, err
		}
		if policies, err = a.policiesFromYAML(doc, arg); err != nil {
			return nil, err
		}
		if o.Settings != (SettingsOptions{}) {
			a.logger().WarnContext(ctx, "--settings-path and --settings-json are ignored: the settings come from the policy resources")
		}
	} else {
		ref, err := a.resolvePolicy(arg)
		if err != nil {
			return nil, err
		}
		settings, err := o.Settings.load()
		if err != nil {
			return nil, err
		}
		policies = []namedPolicy{{ID: policyName(ref.URI), Config: &engine.PolicyConfig{
			Module:           ref.Fetch,
			PolicyMode:       engine.ModeProtect,
			AllowedToMutate:  true,
			Settings:         settings,
			HostCapabilities: o.AllowedHostCapabilities,
		}}}
	}
	grantCapabilities(policies, o.AllowedHostCapabilities)
	doc, err := a.readInput(o.RequestPath)
	if err != nil {
		return nil, err
	}
	req, raw, err := decodeRequest(doc, o.Raw)
	if err != nil {
		return nil, err
	}
	sess, err := a.loadSession(ctx, configs(policies), sessionOptions{
		Remote:        o.Remote,
		ExecutionMode: mode,
		DisableCache:  o.DisableWasmtimeCache,
	})
	if err != nil {
		return nil, err
	}
	return &prepared{sess: sess, policies: policies, req: req, raw: raw}, nil
}

func (a *app) runCommand() *cobra.Command {
	var o RunOptions
	cmd := &cobra.Command{
		Use:   "run [flags] --request-path <file> <uri|sha-prefix|path|policies.yaml>",
		Short: "Evaluate a request with a policy, as the policy server does",
		Long: "Evaluate an admission request with a policy and print the AdmissionResponse as JSON.\n\n" +
			"The policy is a URI (registry://, https://, file://, builtin://cel), a local path, the " +
			"digest prefix of a policy in the store, or a YAML file of ClusterAdmissionPolicy, " +
			"AdmissionPolicy and policy group resources (their module, settings and members are used, " +
			"and each is evaluated with the same request). The policy runs in protect mode and may mutate. " +
			"A rejection is an answer: the exit code is 0 whenever the request was evaluated.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ctx := cmd.Context()
			p, err := a.prepare(ctx, argv[0], &o)
			if err != nil {
				return err
			}
			defer p.sess.Close(ctx)
			for _, pol := range p.policies {
				resp, err := p.sess.evaluate(ctx, pol.ID, p.req, p.raw)
				if err != nil {
					return fmt.Errorf("evaluating %s: %w", pol.ID, err)
				}
				b, err := json.Marshal(resp)
				if err != nil {
					return err
				}
				if _, err := fmt.Fprintf(a.out, "%s\n", b); err != nil {
					return err
				}
			}
			return nil
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// grantCapabilities sets the host capabilities of policies and of the
// members of policy groups.
func grantCapabilities(policies []namedPolicy, caps []string) {
	for _, p := range policies {
		if !p.Config.IsGroup() {
			p.Config.HostCapabilities = caps
			continue
		}
		for _, m := range p.Config.Policies {
			m.HostCapabilities = caps
		}
	}
}
