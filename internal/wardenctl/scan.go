package wardenctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/metadata"
)

// ScanOptions are the flags of scan.
type ScanOptions struct {
	Remote   RemoteOptions
	Settings SettingsOptions
	// Policies are modules (URIs, paths, digest prefixes, builtin://cel) or
	// YAML or JSON files of policy resources or Kubernetes admission
	// policies.
	Policies []string
	// ExecutionMode runs modules without metadata (see run -e).
	ExecutionMode string
	// DisableWasmtimeCache compiles modules without the on-disk cache.
	DisableWasmtimeCache bool
}

// AddFlags registers the flags.
func (o *ScanOptions) AddFlags(cmd *cobra.Command) {
	o.Remote.AddFlags(cmd)
	f := cmd.Flags()
	f.StringArrayVarP(&o.Policies, "policy", "p", nil, "Policy to evaluate (repeatable): a URI, a path, a digest prefix, builtin://cel, or a YAML or JSON file of policy resources or of Kubernetes admission policies with their bindings and params")
	f.StringVarP(&o.Settings.SettingsPath, "settings-path", "s", "", "Settings of the module policies given with --policy (YAML or JSON file)")
	f.StringVar(&o.Settings.SettingsJSON, "settings-json", "", "Settings of the module policies given with --policy (JSON)")
	f.StringVarP(&o.ExecutionMode, "execution-mode", "e", "", "The runtime of modules without metadata: opa, gatekeeper, kubewarden or wasi")
	f.BoolVar(&o.DisableWasmtimeCache, "disable-wasmtime-cache", false, "Do not use the cache of compiled modules")
}

// Validate checks the flags.
func (o *ScanOptions) Validate() error {
	if len(o.Policies) == 0 {
		return &usageError{errors.New("at least one --policy is required")}
	}
	if _, err := parseExecutionMode(o.ExecutionMode); err != nil {
		return err
	}
	return o.Settings.Validate()
}

// scannedObject is one object of the manifests.
type scannedObject struct {
	source string // file, and document number when there are several
	obj    json.RawMessage
}

