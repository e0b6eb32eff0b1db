package wardenctl

import (
	"context"
	"encoding/asn1"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/spf13/cobra"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/pki"
	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/verify"
)

// fetchedPolicy is a policy argument, resolved and read.
type fetchedPolicy struct {
	URI    string
	Digest string
	Bytes  []byte
}

// fetchPolicy resolves a policy argument and reads its module, pulling it
// into the store when it is remote.
func (a *app) fetchPolicy(ctx context.Context, o RemoteOptions, arg string) (*fetchedPolicy, error) {
	ref, err := a.resolvePolicy(arg)
	if err != nil {
		return nil, err
	}
	if ref.URI == engine.NativeCELModule || isKubePolicyModule(ref.URI) {
		return nil, fmt.Errorf("%s is one of Warden's native policies: it has no module and no metadata", ref.URI)
	}
	f, err := a.fetcher(o, a.storeDir())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := f.Fetch(ctx, ref.Fetch)
	if err != nil {
		return nil, err
	}
	return &fetchedPolicy{URI: ref.URI, Digest: m.Digest, Bytes: m.Bytes}, nil
}

// policyMetadata reads the metadata of a fetched policy, with kwctl's hint
// when there is none.
func policyMetadata(p *fetchedPolicy) (*metadata.Metadata, error) {
	m, err := metadata.FromModule(p.Bytes)
	if errors.Is(err, metadata.ErrMissing) {
		return nil, fmt.Errorf("no Kubewarden metadata found inside of %s: annotate the policy with `wardenctl annotate`", p.URI)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the metadata of %s: %w", p.URI, err)
	}
	return m, nil
}

// InspectOptions are the flags of inspect.
type InspectOptions struct {
	Remote RemoteOptions
	// Output is "" (for people) or yaml.
	Output string
	// ShowSignatures asks for the policy's Sigstore signatures.
	ShowSignatures bool
}

// AddFlags registers the flags, with kwctl's names.
func (o *InspectOptions) AddFlags(cmd *cobra.Command) {
	o.Remote.AddFlags(cmd)
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "Output format: yaml (default: for people)")
	cmd.Flags().BoolVar(&o.ShowSignatures, "show-signatures", false, "Show the Sigstore (cosign) signatures of a policy in a registry: listed, not verified")
}

// Validate checks the output format.
func (o *InspectOptions) Validate() error {
	if o.Output != "" && o.Output != "yaml" {
		return &usageError{fmt.Errorf("invalid --output %q: the only format is yaml", o.Output)}
	}
	return nil
}

// The annotations inspect shows as details, in this order.
var detailAnnotations = []string{
	"io.kubewarden.policy.title",
	"io.kubewarden.policy.description",
	"io.kubewarden.policy.author",
	"io.kubewarden.policy.url",
	sourceAnnotation,
	"io.kubewarden.policy.license",
}

