package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/capabilities"
)

// Policy modes (RFC 001).
const (
	ModeProtect = "protect"
	ModeMonitor = "monitor"
)

// PolicyConfig is one entry of policies.yml
// (docs/compatibility.md#policies-file): a single policy, or a policy group
// when Policies and Expression are set.
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

	// Name is what the policy's metrics and traces call it (policy_name),
	// when it is not its id: a cluster-mode replica serves each generation
	// under "<unique name>/<generation>" and names every one of them after
	// the unique name alone, as Kubewarden's metrics do, so that a new
	// generation does not start new series. It is not part of policies.yml.
	Name string `json:"-"`

	// IgnoredKeys are the paths ("<id>.<key>") of the entry's keys that
	// policies.yml does not define, in file order: ParsePolicies ignores
	// them, as Kubewarden does, and the environment warns about them when
	// it loads the policy. They are not part of policies.yml.
	IgnoredKeys []string `json:"-"`
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
	var out []string
	for _, s := range c.singles() {
		out = append(out, s.Module)
	}
	return out
}

// singles returns the single policies of c: c itself, or the members of a
// group, in name order.
func (c *PolicyConfig) singles() []*PolicyConfig {
	if !c.IsGroup() {
		return []*PolicyConfig{c}
	}
	out := make([]*PolicyConfig, 0, len(c.Policies))
	for _, name := range sortedKeys(c.Policies) {
		out = append(out, c.Policies[name].config())
	}
	return out
}

// config returns the member as a single policy: protect mode, no mutation
// allowed, no custom message (docs/compatibility.md#policy-groups).
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

// MaxTimeoutEvalSeconds is the largest timeoutEvalSeconds policies.yml
// accepts: an hour, when an API server waits 30 s at most for a webhook.
// Larger values are mistakes, and past 292 years overflow a time.Duration
// into no timeout at all.
const MaxTimeoutEvalSeconds = 3600

// ParsePolicies reads a policies.yml document (YAML or JSON): a map from
// policy id to entry. It checks the shape of every entry; it does not load
// modules. Errors name the key at fault by its path, such as
// "pod-privileged.timeoutEvalSeconds: ...". A key defined twice in the same
// mapping is an error (YAML keeps the last one, silently); a key an entry
// does not define is ignored, as Kubewarden ignores it, and listed in the
// entry's IgnoredKeys.
func ParsePolicies(doc []byte) (map[string]*PolicyConfig, error) {
	jsonDoc, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("parsing policies: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(jsonDoc, &raw); err != nil {
		return nil, fmt.Errorf("parsing policies: the document must be a map of policy id to policy: %w", err)
	}
	ignored, err := checkKeys(doc)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*PolicyConfig, len(raw))
	for _, id := range sortedKeys(raw) {
		c, err := parseEntry(id, raw[id])
		if err != nil {
			return nil, err
		}
		if err := c.validate(id); err != nil {
			return nil, err
		}
		c.IgnoredKeys = ignored[id]
		out[id] = c
	}
	return out, nil
}

// parseEntry decodes one entry. Like Kubewarden, unknown keys of an entry are
// ignored (the controller adds some), but group members are strict.
func parseEntry(id string, raw json.RawMessage) (*PolicyConfig, error) {
	var c PolicyConfig
	type plain PolicyConfig
	// Members are decoded one by one, so that an error can name its member.
	e := struct {
		*plain
		Policies map[string]json.RawMessage `json:"policies,omitempty"`
	}{plain: (*plain)(&c)}
	if err := json.Unmarshal(raw, &e); err != nil {
		return nil, decodeError(keyPath(id), err)
	}
	if e.Policies != nil {
		c.Policies = make(map[string]*GroupMember, len(e.Policies))
	}
	for _, name := range sortedKeys(e.Policies) {
		var m *GroupMember
		if err := json.Unmarshal(e.Policies[name], &m); err != nil {
			return nil, decodeError(keyPath(id, "policies", name), err)
		}
		c.Policies[name] = m
	}
	return &c, nil
}

