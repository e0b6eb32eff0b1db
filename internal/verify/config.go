package verify

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/pki"
)

// Kind is the kind of a signature requirement.
type Kind string

// The kinds of verification.yml. KindCertificate is Warden's: Kubewarden's
// verification.yml does not have it (its verify-image-signatures policy
// does, with the same fields).
const (
	// KindPubKey is a signature made with a private key whose public key
	// is given. Verified offline.
	KindPubKey Kind = "pubKey"
	// KindGenericIssuer is a keyless signature whose Fulcio certificate
	// names an OIDC issuer and subject. Needs Sigstore's trust root.
	KindGenericIssuer Kind = "genericIssuer"
	// KindGitHubAction is a keyless signature made in a GitHub Actions
	// workflow of a given owner (and repository). Needs Sigstore's trust
	// root.
	KindGitHubAction Kind = "githubAction"
	// KindCertificate is a signature made with the key of a given X.509
	// certificate, optionally checked against a given chain. Verified
	// offline unless a Rekor bundle is required.
	KindCertificate Kind = "certificate"
)

// Config is a verification.yml: the signatures a module needs. A module is
// trusted when every requirement of AllOf is met and, when AnyOf is set, at
// least AnyOf.MinimumMatches of its requirements are.
//
// A Config from ParseConfig or LoadConfig is ready to use; one built in Go
// is checked, and its keys and certificates parsed, by New. It must not be
// modified afterwards; reading it from several goroutines is safe.
type Config struct {
	// AllOf lists requirements that must all be met.
	AllOf []Signature
	// AnyOf lists requirements of which a minimum number must be met.
	AnyOf *AnyOf

	compiled bool // keys and certificates parsed
}

// AnyOf is the anyOf section of verification.yml.
type AnyOf struct {
	// MinimumMatches is how many of Signatures must be met; verification.yml
	// defaults it to 1.
	MinimumMatches int
	// Signatures lists the requirements.
	Signatures []Signature
}

// Signature is one signature requirement. Which fields apply depends on
// Kind:
//
//   - pubKey: Key (PEM public key; required), Owner (informative);
//   - genericIssuer: Issuer and Subject (required);
//   - githubAction: Owner (required), Repo;
//   - certificate: Certificate (PEM; required), CertificateChain,
//     RequireRekorBundle.
//
// Every kind takes Annotations: key/value pairs that the signed payload
// must carry in its "optional" section.
type Signature struct {
	Kind               Kind
	Owner              string
	Key                string
	Issuer             string
	Subject            *Subject
	Repo               string
	Certificate        string
	CertificateChain   []string
	RequireRekorBundle bool
	Annotations        map[string]string

	field string             // where it is in the file: allOf[0], anyOf.signatures[1]
	key   signature.Verifier // pubKey and certificate
	cert  *x509.Certificate  // certificate
	chain []*x509.Certificate
}

// Subject is the subject a keyless signature's certificate must name:
// exactly Equal, or a URL under URLPrefix (which always ends with '/', as
// Kubewarden appends it so that https://github.com/org does not match
// https://github.com/org-evil).
type Subject struct {
	Equal     string
	URLPrefix string
}

// URLPrefixSubject returns the Subject of the subjects under the URL
// prefix, which must be absolute. A '/' is added to a prefix that does not
// end with one, as Kubewarden does.
func URLPrefixSubject(prefix string) (*Subject, error) {
	u, err := url.Parse(prefix)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("%q is not an absolute URL", prefix)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return &Subject{URLPrefix: u.String()}, nil
}

