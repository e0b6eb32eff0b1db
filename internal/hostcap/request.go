package hostcap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"

	yaml "go.yaml.in/yaml/v3"
)

// Request is one host-capability request, decoded from a guest payload
// (Decode) or read from a session file. Its concrete types are the variants
// of kwctl's CallbackRequestType; requests are values, and two requests are
// the same request when they are equal field by field (reflect.DeepEqual),
// which is how a Replayer matches them.
//
// Optional fields are pointers, or slices and maps whose nil value means
// "absent" (null in JSON and YAML) and whose empty value means "present and
// empty", as Rust's Option does.
type Request interface {
	// Variant is the request's name in kwctl's session files, the YAML tag
	// of its recorded form: OciManifestDigest, KubernetesGetResource...
	Variant() string
}

// OCIManifestDigest asks for the manifest digest of an image (oci
// v1/manifest_digest).
type OCIManifestDigest struct {
	Image string `json:"image" yaml:"image"`
}

// OCIManifest asks for the manifest (or index) of an image (oci
// v1/oci_manifest).
type OCIManifest struct {
	Image string `json:"image" yaml:"image"`
}

// OCIManifestAndConfig asks for the manifest, digest and config of an image
// (oci v1/oci_manifest_config).
type OCIManifestAndConfig struct {
	Image string `json:"image" yaml:"image"`
}

// SigstorePubKeyVerify asks whether an image is signed with every one of
// PubKeys (PEM), each signature carrying Annotations (oci v1/verify and
// v2/verify).
type SigstorePubKeyVerify struct {
	Image       string            `json:"image" yaml:"image"`
	PubKeys     []string          `json:"pub_keys" yaml:"pub_keys"`
	Annotations map[string]string `json:"annotations" yaml:"annotations"`
}

// KeylessInfo is an OIDC issuer and the exact subject of a keyless
// signature.
type KeylessInfo struct {
	Issuer  string `json:"issuer" yaml:"issuer"`
	Subject string `json:"subject" yaml:"subject"`
}

// SigstoreKeylessVerify asks whether an image carries keyless signatures of
// every one of Keyless.
type SigstoreKeylessVerify struct {
	Image       string            `json:"image" yaml:"image"`
	Keyless     []KeylessInfo     `json:"keyless" yaml:"keyless"`
	Annotations map[string]string `json:"annotations" yaml:"annotations"`
}

// KeylessPrefixInfo is an OIDC issuer and a URL prefix of the subject of a
// keyless signature.
type KeylessPrefixInfo struct {
	Issuer    string `json:"issuer" yaml:"issuer"`
	URLPrefix string `json:"url_prefix" yaml:"url_prefix"`
}

// SigstoreKeylessPrefixVerify asks whether an image carries keyless
// signatures whose subjects start with the given URL prefixes.
type SigstoreKeylessPrefixVerify struct {
	Image         string              `json:"image" yaml:"image"`
	KeylessPrefix []KeylessPrefixInfo `json:"keyless_prefix" yaml:"keyless_prefix"`
	Annotations   map[string]string   `json:"annotations" yaml:"annotations"`
}

// SigstoreGithubActionsVerify asks whether an image was signed, keyless, by
// a GitHub Actions workflow of Owner (and Repo).
type SigstoreGithubActionsVerify struct {
	Image       string            `json:"image" yaml:"image"`
	Owner       string            `json:"owner" yaml:"owner"`
	Repo        *string           `json:"repo" yaml:"repo"`
	Annotations map[string]string `json:"annotations" yaml:"annotations"`
}

// SigstoreCertificateVerify asks whether an image is signed with the key of
// Certificate (PEM), optionally checked against CertificateChain.
type SigstoreCertificateVerify struct {
	Image              string            `json:"image" yaml:"image"`
	Certificate        Bytes             `json:"certificate" yaml:"certificate"`
	CertificateChain   []Bytes           `json:"certificate_chain" yaml:"certificate_chain"`
	RequireRekorBundle bool              `json:"require_rekor_bundle" yaml:"require_rekor_bundle"`
	Annotations        map[string]string `json:"annotations" yaml:"annotations"`
}

// DNSLookupHost asks for the addresses of a host name (net
// v1/dns_lookup_host).
type DNSLookupHost struct {
	Host string `json:"host" yaml:"host"`
}