// decodeError names the key of a JSON decoding error by its path, under
// path.
func decodeError(path string, err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		// The embedded struct of parseEntry shows in the path.
		if field := strings.TrimPrefix(typeErr.Field, "plain."); field != "" {
			path += "." + field
		}
		return fmt.Errorf("%s: want %s, not %s", path, typeName(typeErr.Type), typeErr.Value)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// typeName describes a Go type as the YAML value it decodes.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	case reflect.Pointer:
		return typeName(t.Elem())
	}
	return t.String()
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
		return fmt.Errorf(`"": the policy id is empty`)
	}
	if strings.Contains(id, "/") {
		return fmt.Errorf("%s: policy ids cannot contain '/'", keyPath(id))
	}
	switch c.PolicyMode {
	case "", ModeProtect, ModeMonitor:
	default:
		return fmt.Errorf("%s: must be %q or %q, not %q", keyPath(id, "policyMode"), ModeProtect, ModeMonitor, c.PolicyMode)
	}
	if err := validateTimeout(c.TimeoutEvalSeconds); err != nil {
		return fmt.Errorf("%s: %w", keyPath(id, "timeoutEvalSeconds"), err)
	}
	if err := capabilities.Validate(c.HostCapabilities); err != nil {
		return fmt.Errorf("%s: %w", keyPath(id, "hostCapabilities"), err)
	}
	if !c.IsGroup() {
		if c.Module == "" {
			return fmt.Errorf("%s: module is required", keyPath(id))
		}
		return validateSettings(c.Settings, id)
	}
	if c.Module != "" || len(c.Settings) > 0 || c.AllowedToMutate {
		return fmt.Errorf("%s: a policy group takes its modules and settings in policies, not module, settings or allowedToMutate", keyPath(id))
	}
	if c.Expression == "" || c.Message == "" || len(c.Policies) == 0 {
		return fmt.Errorf("%s: a policy group needs expression, message and at least one member in policies", keyPath(id))
	}
	for _, name := range sortedKeys(c.Policies) {
		m := c.Policies[name]
		if name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("%s: group member name %q is empty or contains '/'", keyPath(id, "policies"), name)
		}
		if m == nil || m.Module == "" {
			return fmt.Errorf("%s: module is required", keyPath(id, "policies", name))
		}
		if err := validateTimeout(m.TimeoutEvalSeconds); err != nil {
			return fmt.Errorf("%s: %w", keyPath(id, "policies", name, "timeoutEvalSeconds"), err)
		}
		if err := capabilities.Validate(m.HostCapabilities); err != nil {
			return fmt.Errorf("%s: %w", keyPath(id, "policies", name, "hostCapabilities"), err)
		}
		if err := validateSettings(m.Settings, id, "policies", name); err != nil {
			return err
		}
	}
	return nil
}

func validateTimeout(t *int) error {
	switch {
	case t == nil:
		return nil
	case *t <= 0:
		return fmt.Errorf("must be positive, not %d", *t)
	case *t > MaxTimeoutEvalSeconds:
		return fmt.Errorf("must be at most %d (seconds), not %d", MaxTimeoutEvalSeconds, *t)
	}
	return nil
}

// validateSettings checks that settings, when set, are a mapping: what a
// policy's validate_settings receives and Kubewarden decodes.
func validateSettings(settings json.RawMessage, path ...string) error {
	s := bytes.TrimSpace(settings)
	if len(s) == 0 || s[0] == '{' || string(s) == "null" {
		return nil
	}
	var what string
	switch s[0] {
	case '"':
		what = "a string"
	case '[':
		what = "a list"
	case 't', 'f':
		what = "a boolean"
	default:
		what = "a number"
	}
	return fmt.Errorf("%s: must be a mapping, not %s", keyPath(append(path, "settings")...), what)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Keys of policies.yml, as PolicyConfig and GroupMember decode them.
var (
	entryKeys  = jsonKeys(reflect.TypeFor[PolicyConfig]())
	memberKeys = jsonKeys(reflect.TypeFor[GroupMember]())
)

// jsonKeys returns the JSON names of the fields of struct type t.
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}

