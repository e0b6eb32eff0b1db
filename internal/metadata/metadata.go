// Package metadata reads and writes Kubewarden policy metadata: the JSON document
// stored in the io.kubewarden.metadata custom section of a policy module
// (written by `kwctl annotate` or `wardenctl annotate` from a metadata.yml).
//
// It imports only internal/wasm's binary helpers; it must not import the
// engine or the server.
package metadata

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/wasm"
)

// SectionName is the custom section that holds the metadata JSON.
const SectionName = "io.kubewarden.metadata"

// Execution modes (docs/compatibility.md#policy-metadata).
const (
	ModeWapc       = "kubewarden-wapc"
	ModeOPA        = "opa"
	ModeGatekeeper = "gatekeeper"
	ModeWASI       = "wasi"
)

// Policy types (docs/compatibility.md#policy-metadata).
const (
	PolicyTypeKubernetes = "kubernetes"
	PolicyTypeRaw        = "raw"
)

// ProtocolV1 is the only waPC protocol version Kubewarden and Warden run.
const ProtocolV1 = "v1"

// Metadata is the io.kubewarden.metadata document. Unknown keys are ignored
// when reading, as Kubewarden does.
type Metadata struct {
	ProtocolVersion          string             `json:"protocolVersion,omitempty"`
	Rules                    []Rule             `json:"rules,omitempty"`
	Annotations              map[string]string  `json:"annotations,omitempty"`
	Mutating                 bool               `json:"mutating"`
	BackgroundAudit          *bool              `json:"backgroundAudit,omitempty"`
	ExecutionMode            string             `json:"executionMode,omitempty"`
	PolicyType               string             `json:"policyType,omitempty"`
	ContextAwareResources    []ContextAwareKind `json:"contextAwareResources,omitempty"`
	HostCapabilities         []string           `json:"hostCapabilities,omitempty"`
	MinimumKubewardenVersion string             `json:"minimumKubewardenVersion,omitempty"`
}

// Rule is a Kubernetes RuleWithOperations.
type Rule struct {
	APIGroups   []string `json:"apiGroups"`
	APIVersions []string `json:"apiVersions"`
	Resources   []string `json:"resources"`
	Operations  []string `json:"operations"`
}

// ContextAwareKind names a Kubernetes resource kind a policy may read.
type ContextAwareKind struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// Mode returns the execution mode, defaulting to kubewarden-wapc.
func (m *Metadata) Mode() string {
	if m.ExecutionMode == "" {
		return ModeWapc
	}
	return m.ExecutionMode
}

// Type returns the policy type, defaulting to kubernetes.
func (m *Metadata) Type() string {
	if m.PolicyType == "" {
		return PolicyTypeKubernetes
	}
	return m.PolicyType
}

// ErrMissing is returned by FromModule when the module has no metadata section.
var ErrMissing = errors.New("the module has no " + SectionName + " custom section: annotate it with `wardenctl annotate` or `kwctl annotate`")

// FromModule reads the metadata embedded in a wasm module.
func FromModule(module []byte) (*Metadata, error) {
	raw, found, err := wasm.CustomSection(module, SectionName)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, ErrMissing
	}
	var m Metadata
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", SectionName, err)
	}
	return &m, nil
}

// Parse reads a metadata.yml (YAML or JSON).
func Parse(doc []byte) (*Metadata, error) {
	var m Metadata
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return nil, fmt.Errorf("decoding metadata: %w", err)
	}
	return &m, nil
}

// Embed returns a copy of module with m written into its metadata section,
// replacing any previous one.
func Embed(module []byte, m *Metadata) ([]byte, error) {
	doc, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return wasm.WithCustomSection(module, SectionName, doc)
}

// ValidateForServer checks what the policy server requires of embedded metadata
// before it loads a module (docs/compatibility.md#policy-metadata), with
// Kubewarden's messages: protocol v1 for waPC modules, a known execution mode
// and policy type, and a minimumKubewardenVersion (major.minor) no newer than
// compatVersion.
func (m *Metadata) ValidateForServer(compatVersion string) error {
	switch m.Mode() {
	case ModeWapc:
		if m.ProtocolVersion == "" {
			//lint:ignore ST1005 Kubewarden's wording, which users and policies see
			return errors.New("Policy is missing protocol version, which is required for KubewardenWapc execution mode")
		}
		if m.ProtocolVersion != ProtocolV1 {
			//lint:ignore ST1005 Kubewarden's wording, which users and policies see
			return fmt.Errorf("Policy uses protocol version %s but only V1 is supported", m.ProtocolVersion)
		}
	case ModeWASI, ModeOPA, ModeGatekeeper:
	default:
		return fmt.Errorf("unknown execution mode %q", m.ExecutionMode)
	}
	switch m.Type() {
	case PolicyTypeKubernetes, PolicyTypeRaw:
	default:
		return fmt.Errorf("unknown policy type %q", m.PolicyType)
	}
	if m.MinimumKubewardenVersion != "" {
		need, err := parseMajorMinor(m.MinimumKubewardenVersion)
		if err != nil {
			return fmt.Errorf("invalid minimumKubewardenVersion %q: %w", m.MinimumKubewardenVersion, err)
		}
		have, err := parseMajorMinor(compatVersion)
		if err != nil {
			return fmt.Errorf("invalid server version %q: %w", compatVersion, err)
		}
		if need[0] > have[0] || (need[0] == have[0] && need[1] > have[1]) {
			//lint:ignore ST1005 Kubewarden's wording, which users and policies see
			return fmt.Errorf("Policy required Kubewarden version %d.%d.0 but is running on %s", need[0], need[1], compatVersion)
		}
	}
	return nil
}

func parseMajorMinor(v string) ([2]int, error) {
	v = strings.TrimPrefix(v, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return [2]int{}, errors.New("expected major.minor[.patch]")
	}
	var out [2]int
	for i := 0; i < 2; i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return [2]int{}, err
		}
		out[i] = n
	}
	return out, nil
}