// KubernetesListResourceNamespace lists the objects of a namespaced kind in
// a namespace (kubernetes list_resources_by_namespace).
type KubernetesListResourceNamespace struct {
	APIVersion    string   `json:"api_version" yaml:"api_version"`
	Kind          string   `json:"kind" yaml:"kind"`
	Namespace     string   `json:"namespace" yaml:"namespace"`
	LabelSelector *string  `json:"label_selector" yaml:"label_selector"`
	FieldSelector *string  `json:"field_selector" yaml:"field_selector"`
	FieldMasks    []string `json:"field_masks" yaml:"field_masks"`
}

// KubernetesListResourceAll lists the objects of a kind in the whole cluster
// (kubernetes list_resources_all).
type KubernetesListResourceAll struct {
	APIVersion    string   `json:"api_version" yaml:"api_version"`
	Kind          string   `json:"kind" yaml:"kind"`
	LabelSelector *string  `json:"label_selector" yaml:"label_selector"`
	FieldSelector *string  `json:"field_selector" yaml:"field_selector"`
	FieldMasks    []string `json:"field_masks" yaml:"field_masks"`
}

// KubernetesGetResource reads one object (kubernetes get_resource).
type KubernetesGetResource struct {
	APIVersion   string   `json:"api_version" yaml:"api_version"`
	Kind         string   `json:"kind" yaml:"kind"`
	Name         string   `json:"name" yaml:"name"`
	Namespace    *string  `json:"namespace" yaml:"namespace"`
	DisableCache bool     `json:"disable_cache" yaml:"disable_cache"`
	FieldMasks   []string `json:"field_masks" yaml:"field_masks"`
}

// KubernetesGetResourcePluralName asks for the name of a kind's resource
// (v1/Service: services). Guests cannot send it: the host asks it to build
// the data of Rego policies (docs/compatibility.md#opa-mode), as Kubewarden's
// does.
type KubernetesGetResourcePluralName struct {
	APIVersion string `json:"api_version" yaml:"api_version"`
	Kind       string `json:"kind" yaml:"kind"`
}

// KubernetesCanI asks the API server whether a user may do something (a
// SubjectAccessReview; kubernetes can_i).
type KubernetesCanI struct {
	Request      SubjectAccessReview `json:"request" yaml:"request"`
	DisableCache bool                `json:"disable_cache" yaml:"disable_cache"`
}

// SubjectAccessReview is the question of a can_i request.
type SubjectAccessReview struct {
	Groups             []string           `json:"groups" yaml:"groups"`
	ResourceAttributes ResourceAttributes `json:"resource_attributes" yaml:"resource_attributes"`
	User               string             `json:"user" yaml:"user"`
}

// ResourceAttributes are the resource attributes of a SubjectAccessReview.
type ResourceAttributes struct {
	Group       *string `json:"group" yaml:"group"`
	Name        *string `json:"name" yaml:"name"`
	Namespace   *string `json:"namespace" yaml:"namespace"`
	Resource    string  `json:"resource" yaml:"resource"`
	Subresource *string `json:"subresource" yaml:"subresource"`
	Verb        string  `json:"verb" yaml:"verb"`
	Version     *string `json:"version" yaml:"version"`
}

// CryptoIsCertificateTrusted asks whether a certificate is trusted (crypto
// v1/is_certificate_trusted).
type CryptoIsCertificateTrusted struct {
	Request CertificateVerificationRequest `json:"request" yaml:"request"`
}

// CertificateVerificationRequest is a certificate, the chain to check it
// against (intermediates first, root last; nil: the system's roots) and the
// time to check its validity at (RFC 3339; nil: now).
type CertificateVerificationRequest struct {
	Cert      Certificate   `json:"cert" yaml:"cert"`
	CertChain []Certificate `json:"cert_chain" yaml:"cert_chain"`
	NotAfter  *string       `json:"not_after" yaml:"not_after"`
}

// Certificate is an X.509 certificate, Encoding "Pem" or "Der".
type Certificate struct {
	Encoding string `json:"encoding" yaml:"encoding"`
	Data     Bytes  `json:"data" yaml:"data"`
}

// Bytes is binary data written as a list of byte values, as Rust's Vec<u8>
// is in JSON and YAML (Kubewarden's Go SDK sends []rune, the same for ASCII).
type Bytes []byte

// Variant implements Request.
func (OCIManifestDigest) Variant() string { return "OciManifestDigest" }

