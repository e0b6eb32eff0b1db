package wardenctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/metadata"
)

// splitDocuments splits a multi-document YAML (or a JSON document) into
// compact JSON documents, skipping empty ones.
func splitDocuments(doc []byte) ([]json.RawMessage, error) {
	if t := bytes.TrimSpace(doc); len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t) {
		return []json.RawMessage{compactJSON(t)}, nil
	}
	dec := yamlv3.NewDecoder(bytes.NewReader(doc))
	var out []json.RawMessage
	for i := 1; ; i++ {
		var n yamlv3.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(n.Content) == 0 || (n.Content[0].Kind == yamlv3.ScalarNode && n.Content[0].Tag == "!!null") {
			continue
		}
		b, err := yamlv3.Marshal(&n)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		js, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, js)
	}
}

// policyResource is the part of Kubewarden's policy resources that wardenctl
// evaluates, as kwctl does: module, settings and context-aware resources (and
// a group's members, expression and message). Rules are read by scan.
type policyResource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Module                string                        `json:"module"`
		Settings              json.RawMessage               `json:"settings"`
		ContextAwareResources []engine.ContextAwareResource `json:"contextAwareResources"`
		Rules                 []metadata.Rule               `json:"rules"`
		Expression            string                        `json:"expression"`
		Message               string                        `json:"message"`
		Policies              map[string]struct {
			Module                string                        `json:"module"`
			Settings              json.RawMessage               `json:"settings"`
			ContextAwareResources []engine.ContextAwareResource `json:"contextAwareResources"`
			TimeoutEvalSeconds    *int                          `json:"timeoutEvalSeconds"`
		} `json:"policies"`
	} `json:"spec"`
}

// policyKinds are the resources a policy YAML may hold.
var policyKinds = map[string]bool{
	"ClusterAdmissionPolicy":      false,
	"AdmissionPolicy":             false,
	"ClusterAdmissionPolicyGroup": true,
	"AdmissionPolicyGroup":        true,
}

// policyAPIGroup is the API group of policyKinds.
const policyAPIGroup = "policies.kubewarden.io"

// notPolicyResource says, for an error, what a document that is not a
// policy resource is ("is a v1 Pod", "has no kind", or what a policy server's
// policies.yml looks like) and what was expected.
func notPolicyResource(doc json.RawMessage, r policyResource) string {
	const expected = ", not a Kubewarden policy resource: expected apiVersion " + policyAPIGroup + "/v1 and " +
		"kind ClusterAdmissionPolicy, AdmissionPolicy, ClusterAdmissionPolicyGroup or AdmissionPolicyGroup, " +
		"with the module and settings under spec (wardenctl scaffold manifest writes one)"
	if r.Kind == "" && r.APIVersion == "" {
		if ids := policiesFileIDs(doc); len(ids) > 0 {
			if len(ids) > 3 {
				ids = append(ids[:3], "...")
			}
			return fmt.Sprintf("looks like a policy server's policies.yml (policy ids mapped to their module "+
				"and settings: %s)%s; to run one policy of a policies.yml, give its module and --settings-json",
				strings.Join(ids, ", "), expected)
		}
	}
	switch {
	case r.Kind == "" && r.APIVersion == "":
		return "has no kind and no apiVersion" + expected
	case r.Kind == "":
		return fmt.Sprintf("has apiVersion %s but no kind%s", r.APIVersion, expected)
	case r.APIVersion == "":
		return fmt.Sprintf("is a %s without apiVersion%s", r.Kind, expected)
	}
	return fmt.Sprintf("is a %s %s%s", r.APIVersion, r.Kind, expected)
}