// LoadConfig reads a verification.yml; see ParseConfig. Errors read
// "verification config <path>: <field>: <cause>".
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("verification config %s: %w", path, err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("verification config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a verification.yml (YAML or JSON) as Kubewarden does:
// apiVersion v1 (a file without apiVersion is read as v1, as Kubewarden's
// parser ends up doing), camelCase keys, unknown keys refused, allOf a list
// of signatures, anyOf {minimumMatches (default 1), signatures}, each
// signature tagged by kind. Public keys and certificates are parsed now, so
// a bad one is reported here. Errors name the field: "allOf[1].key: ...".
func ParseConfig(data []byte) (*Config, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, causef(err, "not valid YAML: %s", oneLine(err.Error()))
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, causef(err, "not valid YAML: %s", oneLine(err.Error()))
	}
	if doc == nil {
		return nil, errors.New("the file is empty")
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a mapping with apiVersion, allOf and anyOf, not %s", typeName(doc))
	}
	if err := onlyFields(top, "", "", "apiVersion", "allOf", "anyOf"); err != nil {
		return nil, err
	}
	if v, ok := top["apiVersion"]; ok {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("apiVersion: want a string, not %s", typeName(v))
		}
		if s != "v1" {
			return nil, fmt.Errorf("apiVersion: unsupported version %q (want v1)", s)
		}
	}
	c := &Config{}
	if v := top["allOf"]; v != nil {
		if c.AllOf, err = parseSignatures(v, "allOf"); err != nil {
			return nil, err
		}
	}
	if v := top["anyOf"]; v != nil {
		if c.AnyOf, err = parseAnyOf(v); err != nil {
			return nil, err
		}
	}
	if top["allOf"] == nil && top["anyOf"] == nil {
		return nil, errors.New("neither allOf nor anyOf is set: list the signatures a module needs")
	}
	if err := c.compile(); err != nil {
		return nil, err
	}
	return c, nil
}

func parseAnyOf(v any) (*AnyOf, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("anyOf: want a mapping with minimumMatches and signatures, not %s", typeName(v))
	}
	if err := onlyFields(m, "anyOf.", "", "minimumMatches", "signatures"); err != nil {
		return nil, err
	}
	a := &AnyOf{MinimumMatches: 1}
	if mm, ok := m["minimumMatches"]; ok && mm != nil {
		n, _ := mm.(json.Number)
		i, err := n.Int64()
		if err != nil || i < 0 || i > 255 {
			return nil, fmt.Errorf("anyOf.minimumMatches: want a whole number from 0 to 255, not %s", valueText(mm))
		}
		a.MinimumMatches = int(i)
	}
	sigs, ok := m["signatures"]
	if !ok || sigs == nil {
		return nil, errors.New("anyOf.signatures: missing")
	}
	var err error
	if a.Signatures, err = parseSignatures(sigs, "anyOf.signatures"); err != nil {
		return nil, err
	}
	return a, nil
}

func parseSignatures(v any, field string) ([]Signature, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a list of signatures, not %s", field, typeName(v))
	}
	sigs := make([]Signature, 0, len(list))
	for i, item := range list {
		s, err := parseSignature(item, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return nil, err
		}
		sigs = append(sigs, s)
	}
	return sigs, nil
}

// kindFields lists the fields of each kind, kind excepted.
var kindFields = map[Kind][]string{
	KindPubKey:        {"owner", "key", "annotations"},
	KindGenericIssuer: {"issuer", "subject", "annotations"},
	KindGitHubAction:  {"owner", "repo", "annotations"},
	KindCertificate:   {"certificate", "certificateChain", "requireRekorBundle", "annotations"},
}

func parseSignature(v any, field string) (Signature, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Signature{}, fmt.Errorf("%s: want a mapping with a kind, not %s", field, typeName(v))
	}
	k, ok := m["kind"]
	if !ok {
		return Signature{}, fmt.Errorf("%s.kind: missing (want pubKey, genericIssuer or githubAction)", field)
	}
	ks, ok := k.(string)
	if !ok {
		return Signature{}, fmt.Errorf("%s.kind: want a string, not %s", field, typeName(k))
	}
	s := Signature{Kind: Kind(ks), field: field}
	fields, ok := kindFields[s.Kind]
	if !ok {
		return Signature{}, fmt.Errorf("%s.kind: unknown kind %q (want pubKey, genericIssuer or githubAction; Warden also knows certificate)", field, ks)
	}
	if err := onlyFields(m, field+".", "for kind "+ks, append([]string{"kind"}, fields...)...); err != nil {
		return Signature{}, err
	}
	var err error
	str := func(name string, required bool) string {
		if err != nil {
			return ""
		}
		v, ok := m[name]
		if !ok || v == nil {
			if required {
				err = fmt.Errorf("%s.%s: missing", field, name)
			}
			return ""
		}
		sv, ok := v.(string)
		if !ok {
			err = fmt.Errorf("%s.%s: want a string, not %s", field, name, typeName(v))
		}
		return sv
	}
	switch s.Kind {
	case KindPubKey:
		s.Owner = str("owner", false)
		s.Key = str("key", true)
	case KindGenericIssuer:
		s.Issuer = str("issuer", true)
		if err == nil {
			s.Subject, err = parseSubject(m["subject"], field+".subject")
		}
	case KindGitHubAction:
		s.Owner = str("owner", true)
		s.Repo = str("repo", false)
	case KindCertificate:
		s.Certificate = str("certificate", true)
		if v, ok := m["certificateChain"]; ok && v != nil && err == nil {
			s.CertificateChain, err = stringList(v, field+".certificateChain")
		}
		if v, ok := m["requireRekorBundle"]; ok && v != nil && err == nil {
			b, ok := v.(bool)
			if !ok {
				err = fmt.Errorf("%s.requireRekorBundle: want true or false, not %s", field, typeName(v))
			}
			s.RequireRekorBundle = b
		}
	}
	if err != nil {
		return Signature{}, err
	}
	if v, ok := m["annotations"]; ok && v != nil {
		if s.Annotations, err = stringMap(v, field+".annotations"); err != nil {
			return Signature{}, err
		}
	}
	return s, nil
}