// Variant implements Request.
func (OCIManifest) Variant() string { return "OciManifest" }

// Variant implements Request.
func (OCIManifestAndConfig) Variant() string { return "OciManifestAndConfig" }

// Variant implements Request.
func (SigstorePubKeyVerify) Variant() string { return "SigstorePubKeyVerify" }

// Variant implements Request.
func (SigstoreKeylessVerify) Variant() string { return "SigstoreKeylessVerify" }

// Variant implements Request.
func (SigstoreKeylessPrefixVerify) Variant() string { return "SigstoreKeylessPrefixVerify" }

// Variant implements Request.
func (SigstoreGithubActionsVerify) Variant() string { return "SigstoreGithubActionsVerify" }

// Variant implements Request.
func (SigstoreCertificateVerify) Variant() string { return "SigstoreCertificateVerify" }

// Variant implements Request.
func (DNSLookupHost) Variant() string { return "DNSLookupHost" }

// Variant implements Request.
func (KubernetesListResourceNamespace) Variant() string { return "KubernetesListResourceNamespace" }

// Variant implements Request.
func (KubernetesListResourceAll) Variant() string { return "KubernetesListResourceAll" }

// Variant implements Request.
func (KubernetesGetResource) Variant() string { return "KubernetesGetResource" }

// Variant implements Request.
func (KubernetesCanI) Variant() string { return "KubernetesCanI" }

// Variant implements Request.
func (KubernetesGetResourcePluralName) Variant() string { return "KubernetesGetResourcePluralName" }

// Variant implements Request.
func (CryptoIsCertificateTrusted) Variant() string { return "CryptoIsCertificateTrusted" }

// newRequest returns a zero request of a variant, for decoding.
func newRequest(variant string) (Request, bool) {
	switch variant {
	case "OciManifestDigest":
		return &OCIManifestDigest{}, true
	case "OciManifest":
		return &OCIManifest{}, true
	case "OciManifestAndConfig":
		return &OCIManifestAndConfig{}, true
	case "SigstorePubKeyVerify":
		return &SigstorePubKeyVerify{}, true
	case "SigstoreKeylessVerify":
		return &SigstoreKeylessVerify{}, true
	case "SigstoreKeylessPrefixVerify":
		return &SigstoreKeylessPrefixVerify{}, true
	case "SigstoreGithubActionsVerify":
		return &SigstoreGithubActionsVerify{}, true
	case "SigstoreCertificateVerify":
		return &SigstoreCertificateVerify{}, true
	case "DNSLookupHost":
		return &DNSLookupHost{}, true
	case "KubernetesListResourceNamespace":
		return &KubernetesListResourceNamespace{}, true
	case "KubernetesListResourceAll":
		return &KubernetesListResourceAll{}, true
	case "KubernetesGetResource":
		return &KubernetesGetResource{}, true
	case "KubernetesCanI":
		return &KubernetesCanI{}, true
	case "KubernetesGetResourcePluralName":
		return &KubernetesGetResourcePluralName{}, true
	case "CryptoIsCertificateTrusted":
		return &CryptoIsCertificateTrusted{}, true
	}
	return nil, false
}

// required lists the fields a variant's payload must have: serde's
// non-optional fields, but the booleans, which Warden defaults to false.
var required = map[string][]string{
	"SigstorePubKeyVerify":            {"image", "pub_keys"},
	"SigstoreKeylessVerify":           {"image", "keyless"},
	"SigstoreKeylessPrefixVerify":     {"image", "keyless_prefix"},
	"SigstoreGithubActionsVerify":     {"image", "owner"},
	"SigstoreCertificateVerify":       {"image", "certificate"},
	"KubernetesListResourceNamespace": {"api_version", "kind", "namespace"},
	"KubernetesListResourceAll":       {"api_version", "kind"},
	"KubernetesGetResource":           {"api_version", "kind", "name"},
	"KubernetesGetResourcePluralName": {"api_version", "kind"},
}

// Decode decodes the payload a guest sent to namespace/operation into a
// Request, accepting what Kubewarden's Rust and Go SDKs send: can_i's
// resource_attributes or resourceAttributes, an empty not_after as none.
// The operation must be one of the tree of host capabilities, tracing aside
// (docs/compatibility.md#host-capabilities).
func Decode(namespace, operation string, payload []byte) (Request, error) {
	r, err := decode(namespace, operation, payload)
	if err != nil {
		return nil, fmt.Errorf("decoding the %s/%s request: %w", namespace, operation, err)
	}
	return normalize(r), nil
}