func (a *app) inspectCommand() *cobra.Command {
	var o InspectOptions
	cmd := &cobra.Command{
		Use:   "inspect [flags] <uri|sha-prefix|path>",
		Short: "Show the metadata of a policy",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			p, err := a.fetchPolicy(cmd.Context(), o.Remote, argv[0])
			if err != nil {
				return err
			}
			m, err := policyMetadata(p)
			if err != nil {
				return err
			}
			if o.Output == "yaml" {
				b, err := jsonToYAML(m)
				if err != nil {
					return err
				}
				if _, err = a.out.Write(b); err != nil || !o.ShowSignatures {
					return err
				}
				return a.writeSignaturesYAML(a.policySignatures(cmd.Context(), o.Remote, p))
			}
			if err := a.printMetadata(p, m); err != nil || !o.ShowSignatures {
				return err
			}
			// After the metadata, which is printed even when the registry
			// cannot be reached.
			return a.printSignatures(a.policySignatures(cmd.Context(), o.Remote, p))
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// printMetadata prints metadata for people: details, annotations, rules,
// usage.
func (a *app) printMetadata(p *fetchedPolicy, m *metadata.Metadata) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Details")
	fmt.Fprintf(tw, "policy:\t%s\n", p.URI)
	fmt.Fprintf(tw, "sha256:\t%s\n", strings.TrimPrefix(p.Digest, "sha256:"))
	annotations := map[string]string{}
	for k, v := range m.Annotations {
		annotations[k] = v
	}
	for _, k := range detailAnnotations {
		if v, ok := annotations[k]; ok {
			fmt.Fprintf(tw, "%s:\t%s\n", strings.TrimPrefix(k, "io.kubewarden.policy."), v)
			delete(annotations, k)
		}
	}
	fmt.Fprintf(tw, "mutating:\t%t\n", m.Mutating)
	fmt.Fprintf(tw, "background audit:\t%t\n", m.BackgroundAudit == nil || *m.BackgroundAudit)
	fmt.Fprintf(tw, "execution mode:\t%s\n", m.Mode())
	fmt.Fprintf(tw, "policy type:\t%s\n", m.Type())
	if m.Mode() == metadata.ModeWapc {
		fmt.Fprintf(tw, "protocol version:\t%s\n", orNone(m.ProtocolVersion))
	}
	if m.MinimumKubewardenVersion != "" {
		fmt.Fprintf(tw, "minimum Kubewarden version:\t%s\n", m.MinimumKubewardenVersion)
	}
	var car []string
	for _, r := range m.ContextAwareResources {
		car = append(car, r.APIVersion+"/"+r.Kind)
	}
	fmt.Fprintf(tw, "context aware resources:\t%s\n", orNone(strings.Join(car, ", ")))
	if len(m.HostCapabilities) > 0 {
		fmt.Fprintf(tw, "host capabilities:\t%s\n", strings.Join(m.HostCapabilities, ", "))
	}
	usage, hasUsage := annotations[usageAnnotation]
	delete(annotations, usageAnnotation)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(annotations) > 0 {
		fmt.Fprintf(a.out, "\nAnnotations\n")
		keys := make([]string, 0, len(annotations))
		for k := range annotations {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tw = tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%s\n", k, oneLine(annotations[k]))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	rules, err := jsonToYAML(m.Rules)
	if err != nil {
		return err
	}
	if len(m.Rules) == 0 {
		rules = []byte("none\n")
	}
	fmt.Fprintf(a.out, "\nRules\n%s", rules)
	if hasUsage {
		fmt.Fprintf(a.out, "\nUsage\n%s\n", strings.TrimRight(usage, "\n"))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// jsonToYAML writes v as block-style YAML in the order of its JSON encoding
// (struct field order), which sigs.k8s.io/yaml would sort.
func jsonToYAML(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var n yamlv3.Node
	if err := yamlv3.Unmarshal(js, &n); err != nil {
		return nil, err
	}
	plainStyle(&n)
	var sb strings.Builder
	enc := yamlv3.NewEncoder(&sb)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(sb.String()), nil
}

// plainStyle clears the flow and quoting styles that JSON input gives the
// nodes; the encoder quotes what needs quoting.
func plainStyle(n *yamlv3.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plainStyle(c)
	}
}

// Limits on what inspect reads of a signature artifact, as verification's.
const (
	maxInspectedPayloads   = 256
	maxInspectedPayloadLen = 1 << 20
)

// annotationChain is the layer annotation of cosign's certificate chain.
const annotationChain = "dev.sigstore.cosign/chain"

// signatureReport is what inspect --show-signatures found of a policy's
// cosign signatures (the image tagged sha256-<hex>.sig next to the
// policy's manifest, as kwctl shows them).
type signatureReport struct {
	// URI is the inspected policy.
	URI string
	// NotInRegistry is set when the policy is not a registry:// one: it
	// carries no signatures.
	NotInRegistry bool
	// Unavailable is why the signatures could not be read: the registry
	// could not be reached, refused the credentials, ...
	Unavailable error
	// Ref is the signature artifact, host/repo:sha256-<hex>.sig.
	Ref string
	// ManifestDigest is the digest of the policy's manifest in the registry.
	ManifestDigest string
	// OtherModule, when set, is the digest of the module that the
	// registry's manifest names, which is not the inspected one: the tag
	// moved since the policy was pulled.
	OtherModule string
	// Manifest is the signature artifact's manifest, as served; nil when
	// there is none.
	Manifest []byte
	// Signatures are the artifact's layers, in order.
	Signatures []signatureLayer
}

// signatureLayer is one layer of a signature artifact.
type signatureLayer struct {
	Layer ocispec.Descriptor
	// Payload is the signed simple-signing document; nil when it was not
	// read (PayloadErr says why, unless the layer is not a cosign one).
	Payload    *signedPayload
	PayloadErr error
}

// signedPayload is cosign's simple-signing payload: what a signature signs.
type signedPayload struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
	} `json:"critical"`
	// Optional holds the annotations given at signing (cosign sign -a).
	Optional map[string]any `json:"optional"`
}

// policySignatures reads the cosign signatures of a fetched policy. It
// never fails: what goes wrong is in the report's Unavailable.
func (a *app) policySignatures(ctx context.Context, o RemoteOptions, p *fetchedPolicy) *signatureReport {
	r := &signatureReport{URI: p.URI}
	if !strings.HasPrefix(p.URI, "registry://") {
		r.NotInRegistry = true
		return r
	}
	r.Unavailable = a.readSignatures(ctx, o, p, r)
	return r
}

func (a *app) readSignatures(ctx context.Context, o RemoteOptions, p *fetchedPolicy, r *signatureReport) error {
	ref, err := parseRegistryRef(p.URI)
	if err != nil {
		return err
	}
	repo := ref.Registry + "/" + ref.Repository
	f, err := a.fetcher(o, a.storeDir())
	if err != nil {
		return err
	}
	defer f.Close()
	man, err := f.FetchManifest(ctx, p.URI)
	if err != nil {
		return err
	}
	r.ManifestDigest = man.Digest
	var pm ocispec.Manifest
	if json.Unmarshal(man.Bytes, &pm) == nil && len(pm.Layers) == 1 && string(pm.Layers[0].Digest) != p.Digest {
		r.OtherModule = string(pm.Layers[0].Digest)
	}
	tag, err := verify.SignatureTag(man.Digest)
	if err != nil {
		return err
	}
	r.Ref = repo + ":" + tag
	sig, err := f.FetchManifest(ctx, r.Ref)
	if errors.Is(err, policyfetch.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(sig.Bytes, &m); err != nil {
		return fmt.Errorf("%s is not an image manifest: %w", r.Ref, err)
	}
	r.Manifest = sig.Bytes
	for i, l := range m.Layers {
		s := signatureLayer{Layer: l}
		switch {
		case l.MediaType != verify.MediaTypeSimpleSigning:
		case i >= maxInspectedPayloads || l.Size > maxInspectedPayloadLen:
			s.PayloadErr = errors.New("not read: too many signatures, or too large a payload")
		default:
			b, err := f.FetchBlob(ctx, repo, l)
			if err != nil {
				s.PayloadErr = err
				break
			}
			var payload signedPayload
			if err := json.Unmarshal(b, &payload); err != nil {
				s.PayloadErr = fmt.Errorf("not a simple-signing payload: %w", err)
				break
			}
			s.Payload = &payload
		}
		r.Signatures = append(r.Signatures, s)
	}
	return nil
}

// printSignatures prints a signature report for people.
func (a *app) printSignatures(r *signatureReport) error {
	fmt.Fprintf(a.out, "\nSignatures\n")
	switch {
	case r.NotInRegistry:
		fmt.Fprintf(a.out, "no Sigstore signatures: %s is not in a registry\n", r.URI)
		return nil
	case r.Unavailable != nil:
		fmt.Fprintf(a.out, "signature information not available: %s\n", oneLine(r.Unavailable.Error()))
		return nil
	case len(r.Signatures) == 0:
		fmt.Fprintf(a.out, "no Sigstore signatures found (none at %s)\n", r.Ref)
		return nil
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "signature artifact:\t%s\n", r.Ref)
	fmt.Fprintf(tw, "policy manifest:\t%s\n", r.ManifestDigest)
	if r.OtherModule != "" {
		fmt.Fprintf(tw, "note:\tthe registry's manifest now names module %s, not the inspected one: these are its signatures\n", r.OtherModule)
	}
	fmt.Fprintf(tw, "verified:\tno: `wardenctl verify` checks signatures against keys or a verification.yml\n")
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, s := range r.Signatures {
		fmt.Fprintf(a.out, "\nSignature %d\n", i+1)
		tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "digest:\t%s\n", s.Layer.Digest)
		fmt.Fprintf(tw, "media type:\t%s\n", s.Layer.MediaType)
		fmt.Fprintf(tw, "size:\t%d\n", s.Layer.Size)
		switch {
		case s.Payload != nil:
			signed := s.Payload.Critical.Identity.DockerReference + "@" + s.Payload.Critical.Image.DockerManifestDigest
			if s.Payload.Critical.Image.DockerManifestDigest != r.ManifestDigest {
				signed += " (not the policy's manifest)"
			}
			fmt.Fprintf(tw, "signs:\t%s\n", signed)
			fmt.Fprintf(tw, "signed annotations:\t%s\n", orNone(payloadAnnotations(s.Payload.Optional)))
		case s.PayloadErr != nil:
			fmt.Fprintf(tw, "signs:\tunknown: the payload could not be read: %s\n", oneLine(s.PayloadErr.Error()))
		default:
			fmt.Fprintf(tw, "signs:\tunknown: not a cosign signature layer\n")
		}
		// The layer's annotations: cosign's first, summarised, then the
		// others as they are.
		annotations := maps.Clone(s.Layer.Annotations)
		if v, ok := annotations[verify.AnnotationCertificate]; ok {
			fmt.Fprintf(tw, "certificate:\t%s\n", describeCertificates(v, false))
		} else {
			fmt.Fprintf(tw, "certificate:\tnone (signed with a key)\n")
		}
		if v, ok := annotations[annotationChain]; ok {
			fmt.Fprintf(tw, "certificate chain:\t%s\n", describeCertificates(v, true))
		}
		if v, ok := annotations[verify.AnnotationBundle]; ok {
			fmt.Fprintf(tw, "rekor bundle:\t%s\n", describeBundle(v))
		}
		if v, ok := annotations[verify.AnnotationSignature]; ok {
			fmt.Fprintf(tw, "signature:\t%s\n", oneLine(v))
		} else {
			fmt.Fprintf(tw, "signature:\tnone\n")
		}
		for _, k := range []string{verify.AnnotationCertificate, annotationChain, verify.AnnotationBundle, verify.AnnotationSignature} {
			delete(annotations, k)
		}
		for _, k := range slices.Sorted(maps.Keys(annotations)) {
			fmt.Fprintf(tw, "%s:\t%s\n", k, oneLine(annotations[k]))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// writeSignaturesYAML appends a signature report to inspect's YAML output
// as kwctl does: a "signatures" key holding the signature artifact's
// manifest. What is not a manifest is a YAML comment.
func (a *app) writeSignaturesYAML(r *signatureReport) error {
	var err error
	switch {
	case r.NotInRegistry:
		_, err = fmt.Fprintf(a.out, "# no Sigstore signatures: %s is not in a registry\nsignatures: null\n", r.URI)
	case r.Unavailable != nil:
		_, err = fmt.Fprintf(a.out, "# signature information not available: %s\n", oneLine(r.Unavailable.Error()))
	case r.Manifest == nil:
		_, err = fmt.Fprintf(a.out, "# no Sigstore signatures found (none at %s)\nsignatures: null\n", r.Ref)
	default:
		var b []byte
		b, err = jsonToYAML(struct {
			Signatures json.RawMessage `json:"signatures"`
		}{r.Manifest})
		if err == nil {
			_, err = a.out.Write(b)
		}
	}
	return err
}

// payloadAnnotations formats the optional section of a signed payload:
// key=value pairs, sorted; values that are not strings as JSON.
func payloadAnnotations(optional map[string]any) string {
	pairs := make([]string, 0, len(optional))
	for _, k := range slices.Sorted(maps.Keys(optional)) {
		v, ok := optional[k].(string)
		if !ok {
			b, _ := json.Marshal(optional[k])
			v = string(b)
		}
		pairs = append(pairs, k+"="+v)
	}
	return strings.Join(pairs, ", ")
}

// Fulcio's certificate extensions that name the OIDC issuer of a keyless
// signature: the deprecated raw string, and its DER successor.
var (
	oidFulcioIssuer   = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 1}
	oidFulcioIssuerV2 = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 8}
)

// describeCertificates summarises PEM certificates on one line: for a
// signing certificate, its subject, identities (e-mail addresses, URIs),
// OIDC issuer (Fulcio), issuer and validity; for a chain, each subject.
func describeCertificates(pemText string, chain bool) string {
	certs, err := pki.ParseCertificates([]byte(pemText))
	if err != nil {
		return "unreadable: " + err.Error()
	}
	if chain {
		subjects := make([]string, len(certs))
		for i, c := range certs {
			subjects[i] = strconv.Quote(c.Subject.String())
		}
		noun := "certificates"
		if len(certs) == 1 {
			noun = "certificate"
		}
		return fmt.Sprintf("%d %s: %s", len(certs), noun, strings.Join(subjects, ", "))
	}
	c := certs[0]
	parts := []string{"subject " + strconv.Quote(c.Subject.String())}
	var ids []string
	ids = append(ids, c.EmailAddresses...)
	for _, u := range c.URIs {
		ids = append(ids, u.String())
	}
	if len(ids) > 0 {
		parts = append(parts, "identity "+strings.Join(ids, ", "))
	}
	for _, ext := range c.Extensions {
		switch {
		case ext.Id.Equal(oidFulcioIssuerV2):
			var issuer string
			if _, err := asn1.Unmarshal(ext.Value, &issuer); err == nil {
				parts = append(parts, "oidc issuer "+issuer)
			}
		case ext.Id.Equal(oidFulcioIssuer):
			parts = append(parts, "oidc issuer "+string(ext.Value))
		}
	}
	parts = append(parts,
		"issued by "+strconv.Quote(c.Issuer.String()),
		"valid "+c.NotBefore.UTC().Format(time.RFC3339)+" to "+c.NotAfter.UTC().Format(time.RFC3339))
	return strings.Join(parts, ", ")
}

// describeBundle summarises a Rekor bundle annotation: its transparency
// log entry.
func describeBundle(v string) string {
	var b struct {
		Payload struct {
			IntegratedTime int64 `json:"integratedTime"`
			LogIndex       int64 `json:"logIndex"`
		} `json:"Payload"`
	}
	if err := json.Unmarshal([]byte(v), &b); err != nil {
		return "present, unreadable: " + err.Error()
	}
	return fmt.Sprintf("log index %d, integrated %s", b.Payload.LogIndex,
		time.Unix(b.Payload.IntegratedTime, 0).UTC().Format(time.RFC3339))
}