func parseSubject(v any, field string) (*Subject, error) {
	if v == nil {
		return nil, fmt.Errorf("%s: missing (want equal or urlPrefix)", field)
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return nil, fmt.Errorf("%s: want a mapping with one key, equal or urlPrefix", field)
	}
	if err := onlyFields(m, field+".", "", "equal", "urlPrefix"); err != nil {
		return nil, err
	}
	for k, val := range m {
		s, ok := val.(string)
		if !ok {
			return nil, fmt.Errorf("%s.%s: want a string, not %s", field, fieldName(k), typeName(val))
		}
		if k == "equal" {
			return &Subject{Equal: s}, nil
		}
		subject, err := URLPrefixSubject(s)
		if err != nil {
			return nil, fmt.Errorf("%s.urlPrefix: %w", field, err)
		}
		return subject, nil
	}
	return nil, nil // unreachable: m has one key
}

func stringList(v any, field string) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a list of strings, not %s", field, typeName(v))
	}
	out := make([]string, len(list))
	for i, item := range list {
		s, ok := item.(string)
		if !ok {
			return nil, fmt.Errorf("%s[%d]: want a string, not %s", field, i, typeName(item))
		}
		out[i] = s
	}
	return out, nil
}

func stringMap(v any, field string) (map[string]string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a mapping of strings, not %s", field, typeName(v))
	}
	out := make(map[string]string, len(m))
	for k, val := range m {
		s, ok := val.(string)
		if !ok {
			return nil, fmt.Errorf("%s.%s: want a string, not %s (quote it)", field, fieldName(k), typeName(val))
		}
		out[k] = s
	}
	return out, nil
}