// checkKeys reads the keys of a policies.yml document as written: it
// refuses a key defined twice in one mapping, and a group member's key that
// a member does not define (members are strict), and returns by policy id
// the paths of the entries' keys that an entry does not define. A document
// that is not a mapping of mappings is left to the JSON decoding to refuse.
func checkKeys(doc []byte) (map[string][]string, error) {
	var root yaml3.Node
	if err := yaml3.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("parsing policies: %w", err)
	}
	if root.Kind != yaml3.DocumentNode || len(root.Content) == 0 {
		return nil, nil
	}
	top := root.Content[0]
	if err := checkDuplicates(top, nil); err != nil {
		return nil, err
	}
	if top.Kind != yaml3.MappingNode {
		return nil, nil
	}
	ignored := map[string][]string{}
	for id, entry := range pairs(top) {
		if entry.Kind != yaml3.MappingNode {
			continue
		}
		for key, value := range pairs(entry) {
			if !slices.Contains(entryKeys, key) {
				ignored[id] = append(ignored[id], keyPath(id, key))
				continue
			}
			if key != "policies" || value.Kind != yaml3.MappingNode {
				continue
			}
			for name, member := range pairs(value) {
				if member.Kind != yaml3.MappingNode {
					continue
				}
				for mkey := range pairs(member) {
					if !slices.Contains(memberKeys, mkey) {
						return nil, fmt.Errorf("%s: unknown key of a group member (want %s)",
							keyPath(id, "policies", name, mkey), strings.Join(memberKeys, ", "))
					}
				}
			}
		}
	}
	return ignored, nil
}

// checkDuplicates refuses a key defined twice in a mapping under n, at path.
// Aliases are not followed: what they name is checked where it is defined.
func checkDuplicates(n *yaml3.Node, path []string) error {
	switch n.Kind {
	case yaml3.MappingNode:
		lines := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				if err := checkDuplicates(v, path); err != nil {
					return err
				}
				continue
			}
			if first, ok := lines[k.Value]; ok {
				if len(path) == 0 {
					return fmt.Errorf("policy id %s is defined twice, at lines %d and %d", keyPath(k.Value), first, k.Line)
				}
				return fmt.Errorf("%s: defined twice, at lines %d and %d", keyPath(append(path, k.Value)...), first, k.Line)
			}
			lines[k.Value] = k.Line
			if err := checkDuplicates(v, append(path, k.Value)); err != nil {
				return err
			}
		}
	case yaml3.SequenceNode:
		for i, item := range n.Content {
			if err := checkDuplicates(item, append(path, fmt.Sprintf("[%d]", i))); err != nil {
				return err
			}
		}
	}
	return nil
}

// pairs yields the keys and values of mapping n, aliases resolved, those
// of the mappings it merges (<<) included unless n sets them itself.
func pairs(n *yaml3.Node) iter.Seq2[string, *yaml3.Node] {
	return func(yield func(string, *yaml3.Node) bool) {
		seen := map[string]bool{}
		var walk func(n *yaml3.Node, merged bool) bool
		walk = func(n *yaml3.Node, merged bool) bool {
			if n.Kind == yaml3.AliasNode {
				n = n.Alias
			}
			switch n.Kind {
			case yaml3.SequenceNode: // << of a list of mappings
				for _, m := range n.Content {
					if !walk(m, merged) {
						return false
					}
				}
				return true
			case yaml3.MappingNode:
			default:
				return true
			}
			var merges []*yaml3.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if k.Tag == "!!merge" {
					merges = append(merges, v)
					continue
				}
				if merged && seen[k.Value] {
					continue
				}
				seen[k.Value] = true
				if v.Kind == yaml3.AliasNode {
					v = v.Alias
				}
				if !yield(k.Value, v) {
					return false
				}
			}
			for _, m := range merges {
				if !walk(m, true) {
					return false
				}
			}
			return true
		}
		walk(n, false)
	}
}

// keyPath writes the path of a key of policies.yml for a message:
// elements joined by dots, each as is when it is a plain name, quoted
// otherwise (a policy id with a dot, say).
func keyPath(elems ...string) string {
	var b strings.Builder
	for i, e := range elems {
		if i > 0 && !strings.HasPrefix(e, "[") {
			b.WriteByte('.')
		}
		if isPlainKey(e) || strings.HasPrefix(e, "[") {
			b.WriteString(e)
		} else {
			b.WriteString(strconv.Quote(e))
		}
	}
	return b.String()
}

func isPlainKey(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if r != '_' && r != '-' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return false
		}
	}
	return true
}
