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
	"github.com/wardenhq/warden/internal/wasm"
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
	// Raw evaluates a raw request (docs/compatibility.md#raw-policies).
	Raw bool
	// AllowContextAware grants a policy given as a module the Kubernetes
	// resources its metadata lists (contextAwareResources); without it, it
	// reads none, as in kwctl. Policies of a YAML file get the resources
	// their resource lists.
	AllowContextAware bool
	// AllowedHostCapabilities are the host capabilities granted ("*": all).
	AllowedHostCapabilities []string
	// DisableWasmtimeCache compiles modules without the on-disk cache (the
	// flag keeps kwctl's name).
	DisableWasmtimeCache bool
	// RecordHostCapabilities, when set, is the file the host calls and
	// their answers are written to, in kwctl's session format.
	RecordHostCapabilities string
	// ReplayHostCapabilities, when set, is a session file (kwctl's format)
	// that answers the host calls instead of registries, DNS and clusters.
	ReplayHostCapabilities string
	// MaxRequestFileBytes is the largest request file read
	// (--max-request-file-bytes).
	MaxRequestFileBytes int64
	// MaxHostCallBytes and MaxResponseBytes cap a host call's payload and
	// a policy's answer, as the policy server's flags of the same names.
	MaxHostCallBytes, MaxResponseBytes int
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
	f.BoolVar(&o.AllowContextAware, "allow-context-aware", false, "Let the policy read the Kubernetes resources its metadata lists (contextAwareResources); review them first with inspect")
	f.StringSliceVar(&o.AllowedHostCapabilities, "allowed-host-capabilities", []string{"*"}, "Host capabilities the policy may use (\"*\": all)")
	f.BoolVar(&o.DisableWasmtimeCache, "disable-wasmtime-cache", false, "Do not use the cache of compiled modules")
	f.StringVar(&o.RecordHostCapabilities, "record-host-capabilities-interactions", "", "Write the policy's host calls and their answers to `FILE`, a session that --replay-host-capabilities-interactions can replay")
	f.StringVar(&o.ReplayHostCapabilities, "replay-host-capabilities-interactions", "", "Answer the policy's host calls from the session in `FILE` (recorded by wardenctl or kwctl), without reaching registries, DNS or Kubernetes")
	f.Int64Var(&o.MaxRequestFileBytes, "max-request-file-bytes", defaultMaxRequestFileBytes, "Largest request file (or standard input) read; a larger one is refused before it is read")
	f.IntVar(&o.MaxHostCallBytes, "max-host-call-payload-bytes", wasm.DefaultMaxHostCallBytes, "Largest payload the policy may hand the host in one host call; a larger call fails, and the policy gets that error")
	f.IntVar(&o.MaxResponseBytes, "max-policy-response-bytes", wasm.DefaultMaxResponseBytes, "Largest answer the policy may give; a larger one fails the evaluation")
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
	if o.MaxRequestFileBytes <= 0 || o.MaxHostCallBytes <= 0 || o.MaxResponseBytes <= 0 {
		return &usageError{errors.New("--max-request-file-bytes, --max-host-call-payload-bytes and --max-policy-response-bytes must be positive")}
	}
	if o.RecordHostCapabilities != "" && o.ReplayHostCapabilities != "" {
		return &usageError{errors.New("--record-host-capabilities-interactions and --replay-host-capabilities-interactions cannot be used together")}
	}
	return o.Settings.Validate()
}

// prepared is what run and bench evaluate: policies, loaded, and a request.
type prepared struct {
	sess     *session
	policies []namedPolicy
	req      *admission.Request
	raw      json.RawMessage
	hostCaps *hostCapabilities
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

			ContextAwareFromMetadata: o.AllowContextAware,
		}}}
	}
	grantCapabilities(policies, o.AllowedHostCapabilities)
	a.warnUnbound(ctx, policies)
	doc, err := a.readRequestFile(o.RequestPath, o.MaxRequestFileBytes)
	if err != nil {
		return nil, err
	}
	req, raw, err := decodeRequest(doc, o.Raw)
	if err != nil {
		return nil, err
	}
	hostCaps, err := a.hostCapabilities(o, policies)
	if err != nil {
		return nil, err
	}
	sess, err := a.loadSession(ctx, configs(policies), sessionOptions{
		Remote:           o.Remote,
		ExecutionMode:    mode,
		DisableCache:     o.DisableWasmtimeCache,
		HostCapabilities: hostCaps.host,
		MaxHostCallBytes: o.MaxHostCallBytes,
		MaxResponseBytes: o.MaxResponseBytes,
	})
	if err != nil {
		hostCaps.close()
		return nil, err
	}
	sess.closers = append(sess.closers, hostCaps.close)
	a.warnContextAware(ctx, sess, policies)
	return &prepared{sess: sess, policies: policies, req: req, raw: raw, hostCaps: hostCaps}, nil
}

func (a *app) runCommand() *cobra.Command {
	var o RunOptions
	cmd := &cobra.Command{
		Use:   "run [flags] --request-path <file> <uri|sha-prefix|path|policies.yaml>",
		Short: "Evaluate a request with a policy, as the policy server does",
		Long: "Evaluate an admission request with a policy and print the AdmissionResponse as JSON.\n\n" +
			"The policy is a URI (registry://, https://, file://, builtin://cel, builtin://vap, builtin://map), a " +
			"local path, the digest prefix of a policy in the store, or a YAML or JSON file of ClusterAdmissionPolicy, " +
			"AdmissionPolicy and policy group resources (their module, settings and members are used, " +
			"and each is evaluated with the same request). The file may also hold Kubernetes " +
			"ValidatingAdmissionPolicies and MutatingAdmissionPolicies with their bindings, params and Namespaces: " +
			"each runs as builtin://vap or builtin://map, and the response is the API server's (message, code of the " +
			"reason, warnings, audit annotations, JSONPatch). The policy runs in protect mode and may mutate. " +
			"A rejection is an answer: the exit code is 0 when the policy answered, accepting or rejecting. " +
			"When the policy's evaluation failed (it trapped, ran out of time or memory, or its answer was " +
			"unreadable or over --max-policy-response-bytes), the response is printed and the exit code is 1.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ctx := cmd.Context()
			p, err := a.prepare(ctx, argv[0], &o)
			if err != nil {
				return err
			}
			defer p.sess.Close(ctx)
			err = a.runPolicies(ctx, p)
			if ferr := p.hostCaps.finish(ctx, a.logger()); err == nil {
				err = ferr
			}
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// runPolicies evaluates the request with every policy and prints the
// answers. An evaluation that failed (not a rejection) is an error, once
// every answer is printed.
func (a *app) runPolicies(ctx context.Context, p *prepared) error {
	var failures []string
	ctx = engine.WithFailureReport(ctx, func(policyID, reason string) {
		failures = append(failures, fmt.Sprintf("the evaluation of %s failed: %s", policyID, reason))
	})
	for _, pol := range p.policies {
		resp, err := p.sess.evaluate(ctx, pol.ID, p.req, p.raw)
		if err != nil {
			return fmt.Errorf("evaluating %s: %w", pol.ID, err)
		}
		b, err := admission.Marshal(resp)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(a.out, "%s\n", b); err != nil {
			return err
		}
	}
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "; "))
	}
	return nil
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