// onlyFields refuses keys of m not in allowed. prefix names m in errors,
// and what, when set, follows "unknown field".
func onlyFields(m map[string]any, prefix, what string, allowed ...string) error {
	var unknown []string
	for k := range m {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	if what != "" {
		what = " " + what
	}
	return fmt.Errorf("%s%s: unknown field%s (want %s)", prefix, fieldName(unknown[0]), what, strings.Join(allowed, ", "))
}

// fieldName writes a key of the file for a message: as is when it is a
// plain name, quoted otherwise.
func fieldName(k string) string {
	for _, r := range k {
		if !(r == '_' || r == '-' || r == '.' || r == '/' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return strconv.Quote(k)
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

// valueText writes a scalar of the file for a message.
func valueText(v any) string {
	if n, ok := v.(json.Number); ok {
		return n.String()
	}
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return typeName(v)
}

// causeError is an error told in one line that keeps its cause for
// errors.Is and errors.As.
type causeError struct {
	msg string
	err error
}

func (e *causeError) Error() string { return e.msg }
func (e *causeError) Unwrap() error { return e.err }

func causef(err error, format string, args ...any) error {
	return &causeError{msg: fmt.Sprintf(format, args...), err: err}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

// compile checks c and parses its keys and certificates. Errors name the
// field.
func (c *Config) compile() error {
	required := len(c.AllOf)
	for i := range c.AllOf {
		if err := c.AllOf[i].compile(fmt.Sprintf("allOf[%d]", i)); err != nil {
			return err
		}
	}
	if a := c.AnyOf; a != nil {
		if a.MinimumMatches < 0 {
			return fmt.Errorf("anyOf.minimumMatches: %d is negative", a.MinimumMatches)
		}
		if a.MinimumMatches > len(a.Signatures) {
			return fmt.Errorf("anyOf.minimumMatches: %d is more than the %d signatures listed, so no module could ever be verified", a.MinimumMatches, len(a.Signatures))
		}
		for i := range a.Signatures {
			if err := a.Signatures[i].compile(fmt.Sprintf("anyOf.signatures[%d]", i)); err != nil {
				return err
			}
		}
		required += a.MinimumMatches
	}
	if required == 0 {
		return errors.New("no signature is required: list signatures in allOf, or in anyOf with a minimumMatches of at least 1")
	}
	c.compiled = true
	return nil
}

// compile checks s and parses its key or certificate.
func (s *Signature) compile(field string) error {
	if s.field == "" {
		s.field = field
	}
	switch s.Kind {
	case KindPubKey:
		pub, err := cryptoutils.UnmarshalPEMToPublicKey([]byte(strings.TrimSpace(s.Key)))
		if err != nil {
			return fmt.Errorf("%s.key: not a PEM public key: %w", s.field, err)
		}
		if s.key, err = loadVerifier(pub); err != nil {
			return fmt.Errorf("%s.key: %w", s.field, err)
		}
	case KindGenericIssuer:
		if s.Issuer == "" {
			return fmt.Errorf("%s.issuer: missing", s.field)
		}
		if s.Subject == nil || (s.Subject.Equal == "") == (s.Subject.URLPrefix == "") {
			return fmt.Errorf("%s.subject: want one of equal or urlPrefix", s.field)
		}
	case KindGitHubAction:
		if s.Owner == "" {
			return fmt.Errorf("%s.owner: missing", s.field)
		}
	case KindCertificate:
		certs, err := pki.ParseCertificates([]byte(s.Certificate))
		if err != nil {
			return fmt.Errorf("%s.certificate: %w", s.field, err)
		}
		s.cert = certs[0]
		if s.key, err = loadVerifier(s.cert.PublicKey); err != nil {
			return fmt.Errorf("%s.certificate: %w", s.field, err)
		}
		s.chain = nil
		for i, c := range s.CertificateChain {
			certs, err := pki.ParseCertificates([]byte(c))
			if err != nil {
				return fmt.Errorf("%s.certificateChain[%d]: %w", s.field, i, err)
			}
			s.chain = append(s.chain, certs...)
		}
	default:
		return fmt.Errorf("%s.kind: unknown kind %q (want pubKey, genericIssuer or githubAction; Warden also knows certificate)", s.field, s.Kind)
	}
	return nil
}

// loadVerifier returns the verifier of a public key: ECDSA and RSA
// (PKCS#1 v1.5) over SHA-256, or Ed25519, as cosign signs with them.
func loadVerifier(pub crypto.PublicKey) (signature.Verifier, error) {
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("%T: %w (want ECDSA, RSA or Ed25519)", pub, err)
	}
	return v, nil
}

// KeyConfig returns the Config that kwctl builds from its -k and -a flags:
// every public key (PEM) in allOf, each with the same annotations.
func KeyConfig(keys []string, annotations map[string]string) (*Config, error) {
	if len(keys) == 0 {
		return nil, errors.New("no public key given")
	}
	c := &Config{}
	for _, k := range keys {
		c.AllOf = append(c.AllOf, Signature{Kind: KindPubKey, Key: k, Annotations: annotations})
	}
	if err := c.compile(); err != nil {
		return nil, err
	}
	return c, nil
}

// describe names s for messages: allOf[0] (pubKey, owner alice).
func (s *Signature) describe() string {
	var what []string
	what = append(what, string(s.Kind))
	switch s.Kind {
	case KindPubKey:
		if s.Owner != "" {
			what = append(what, "owner "+s.Owner)
		}
	case KindGenericIssuer:
		what = append(what, "issuer "+s.Issuer)
		if s.Subject != nil && s.Subject.Equal != "" {
			what = append(what, "subject "+s.Subject.Equal)
		} else if s.Subject != nil {
			what = append(what, "subject under "+s.Subject.URLPrefix)
		}
	case KindGitHubAction:
		what = append(what, "owner "+s.Owner)
		if s.Repo != "" {
			what = append(what, "repo "+s.Repo)
		}
	case KindCertificate:
		if s.cert != nil {
			what = append(what, "subject "+s.cert.Subject.String())
		}
	}
	return fmt.Sprintf("%s (%s)", s.field, strings.Join(what, ", "))
}