// policiesFileIDs returns the ids of doc, sorted, when it has the shape of a
// policy server's policies.yml: an object whose every value is an object
// with a module, or a group's policies. Else it returns nil.
func policiesFileIDs(doc json.RawMessage) []string {
	var entries map[string]map[string]json.RawMessage
	if err := json.Unmarshal(doc, &entries); err != nil || len(entries) == 0 {
		return nil
	}
	ids := make([]string, 0, len(entries))
	for id, e := range entries {
		_, module := e["module"]
		_, members := e["policies"]
		if !module && !members {
			return nil
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// namedPolicy is a policy to evaluate, in the order given.
type namedPolicy struct {
	ID     string
	Config *engine.PolicyConfig
	// Rules select the requests the policy sees (scan); nil means all.
	Rules []metadata.Rule
}

// policiesFromYAML reads Kubewarden policy resources, and Kubernetes'
// admission policies with their bindings, params and Namespaces
// (kubeManifests), in document order. Every policy runs in protect mode
// and may mutate, as kwctl runs them (groups never mutate); no host
// capability is granted (see grantCapabilities). Module references go
// through resolvePolicy (relative paths, digest prefixes).
func (a *app) policiesFromYAML(doc []byte, source string) ([]namedPolicy, error) {
	docs, err := splitDocuments(doc)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", source, err)
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
	var kube kubeManifests
	var notPolicy []string // what the documents that are not policy resources are
	for i, d := range docs {
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		_ = json.Unmarshal(d, &tm) // a document that is not an object fails below
		if _, ok := policyKinds[tm.Kind]; !ok || !strings.HasPrefix(tm.APIVersion, policyAPIGroup+"/") {
			// Perhaps part of a Kubernetes admission policy.
			var r policyResource
			_ = json.Unmarshal(d, &r)
			notPolicy = append(notPolicy, fmt.Sprintf("reading %s: document %d %s%s", source, i+1, notPolicyResource(d, r), kubePolicyHint))
			if err := kube.add(fmt.Sprintf("document %d", i+1), d); err != nil {
				return nil, fmt.Errorf("reading %s: %w", source, err)
			}
			continue
		}
		var r policyResource
		if err := json.Unmarshal(d, &r); err != nil {
			return nil, fmt.Errorf("reading %s: document %d: %w", source, i+1, err)
		}
		group := policyKinds[r.Kind]
		id := r.Metadata.Name
		if id == "" {
			id = fmt.Sprintf("policy-%d", i+1)
		}
		id = unique(id)
		c := &engine.PolicyConfig{PolicyMode: engine.ModeProtect, AllowedToMutate: true}
		if !group {
			ref, err := a.resolvePolicy(r.Spec.Module)
			if err != nil {
				return nil, fmt.Errorf("%s: policy %s: %w", source, id, err)
			}
			c.Module, c.Settings, c.ContextAwareResources = ref.Fetch, r.Spec.Settings, r.Spec.ContextAwareResources
		} else {
			c.AllowedToMutate = false // groups never mutate
			c.Expression, c.Message = r.Spec.Expression, r.Spec.Message
			c.Policies = map[string]*engine.GroupMember{}
			for name, m := range r.Spec.Policies {
				ref, err := a.resolvePolicy(m.Module)
				if err != nil {
					return nil, fmt.Errorf("%s: policy %s, member %s: %w", source, id, name, err)
				}
				c.Policies[name] = &engine.GroupMember{
					Module: ref.Fetch, Settings: m.Settings, ContextAwareResources: m.ContextAwareResources,
					TimeoutEvalSeconds: m.TimeoutEvalSeconds,
				}
			}
		}
		out = append(out, namedPolicy{ID: id, Config: c, Rules: r.Spec.Rules})
	}
	if len(kube.objects) > 0 {
		if !kube.hasPolicy() {
			return nil, errors.New(notPolicy[0])
		}
		kps, err := kube.policies()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", source, err)
		}
		for _, kp := range kps {
			out = append(out, namedPolicy{ID: unique(kp.name), Config: kp.config})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("reading %s: no policy resource found", source)
	}
	return out, nil
}

// isYAMLFile reports whether a policy argument names a YAML or JSON file of
// policy resources (or of Kubernetes admission policies) rather than a
// module.
func isYAMLFile(arg string) bool {
	arg = strings.TrimPrefix(arg, "file://")
	return strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") || strings.HasSuffix(arg, ".json")
}

// configs returns the engine configuration of policies.
func configs(policies []namedPolicy) map[string]*engine.PolicyConfig {
	out := make(map[string]*engine.PolicyConfig, len(policies))
	for _, p := range policies {
		out[p.ID] = p.Config
	}
	return out
}