func decode(namespace, operation string, payload []byte) (Request, error) {
	switch namespace + "/" + operation {
	case "oci/v1/manifest_digest":
		var image string
		err := json.Unmarshal(payload, &image)
		return OCIManifestDigest{Image: image}, err
	case "oci/v1/oci_manifest":
		var image string
		err := json.Unmarshal(payload, &image)
		return OCIManifest{Image: image}, err
	case "oci/v1/oci_manifest_config":
		var image string
		err := json.Unmarshal(payload, &image)
		return OCIManifestAndConfig{Image: image}, err
	case "oci/v1/verify":
		// Externally tagged: {"SigstorePubKeyVerify": {...}}; v1 has two
		// variants.
		var tagged map[string]json.RawMessage
		if err := json.Unmarshal(payload, &tagged); err != nil {
			return nil, err
		}
		if len(tagged) != 1 {
			return nil, errors.New("want an object with one key, SigstorePubKeyVerify or SigstoreKeylessVerify")
		}
		for variant, body := range tagged {
			if variant != "SigstorePubKeyVerify" && variant != "SigstoreKeylessVerify" {
				return nil, fmt.Errorf("unknown variant `%s`, expected `SigstorePubKeyVerify` or `SigstoreKeylessVerify`", variant)
			}
			return decodeVariant(variant, body)
		}
	case "oci/v2/verify":
		// Internally tagged: {"type": "SigstorePubKeyVerify", ...}.
		var tag struct {
			Type *string `json:"type"`
		}
		if err := json.Unmarshal(payload, &tag); err != nil {
			return nil, err
		}
		if tag.Type == nil {
			return nil, errors.New("missing field `type`")
		}
		switch *tag.Type {
		case "SigstorePubKeyVerify", "SigstoreKeylessVerify", "SigstoreKeylessPrefixVerify",
			"SigstoreGithubActionsVerify", "SigstoreCertificateVerify":
			return decodeVariant(*tag.Type, payload)
		}
		return nil, fmt.Errorf("unknown variant `%s`", *tag.Type)
	case "net/v1/dns_lookup_host":
		var host string
		err := json.Unmarshal(payload, &host)
		return DNSLookupHost{Host: host}, err
	case "crypto/v1/is_certificate_trusted":
		var r CertificateVerificationRequest
		if err := json.Unmarshal(payload, &r); err != nil {
			return nil, err
		}
		if err := requireFields(payload, "cert"); err != nil {
			return nil, err
		}
		return CryptoIsCertificateTrusted{Request: r}, nil
	case "kubernetes/list_resources_by_namespace":
		return decodeVariant("KubernetesListResourceNamespace", payload)
	case "kubernetes/list_resources_all":
		return decodeVariant("KubernetesListResourceAll", payload)
	case "kubernetes/get_resource":
		return decodeVariant("KubernetesGetResource", payload)
	case "kubernetes/can_i":
		return decodeCanI(payload)
	}
	return nil, fmt.Errorf("unknown operation: %s", operation)
}

// decodeVariant decodes a JSON object into a variant and checks its required
// fields.
func decodeVariant(variant string, body []byte) (Request, error) {
	r, _ := newRequest(variant)
	if err := json.Unmarshal(body, r); err != nil {
		return nil, err
	}
	if err := requireFields(body, required[variant]...); err != nil {
		return nil, err
	}
	return deref(r), nil
}

// decodeCanI decodes a can_i payload. Kubewarden's Go SDK writes
// resourceAttributes where the Rust host reads resource_attributes: both
// are accepted, the latter first.
func decodeCanI(payload []byte) (Request, error) {
	var in struct {
		SubjectAccessReview *struct {
			Groups []string         `json:"groups"`
			Snake  *json.RawMessage `json:"resource_attributes"`
			Camel  *json.RawMessage `json:"resourceAttributes"`
			User   *string          `json:"user"`
		} `json:"subject_access_review"`
		DisableCache bool `json:"disable_cache"`
	}
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, err
	}
	sar := in.SubjectAccessReview
	if sar == nil {
		return nil, errors.New("missing field `subject_access_review`")
	}
	raw := sar.Snake
	if raw == nil {
		raw = sar.Camel
	}
	if raw == nil {
		return nil, errors.New("missing field `resource_attributes`")
	}
	if sar.User == nil {
		return nil, errors.New("missing field `user`")
	}
	var attrs ResourceAttributes
	if err := json.Unmarshal(*raw, &attrs); err != nil {
		return nil, err
	}
	if err := requireFields(*raw, "resource", "verb"); err != nil {
		return nil, err
	}
	return KubernetesCanI{
		Request:      SubjectAccessReview{Groups: sar.Groups, ResourceAttributes: attrs, User: *sar.User},
		DisableCache: in.DisableCache,
	}, nil
}

