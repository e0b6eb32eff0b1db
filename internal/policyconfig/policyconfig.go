// Package policyconfig turns policies.kubewarden.io/v1 policies into what a
// policy server loads: entries of its policies.yml
// (docs/compatibility.md#policies-file) and the engine's configurations. A
// policy server serving PolicyRevisions (RFC 000) reads the policies of its
// revisions through it.
package policyconfig

import (
	"encoding/json"
	"fmt"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/engine"
)

// Entry is one entry of a policy server's policies.yml, with the JSON names
// the policy server reads.
type Entry struct {
	Module                string                            `json:"module,omitempty"`
	PolicyMode            string                            `json:"policyMode,omitempty"`
	AllowedToMutate       bool                              `json:"allowedToMutate,omitempty"`
	Settings              json.RawMessage                   `json:"settings,omitempty"`
	ContextAwareResources []policiesv1.ContextAwareResource `json:"contextAwareResources,omitempty"`
	Message               string                            `json:"message,omitempty"`
	TimeoutEvalSeconds    *int32                            `json:"timeoutEvalSeconds,omitempty"`
	HostCapabilities      []string                          `json:"hostCapabilities,omitempty"`
	Expression            string                            `json:"expression,omitempty"`
	Policies              map[string]GroupMemberEntry       `json:"policies,omitempty"`
}

// GroupMemberEntry is a member of a group's entry.
type GroupMemberEntry struct {
	Module                string                            `json:"module"`
	Settings              json.RawMessage                   `json:"settings,omitempty"`
	ContextAwareResources []policiesv1.ContextAwareResource `json:"contextAwareResources,omitempty"`
	TimeoutEvalSeconds    *int32                            `json:"timeoutEvalSeconds,omitempty"`
	HostCapabilities      []string                          `json:"hostCapabilities,omitempty"`
}

// NewEntry returns the entry of p. namespacedCapabilities are the host
// capabilities its PolicyServer allows namespaced policies
// (spec.namespacedPoliciesCapabilities; empty allows everything).
func NewEntry(p policiesv1.Policy, namespacedCapabilities []string) Entry {
	caps := hostCapabilities(p, namespacedCapabilities)
	e := Entry{
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
	e.Policies = map[string]GroupMemberEntry{}
	for name, m := range group.GetPolicyGroupMembersWithContext() {
		e.Policies[name] = GroupMemberEntry{
			Module:                m.Module,
			Settings:              rawSettings(m.Settings.Raw),
			ContextAwareResources: m.ContextAwareResources,
			TimeoutEvalSeconds:    m.TimeoutEvalSeconds,
			HostCapabilities:      caps,
		}
	}
	return e
}

// Config returns p as the policy server's engine loads it: its entry, read
// as policies.yml is.
func Config(p policiesv1.Policy, namespacedCapabilities []string) (*engine.PolicyConfig, error) {
	const id = "policy"
	doc, err := json.Marshal(map[string]Entry{id: NewEntry(p, namespacedCapabilities)})
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", p.GetUniqueName(), err)
	}
	configs, err := engine.ParsePolicies(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.GetUniqueName(), err)
	}
	return configs[id], nil
}

// hostCapabilities are what a policy may call on the host: everything for
// the cluster kinds; for the namespaced kinds what the PolicyServer allows
// them, everything when it says nothing.
func hostCapabilities(p policiesv1.Policy, namespaced []string) []string {
	if p.GetNamespace() != "" && len(namespaced) > 0 {
		return namespaced
	}
	return []string{"*"}
}

func rawSettings(raw []byte) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}
