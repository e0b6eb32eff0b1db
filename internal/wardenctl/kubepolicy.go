package wardenctl

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/observability"
)

// Kubernetes' own admission policies in a manifest file: a
// ValidatingAdmissionPolicy or MutatingAdmissionPolicy, with its bindings,
// the objects its paramKind names and Namespaces, becomes a builtin://vap or
// builtin://map policy whose settings hold them
// (docs/kubernetes-policies.md).

// admissionRegistrationV1 is the apiVersion of the policies and bindings.
const admissionRegistrationV1 = "admissionregistration.k8s.io/v1"

// kubePolicyKinds maps the kind of a Kubernetes admission policy to its
// binding's kind and its module.
var kubePolicyKinds = map[string]struct{ binding, module string }{
	"ValidatingAdmissionPolicy": {"ValidatingAdmissionPolicyBinding", engine.NativeVAPModule},
	"MutatingAdmissionPolicy":   {"MutatingAdmissionPolicyBinding", engine.NativeMAPModule},
}

// isKubePolicyModule reports whether uri is builtin://vap or builtin://map.
func isKubePolicyModule(uri string) bool {
	return uri == engine.NativeVAPModule || uri == engine.NativeMAPModule
}

// kubeObject is what wardenctl reads of a document that is not a Warden
// policy resource: enough to tell policies, bindings, params and
// Namespaces apart and to put them together.
type kubeObject struct {
	where      string // "document 3", or "document 3, item 2" of a List
	raw        json.RawMessage
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		PolicyName string `json:"policyName"`
		ParamKind  *struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		} `json:"paramKind"`
	} `json:"spec"`
}

// isKubePolicy reports whether o is a ValidatingAdmissionPolicy or a
// MutatingAdmissionPolicy.
func (o *kubeObject) isKubePolicy() bool {
	_, ok := kubePolicyKinds[o.Kind]
	return ok && o.APIVersion == admissionRegistrationV1
}

// isBinding reports whether o is a binding of either kind.
func (o *kubeObject) isBinding() bool {
	return o.APIVersion == admissionRegistrationV1 &&
		(o.Kind == kubePolicyKinds["ValidatingAdmissionPolicy"].binding || o.Kind == kubePolicyKinds["MutatingAdmissionPolicy"].binding)
}

// describe says what o is, for an error: "is a v1 Pod", "has no kind".
func (o *kubeObject) describe() string {
	switch {
	case o.Kind == "" && o.APIVersion == "":
		return "has no kind and no apiVersion"
	case o.Kind == "":
		return "has apiVersion " + o.APIVersion + " but no kind"
	case o.APIVersion == "":
		return "is a " + o.Kind + " without apiVersion"
	}
	return "is a " + o.APIVersion + " " + o.Kind
}

func (o *kubeObject) isNamespace() bool { return o.APIVersion == "v1" && o.Kind == "Namespace" }

// kubeManifests collects the documents of a file that are not Warden policy
// resources, in order, and makes policies of them.
type kubeManifests struct {
	objects []*kubeObject
}

