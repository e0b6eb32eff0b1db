package controller

import (
	"encoding/json"
	"fmt"
	"sort"

	"sigs.k8s.io/yaml"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// policyEntry is one entry of a policy server's policies.yml (compat 3.2),
// with the JSON names the policy server reads.
type policyEntry struct {
	Module                string                            `json:"module,omitempty"`
	PolicyMode            string                            `json:"policyMode,omitempty"`
	AllowedToMutate       bool                              `json:"allowedToMutate,omitempty"`
	Settings              json.RawMessage                   `json:"settings,omitempty"`
	ContextAwareResources []policiesv1.ContextAwareResource `json:"contextAwareResources,omitempty"`
	Message               string                            `json:"message,omitempty"`
	TimeoutEvalSeconds    *int32                            `json:"timeoutEvalSeconds,omitempty"`
	HostCapabilities      []string                          `json:"hostCapabilities,omitempty"`
	Expression            string                            `json:"expression,omitempty"`
	Policies              map[string]groupMemberEntry       `json:"policies,omitempty"`
}

// groupMemberEntry is a member of a group entry.
type groupMemberEntry struct {
	Module                string                            `json:"module"`
	Settings              json.RawMessage                   `json:"settings,omitempty"`
	ContextAwareResources []policiesv1.ContextAwareResource `json:"contextAwareResources,omitempty"`
	TimeoutEvalSeconds    *int32                            `json:"timeoutEvalSeconds,omitempty"`
	HostCapabilities      []string                          `json:"hostCapabilities,omitempty"`
}

// policiesConfig renders the policies.yml of a policy server serving
// policies: JSON (a YAML subset), keyed by unique name, in a stable order so
// that an unchanged set of policies gives the same bytes.
func policiesConfig(ps *policiesv1.PolicyServer, policies []policiesv1.Policy) ([]byte, error) {
	entries := make(map[string]policyEntry, len(policies))
	for _, p := range policies {
		entries[p.GetUniqueName()] = newPolicyEntry(ps, p)
	}
	b, err := json.Marshal(entries) // encoding/json sorts map keys
	if err != nil {
		return nil, fmt.Errorf("encoding policies.yml: %w", err)
	}
	return b, nil
}

func newPolicyEntry(ps *policiesv1.PolicyServer, p policiesv1.Policy) policyEntry {
	caps := hostCapabilities(ps, p)
	e := policyEntry{
		PolicyMode: string(p.GetPolicyMode()),
		Message:    p.GetMessage(),
	}
	group, isGroup := p.(policiesv1.PolicyGroup)
	if !isGroup {
		e.Module = p.GetModule()
		e.AllowedToMutate = p.IsMutating()
		e.Settings = rawSettings(p.GetSettings().Raw)
		e.ContextAwareResources = p.GetContextAwareResources()
		e.TimeoutEvalSeconds = p.GetTimeoutEvalSeconds()
		e.HostCapabilities = caps
		return e
	}
	e.Expression = group.GetExpression()
	e.Policies = map[string]groupMemberEntry{}
	for name, m := range group.GetPolicyGroupMembersWithContext() {
		e.Policies[name] = groupMemberEntry{
			Module:                m.Module,
			Settings:              rawSettings(m.Settings.Raw),
			ContextAwareResources: m.ContextAwareResources,
			TimeoutEvalSeconds:    m.TimeoutEvalSeconds,
			HostCapabilities:      caps,
		}
	}
	return e
}

// hostCapabilities are what a policy may call on the host: everything for
// the cluster kinds; for the namespaced kinds what the PolicyServer allows
// them, everything when it says nothing.
func hostCapabilities(ps *policiesv1.PolicyServer, p policiesv1.Policy) []string {
	if p.GetNamespace() != "" && len(ps.Spec.NamespacedPoliciesCapabilities) > 0 {
		return ps.Spec.NamespacedPoliciesCapabilities
	}
	return []string{"*"}
}

func rawSettings(raw []byte) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// sourceAuthority is one CA of a host in sources.yml.
type sourceAuthority struct {
	Type string `json:"type"`
	Data string `json:"data"`
}

// sourcesConfig renders the sources.yml of a PolicyServer, or nil when it
// configures no source.
func sourcesConfig(ps *policiesv1.PolicyServer) ([]byte, error) {
	if len(ps.Spec.InsecureSources) == 0 && len(ps.Spec.SourceAuthorities) == 0 {
		return nil, nil
	}
	var doc struct {
		InsecureSources   []string                     `json:"insecure_sources,omitempty"`
		SourceAuthorities map[string][]sourceAuthority `json:"source_authorities,omitempty"`
	}
	doc.InsecureSources = append([]string(nil), ps.Spec.InsecureSources...)
	sort.Strings(doc.InsecureSources)
	if len(ps.Spec.SourceAuthorities) > 0 {
		doc.SourceAuthorities = map[string][]sourceAuthority{}
		for host, pems := range ps.Spec.SourceAuthorities {
			for _, pem := range pems {
				doc.SourceAuthorities[host] = append(doc.SourceAuthorities[host], sourceAuthority{Type: "Data", Data: pem})
			}
		}
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding sources.yml: %w", err)
	}
	return b, nil
}

// configuredMode returns the mode policies.yml gives the policy with that
// unique name, and whether it has the policy at all.
func configuredMode(policiesYML []byte, uniqueName string) (string, bool) {
	var entries map[string]struct {
		PolicyMode string `json:"policyMode"`
	}
	if err := json.Unmarshal(policiesYML, &entries); err != nil {
		return "", false
	}
	e, ok := entries[uniqueName]
	if !ok {
		return "", false
	}
	if e.PolicyMode == "" {
		return string(policiesv1.PolicyModeProtect), true
	}
	return e.PolicyMode, true
}