func (a *app) scanCommand() *cobra.Command {
	var o ScanOptions
	cmd := &cobra.Command{
		Use:   "scan [flags] --policy <policy>... <file|directory>...",
		Short: "Evaluate the objects of manifest files as CREATE requests (Warden extension)",
		Long: "Read every object of the given YAML or JSON files (multi-document YAML, List objects; " +
			"directories are walked for .yaml, .yml and .json files), build the CREATE request the API " +
			"server would send, and evaluate it with every policy whose rules select it (a policy " +
			"without rules sees every object). Rejections are listed; the exit code is non-zero " +
			"when there is any.",
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			policies, err := a.scanPolicies(o)
			if err != nil {
				return err
			}
			a.warnUnbound(ctx, policies)
			objects, err := collectObjects(argv)
			if err != nil {
				return err
			}
			mode, _ := parseExecutionMode(o.ExecutionMode)
			sess, err := a.loadSession(ctx, configs(policies), sessionOptions{Remote: o.Remote, ExecutionMode: mode, DisableCache: o.DisableWasmtimeCache})
			if err != nil {
				return err
			}
			defer sess.Close(ctx)
			for i, p := range policies {
				if p.Rules == nil {
					if lp, ok := sess.eng.Policy(p.ID); ok && lp.Metadata != nil {
						if lp.Metadata.Type() == metadata.PolicyTypeRaw {
							return fmt.Errorf("policy %s is a raw policy: it cannot evaluate Kubernetes objects", p.ID)
						}
						policies[i].Rules = lp.Metadata.Rules
					}
				}
			}

			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SOURCE\tOBJECT\tPOLICY\tMESSAGE")
			violations, evaluated := 0, 0
			for _, so := range objects {
				r, _, err := newAdmissionRequest("CREATE", so.obj, nil)
				if err != nil {
					return fmt.Errorf("%s: %w", so.source, err)
				}
				b, err := json.Marshal(r)
				if err != nil {
					return err
				}
				req, err := admission.DecodeRequest(b)
				if err != nil {
					return err
				}
				name := r.Kind.Kind + " " + r.Name
				if r.Namespace != "" {
					name = r.Kind.Kind + " " + r.Namespace + "/" + r.Name
				}
				for _, p := range policies {
					if !rulesMatch(p.Rules, r) {
						continue
					}
					evaluated++
					resp, err := sess.eng.Validate(ctx, p.ID, req, engine.OriginValidate)
					if err != nil {
						return fmt.Errorf("%s: %s: %w", so.source, p.ID, err)
					}
					if !resp.Allowed {
						violations++
						msg := ""
						if resp.Status != nil {
							msg = resp.Status.Message
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", so.source, name, p.ID, oneLine(msg))
					}
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%d objects, %d policies, %d evaluations: %d violations\n", len(objects), len(policies), evaluated, violations)
			if violations > 0 {
				return &failedError{fmt.Sprintf("%d violations", violations)}
			}
			return nil
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// scanPolicies reads the --policy flags. Module policies are named after
// their file or repository, made unique.
func (a *app) scanPolicies(o ScanOptions) ([]namedPolicy, error) {
	settings, err := o.Settings.load()
	if err != nil {
		return nil, err
	}
	var out []namedPolicy
	seen := map[string]bool{}
	unique := func(id string) string {
		for base, n := id, 2; seen[id]; n++ {
			id = fmt.Sprintf("%s-%d", base, n)
		}
		seen[id] = true
		return id
	}
	for _, arg := range o.Policies {
		if isYAMLFile(arg) {
			doc, err := a.readInput(strings.TrimPrefix(arg, "file://"))
			if err != nil {
				return nil, err
			}
			ps, err := a.policiesFromYAML(doc, arg)
			if err != nil {
				return nil, err
			}
			for _, p := range ps {
				p.ID = unique(p.ID)
				if len(p.Rules) == 0 {
					p.Rules = nil // from the module's metadata
				}
				out = append(out, p)
			}
			continue
		}
		ref, err := a.resolvePolicy(arg)
		if err != nil {
			return nil, err
		}
		out = append(out, namedPolicy{ID: unique(policyName(ref.URI)), Config: &engine.PolicyConfig{
			Module: ref.Fetch, PolicyMode: engine.ModeProtect, AllowedToMutate: true, Settings: settings,
		}})
	}
	grantCapabilities(out, []string{"*"})
	return out, nil
}

// policyName is a short name for a module URI: its file or repository name,
// without extension or tag.
func policyName(uri string) string {
	if uri == engine.NativeCELModule {
		return "cel"
	}
	n := lastElem(uri)
	n, _, _ = strings.Cut(n, "@")
	n, _, _ = strings.Cut(n, ":")
	n = strings.TrimSuffix(n, ".wasm")
	if n == "" {
		return "policy"
	}
	return n
}

// collectObjects reads the objects of files and directories, in order.
func collectObjects(paths []string) ([]scannedObject, error) {
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && path != p && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
				found = append(found, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		sort.Strings(found)
		files = append(files, found...)
	}
	var out []scannedObject
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		docs, err := splitDocuments(doc)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		for i, d := range docs {
			source := f
			if len(docs) > 1 {
				source = fmt.Sprintf("%s#%d", f, i+1)
			}
			objs, err := expandList(d)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", source, err)
			}
			for _, o := range objs {
				out = append(out, scannedObject{source: source, obj: o})
			}
		}
	}
	return out, nil
}

// expandList returns the items of a List, or the object itself.
func expandList(doc json.RawMessage) ([]json.RawMessage, error) {
	var l struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(doc, &l); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if strings.HasSuffix(l.Kind, "List") && l.Items != nil {
		return l.Items, nil
	}
	return []json.RawMessage{doc}, nil
}

// rulesMatch reports whether webhook rules select a request; no rules
// select everything.
func rulesMatch(rules []metadata.Rule, r *admissionRequest) bool {
	if rules == nil {
		return true
	}
	for _, rule := range rules {
		if matchAny(rule.APIGroups, r.Kind.Group) && matchAny(rule.APIVersions, r.Kind.Version) &&
			matchAny(rule.Operations, r.Operation) && matchResource(rule.Resources, r.Resource.Resource) {
			return true
		}
	}
	return false
}

func matchAny(values []string, v string) bool {
	return slices.Contains(values, "*") || slices.Contains(values, v)
}

// matchResource matches a main resource (no subresource) against rule
// resources: "*", "*/*", "pods" or "pods/*".
func matchResource(values []string, resource string) bool {
	for _, v := range values {
		if v == "*" || v == "*/*" || v == resource || v == resource+"/*" {
			return true
		}
	}
	return false
}