// add reads a document that is not a Warden policy resource; a List (as
// kubectl get -o yaml writes) adds its items.
func (k *kubeManifests) add(where string, doc json.RawMessage) error {
	items, err := expandList(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	for i, item := range items {
		o := &kubeObject{where: where, raw: item}
		if len(items) > 1 || string(item) != string(doc) {
			o.where = fmt.Sprintf("%s, item %d", where, i+1)
		}
		// An object of another shape cannot be part of an admission
		// policy: it is reported as unused.
		_ = json.Unmarshal(item, o)
		k.objects = append(k.objects, o)
	}
	return nil
}

// hasPolicy reports whether a ValidatingAdmissionPolicy or
// MutatingAdmissionPolicy was collected.
func (k *kubeManifests) hasPolicy() bool {
	return slices.ContainsFunc(k.objects, (*kubeObject).isKubePolicy)
}

// kubePolicy is a Kubernetes admission policy of a file, made into a
// policy: its id is still to be made unique among the file's policies.
type kubePolicy struct {
	name   string
	config *engine.PolicyConfig
}

// policies puts the collected objects together: each policy gets the
// bindings that name it, the objects of its paramKind and every Namespace.
// Every object must belong to a policy: a binding of a policy the file does
// not hold, or an object no policy's paramKind names, is an error, since
// it would be silently unused.
func (k *kubeManifests) policies() ([]kubePolicy, error) {
	var out []kubePolicy
	used := make([]bool, len(k.objects))
	seen := map[string]string{} // kind/name -> where
	var namespaces []json.RawMessage
	for i, o := range k.objects {
		if o.isNamespace() {
			namespaces = append(namespaces, o.raw)
			used[i] = true
		}
	}
	for i, p := range k.objects {
		if !p.isKubePolicy() {
			continue
		}
		if p.Metadata.Name == "" {
			return nil, fmt.Errorf("%s: the %s has no metadata.name", p.where, p.Kind)
		}
		key := p.Kind + "/" + p.Metadata.Name
		if prev, dup := seen[key]; dup {
			return nil, fmt.Errorf("%s: a second %s named %s (the first is %s)", p.where, p.Kind, p.Metadata.Name, prev)
		}
		seen[key] = p.where
		used[i] = true
		settings := struct {
			Policy     json.RawMessage   `json:"policy"`
			Bindings   []json.RawMessage `json:"bindings"`
			Params     []json.RawMessage `json:"params"`
			Namespaces []json.RawMessage `json:"namespaces,omitempty"`
		}{Policy: p.raw, Bindings: []json.RawMessage{}, Params: []json.RawMessage{}, Namespaces: namespaces}
		kind := kubePolicyKinds[p.Kind]
		for j, o := range k.objects {
			switch {
			case o.APIVersion == admissionRegistrationV1 && o.Kind == kind.binding && o.Spec.PolicyName == p.Metadata.Name:
				settings.Bindings = append(settings.Bindings, o.raw)
				used[j] = true
			case p.Spec.ParamKind != nil && o.APIVersion == p.Spec.ParamKind.APIVersion && o.Kind == p.Spec.ParamKind.Kind:
				settings.Params = append(settings.Params, o.raw)
				used[j] = true
			}
		}
		b, err := json.Marshal(settings)
		if err != nil {
			return nil, err
		}
		out = append(out, kubePolicy{
			name: p.Metadata.Name,
			config: &engine.PolicyConfig{Module: kind.module, PolicyMode: engine.ModeProtect, AllowedToMutate: true,
				Settings: b},
		})
	}
	for i, o := range k.objects {
		if used[i] {
			continue
		}
		if o.isBinding() {
			return nil, fmt.Errorf("%s: the %s %s binds %q, and the file holds no %s of that name: put the policy and its bindings in the same file",
				o.where, o.Kind, o.Metadata.Name, o.Spec.PolicyName, strings.TrimSuffix(o.Kind, "Binding"))
		}
		return nil, fmt.Errorf("%s %s, which no policy of the file uses: a file of Kubernetes admission policies holds "+
			"ValidatingAdmissionPolicies and MutatingAdmissionPolicies (%s), their bindings, the objects their paramKind "+
			"names, and v1 Namespaces", o.where, o.describe(), admissionRegistrationV1)
	}
	return out, nil
}

// kubePolicyHint completes the error about a document that is neither a
// Warden policy resource nor part of a Kubernetes admission policy.
const kubePolicyHint = "; or a ValidatingAdmissionPolicy or MutatingAdmissionPolicy (" + admissionRegistrationV1 +
	") with its bindings, params and Namespaces"

// warnUnbound says on standard error which Kubernetes admission policies
// have no binding in their settings: the API server evaluates such a
// policy for no request, and so does Warden (every request is allowed).
func (a *app) warnUnbound(ctx context.Context, policies []namedPolicy) {
	for _, p := range policies {
		if p.Config == nil || !isKubePolicyModule(p.Config.Module) || bindsPolicy(p.Config.Settings) {
			continue
		}
		a.logger().WarnContext(ctx, "the policy has no binding: the API server evaluates it for no request, so every request is allowed; add a binding that names it",
			observability.KeyPolicyID, p.ID, "module", p.Config.Module)
	}
}

// bindsPolicy reports whether builtin://vap or builtin://map settings hold
// a binding of their policy. Settings that cannot be read are left to the
// policy's load to refuse.
func bindsPolicy(settings json.RawMessage) bool {
	var s struct {
		Policy struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"policy"`
		Bindings []bindingRef `json:"bindings"`
	}
	if err := json.Unmarshal(settings, &s); err != nil {
		return true
	}
	return slices.ContainsFunc(s.Bindings, func(b bindingRef) bool { return b.Spec.PolicyName == s.Policy.Metadata.Name })
}

// bindingRef is the policy a binding names.
type bindingRef struct {
	Spec struct {
		PolicyName string `json:"policyName"`
	} `json:"spec"`
}

// suiteManifest reads the policy of a test suite that names a manifest
// file: one policy resource, or one Kubernetes admission policy with its
// bindings and params. Its settings come from the file, so the suite and
// its cases give none.
func (a *app) suiteManifest(ctx context.Context, dir string, s *testSuite) (*namedPolicy, error) {
	doc, err := a.readInput(relativeTo(dir, strings.TrimPrefix(s.Policy, "file://")))
	if err != nil {
		return nil, err
	}
	ps, err := a.policiesFromYAML(doc, s.Policy)
	if err != nil {
		return nil, err
	}
	if len(ps) != 1 {
		ids := make([]string, len(ps))
		for i, p := range ps {
			ids[i] = p.ID
		}
		return nil, fmt.Errorf("%s holds %d policies (%s): a suite tests one", s.Policy, len(ps), strings.Join(ids, ", "))
	}
	if s.Settings != nil || slices.ContainsFunc(s.Tests, func(tc testCase) bool { return tc.Settings != nil }) {
		return nil, fmt.Errorf("the settings of %s come from the file: remove settings from the suite and its cases", s.Policy)
	}
	grantCapabilities(ps, []string{"*"})
	a.warnUnbound(ctx, ps)
	return &ps[0], nil
}

// routeLibraryLogs sends klog's lines to wardenctl's log, with its
// informational lines at debug level: the API server's admission plugins
// (builtin://vap and builtin://map) and client-go log with klog, which
// would otherwise print its own text lines on standard error. They show
// with -v; warnings and errors show as wardenctl's own. klog is global:
// the last command run in the process owns it.
func (a *app) routeLibraryLogs() {
	klog.SetSlogLogger(slog.New(demoteInfo{a.logger().Handler()}))
}

// demoteInfo is a handler that turns records below warning level into
// debug records.
type demoteInfo struct{ slog.Handler }

func (h demoteInfo) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, demoted(l))
}

func (h demoteInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demoted(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h demoteInfo) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoteInfo{h.Handler.WithAttrs(attrs)}
}

func (h demoteInfo) WithGroup(name string) slog.Handler { return demoteInfo{h.Handler.WithGroup(name)} }

func demoted(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}