// requireFields checks that a JSON object has the given keys, with serde's
// message for the first one missing.
func requireFields(body []byte, fields ...string) error {
	if len(fields) == 0 {
		return nil
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		return err
	}
	for _, f := range fields {
		if _, ok := keys[f]; !ok {
			return fmt.Errorf("missing field `%s`", f)
		}
	}
	return nil
}

// deref turns a pointer to a variant into the variant's value.
func deref(r Request) Request {
	if v := reflect.ValueOf(r); v.Kind() == reflect.Pointer {
		return v.Elem().Interface().(Request)
	}
	return r
}

// normalize gives equal requests equal Go values: required lists and byte
// strings are never nil, field masks are a sorted set (Rust's BTreeSet), an
// empty not_after is none.
func normalize(r Request) Request {
	switch v := r.(type) {
	case SigstorePubKeyVerify:
		v.PubKeys = nonNil(v.PubKeys)
		return v
	case SigstoreKeylessVerify:
		v.Keyless = nonNil(v.Keyless)
		return v
	case SigstoreKeylessPrefixVerify:
		v.KeylessPrefix = nonNil(v.KeylessPrefix)
		return v
	case SigstoreCertificateVerify:
		v.Certificate = Bytes(nonNil([]byte(v.Certificate)))
		for i := range v.CertificateChain {
			v.CertificateChain[i] = Bytes(nonNil([]byte(v.CertificateChain[i])))
		}
		return v
	case KubernetesListResourceNamespace:
		v.FieldMasks = maskSet(v.FieldMasks)
		return v
	case KubernetesListResourceAll:
		v.FieldMasks = maskSet(v.FieldMasks)
		return v
	case KubernetesGetResource:
		v.FieldMasks = maskSet(v.FieldMasks)
		return v
	case CryptoIsCertificateTrusted:
		req := &v.Request
		req.Cert.Data = Bytes(nonNil([]byte(req.Cert.Data)))
		for i := range req.CertChain {
			req.CertChain[i].Data = Bytes(nonNil([]byte(req.CertChain[i].Data)))
		}
		if req.NotAfter != nil && *req.NotAfter == "" {
			req.NotAfter = nil
		}
		return v
	}
	return r
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// maskSet sorts and deduplicates field masks, keeping nil (none) apart from
// empty.
func maskSet(m []string) []string {
	if m == nil {
		return nil
	}
	out := slices.Clone(m)
	slices.Sort(out)
	return slices.Compact(out)
}

// MarshalJSON writes the bytes as a list of numbers.
func (b Bytes) MarshalJSON() ([]byte, error) {
	if b == nil {
		return []byte("null"), nil
	}
	out := make([]byte, 0, 2+4*len(b))
	out = append(out, '[')
	for i, c := range b {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendUint(out, uint64(c), 10)
	}
	return append(out, ']'), nil
}

// UnmarshalJSON reads a list of numbers from 0 to 255.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*b = nil
		return nil
	}
	var nums []int64
	if err := json.Unmarshal(data, &nums); err != nil {
		return errors.New("bytes must be a list of numbers from 0 to 255")
	}
	return b.set(nums)
}

// MarshalYAML writes the bytes as a sequence of numbers, as serde_yaml does.
func (b Bytes) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, c := range b {
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(c))})
	}
	return n, nil
}

// UnmarshalYAML reads a sequence of numbers from 0 to 255.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	var nums []int64
	if err := n.Decode(&nums); err != nil {
		return fmt.Errorf("line %d: bytes must be a list of numbers from 0 to 255", n.Line)
	}
	return b.set(nums)
}

func (b *Bytes) set(nums []int64) error {
	out := make([]byte, len(nums))
	for i, n := range nums {
		if n < 0 || n > 255 {
			return fmt.Errorf("byte value %d out of range", n)
		}
		out[i] = byte(n)
	}
	*b = out
	return nil
}
