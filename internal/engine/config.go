package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/capabilities"
)

// Policy modes (RFC 001).
const (
	ModeProtect = "protect"
	ModeMonitor = "monitor"
)

// PolicyConfig is one entry of policies.yml (compat 3.2): a single policy, or
// a policy group when Policies and Expression are set.
type PolicyConfig struct {
	Module                string                 `json:"module,omitempty"`
	PolicyMode            string                 `json:"policyMode,omitempty"`
	AllowedToMutate       bool                   `json:"allowedToMutate,omitempty"`
	Settings              json.RawMessage        `json:"settings,omitempty"`
	ContextAwareResources []ContextAwareResource `json:"contextAwareResources,omitempty"`
	Message               string                 `json:"message,omitempty"`
	TimeoutEvalSeconds    *int                   `json:"timeoutEvalSeconds,omitempty"`
	HostCapabilities      []string               `json:"hostCapabilities,omitempty"`

	// Group fields.
	Expression string                  `json:"expression,omitempty"`
	Policies   map[string]*GroupMember `json:"policies,omitempty"`

	// Written by the controller, ignored by the server.
	NamespacedName json.RawMessage `json:"namespacedName,omitempty"`

	// ContextAwareFromMetadata grants the Kubernetes resources the module's
	// metadata lists instead of ContextAwareResources, as kwctl's
	// --allow-context-aware does. It is not part of policies.yml.
	ContextAwareFromMetadata bool `json:"-"`
}

// GroupMember is one member of a policy group.
type GroupMember struct {
	Module                string                 `json:"module"`
	Settings              json.RawMessage        `json:"settings,omitempty"`
	ContextAwareResources []ContextAwareResource `json:"contextAwareResources,omitempty"`
	TimeoutEvalSeconds    *int                   `json:"timeoutEvalSeconds,omitempty"`
	HostCapabilities      []string               `json:"hostCapabilities,omitempty"`
}

// ReadResources returns the Kubernetes kinds any entry of configs (group
// members included) may read, each once, in no particular order.
func ReadResources(configs map[string]*PolicyConfig) []ContextAwareResource {
	seen := map[ContextAwareResource]bool{}
	var out []ContextAwareResource
	add := func(rs []ContextAwareResource) {
		for _, r := range rs {
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	for _, c := range configs {
		add(c.ContextAwareResources)
		for _, m := range c.Policies {
			add(m.ContextAwareResources)
		}
	}
	return out
}

// ContextAwareResource is a Kubernetes kind a policy may read through host calls.
type ContextAwareResource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// IsGroup reports whether the entry is a policy group. Kubewarden tells the
// two apart by the presence of policies, expression and message.
func (c *PolicyConfig) IsGroup() bool {
	return c.Policies != nil || c.Expression != ""
}

// modules returns the module URIs the entry uses: its own, or its members'.
func (c *PolicyConfig) modules() []string {
	if !c.IsGroup() {
		return []string{c.Module}
	}
	out := make([]string, 0, len(c.Policies))
	for _, name := range sortedKeys(c.Policies) {
		out = append(out, c.Policies[name].Module)
	}
	return out
}

// config returns the member as a single policy: protect mode, no mutation
// allowed, no custom message (compat 3.5).
func (m *GroupMember) config() *PolicyConfig {
	return &PolicyConfig{
		Module:                m.Module,
		Settings:              m.Settings,
		ContextAwareResources: m.ContextAwareResources,
		TimeoutEvalSeconds:    m.TimeoutEvalSeconds,
		HostCapabilities:      m.HostCapabilities,
	}
}

// Mode returns the policy mode, protect by default.
func (c *PolicyConfig) Mode() string {
	if c.PolicyMode == "" {
		return ModeProtect
	}
	return c.PolicyMode
}

// ParsePolicies reads a policies.yml document (YAML or JSON): a map from
// policy id to entry. It checks the shape of every entry; it does not load
// modules.
func ParsePolicies(doc []byte) (map[string]*PolicyConfig, error) {
	jsonDoc, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("parsing policies: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(jsonDoc, &raw); err != nil {
		return nil, fmt.Errorf("parsing policies: the document must be a map of policy id to policy: %w", err)
	}
	out := make(map[string]*PolicyConfig, len(raw))
	for _, id := range sortedKeys(raw) {
		c, err := parseEntry(raw[id])
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", id, err)
		}
		if err := c.validate(id); err != nil {
			return nil, fmt.Errorf("policy %q: %w", id, err)
		}
		out[id] = c
	}
	return out, nil
}

// parseEntry decodes one entry. Like Kubewarden, unknown keys of an entry are
// ignored (the controller adds some), but group members are strict.
func parseEntry(raw json.RawMessage) (*PolicyConfig, error) {
	var c PolicyConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// UnmarshalJSON decodes a member, refusing unknown keys.
func (m *GroupMember) UnmarshalJSON(b []byte) error {
	type plain GroupMember
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode((*plain)(m))
}

func (c *PolicyConfig) validate(id string) error {
	if id == "" {
		return fmt.Errorf("the policy id is empty")
	}
	if strings.Contains(id, "/") {
		return fmt.Errorf("policy ids cannot contain '/'")
	}
	switch c.PolicyMode {
	case "", ModeProtect, ModeMonitor:
	default:
		return fmt.Errorf("policyMode must be %q or %q, not %q", ModeProtect, ModeMonitor, c.PolicyMode)
	}
	if err := validateTimeout(c.TimeoutEvalSeconds); err != nil {
		return err
	}
	if err := capabilities.Validate(c.HostCapabilities); err != nil {
		return err
	}
	if !c.IsGroup() {
		if c.Module == "" {
			return fmt.Errorf("module is required")
		}
		return nil
	}
	if c.Module != "" || len(c.Settings) > 0 || c.AllowedToMutate {
		return fmt.Errorf("a policy group takes its modules and settings in policies, not module, settings or allowedToMutate")
	}
	if c.Expression == "" || c.Message == "" || len(c.Policies) == 0 {
		return fmt.Errorf("a policy group needs expression, message and at least one member in policies")
	}
	for name, m := range c.Policies {
		if name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("group member name %q is empty or contains '/'", name)
		}
		if m == nil || m.Module == "" {
			return fmt.Errorf("group member %q: module is required", name)
		}
		if err := validateTimeout(m.TimeoutEvalSeconds); err != nil {
			return fmt.Errorf("group member %q: %w", name, err)
		}
		if err := capabilities.Validate(m.HostCapabilities); err != nil {
			return fmt.Errorf("group member %q: %w", name, err)
		}
	}
	return nil
}

func validateTimeout(t *int) error {
	if t != nil && *t <= 0 {
		return fmt.Errorf("timeoutEvalSeconds must be positive, not %d", *t)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
