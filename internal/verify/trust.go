package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	prototrustroot "github.com/sigstore/protobuf-specs/gen/pb-go/trustroot/v1"
	"github.com/sigstore/sigstore-go/pkg/root"
	"google.golang.org/protobuf/encoding/protojson"
)

// The media types of the files LoadTrustConfig reads.
const (
	// MediaTypeClientTrustConfig is the media type of a Sigstore
	// ClientTrustConfig, what --sigstore-trust-config names.
	MediaTypeClientTrustConfig = "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"
	// MediaTypeTrustedRoot is the media type of a Sigstore TrustedRoot
	// (cosign trusted-root create writes one).
	MediaTypeTrustedRoot = root.TrustedRootMediaType01
)

// TrustRoot is the Sigstore trust root keyless signatures are checked
// against: the Fulcio certificate authorities that issue signing
// certificates and the Rekor transparency logs whose signed entries prove
// when a signature was made. It is read from a file and never fetched:
// Warden does not use Sigstore's TUF repository. It is immutable and safe
// for concurrent use.
type TrustRoot struct {
	material root.TrustedMaterial
	source   string
}

// LoadTrustConfig reads a Sigstore ClientTrustConfig (the JSON of
// Sigstore's protobuf specs, as Kubewarden's --sigstore-trust-config takes),
// or a bare TrustedRoot; see ParseTrustConfig. Errors read "sigstore trust
// config <path>: <cause>".
func LoadTrustConfig(path string) (*TrustRoot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sigstore trust config %s: %w", path, err)
	}
	tr, err := ParseTrustConfig(b)
	if err != nil {
		return nil, fmt.Errorf("sigstore trust config %s: %w", path, err)
	}
	tr.source = path
	return tr, nil
}

// ParseTrustConfig parses a ClientTrustConfig (mediaType
// application/vnd.dev.sigstore.clienttrustconfig.v0.1+json) and returns
// its trustedRoot; its signingConfig, which only signers use, is ignored.
// A bare TrustedRoot (mediaType
// application/vnd.dev.sigstore.trustedroot+json;version=0.1) is accepted
// too. The trust root must list at least one certificate authority and one
// transparency log: keyless signatures need both.
func ParseTrustConfig(data []byte) (*TrustRoot, error) {
	var probe struct {
		MediaType string `json:"mediaType"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	var pb *prototrustroot.TrustedRoot
	switch probe.MediaType {
	case MediaTypeClientTrustConfig:
		var ctc prototrustroot.ClientTrustConfig
		if err := protojson.Unmarshal(data, &ctc); err != nil {
			return nil, fmt.Errorf("not a ClientTrustConfig: %w", err)
		}
		if ctc.GetTrustedRoot() == nil {
			return nil, errors.New("trustedRoot: missing")
		}
		pb = ctc.GetTrustedRoot()
	case MediaTypeTrustedRoot:
		pb = &prototrustroot.TrustedRoot{}
		if err := protojson.Unmarshal(data, pb); err != nil {
			return nil, fmt.Errorf("not a TrustedRoot: %w", err)
		}
	case "":
		return nil, fmt.Errorf("mediaType: missing (want %s)", MediaTypeClientTrustConfig)
	default:
		return nil, fmt.Errorf("mediaType: unsupported %q (want %s)", probe.MediaType, MediaTypeClientTrustConfig)
	}
	tr, err := root.NewTrustedRootFromProtobuf(pb)
	if err != nil {
		return nil, fmt.Errorf("trustedRoot: %w", err)
	}
	if len(tr.FulcioCertificateAuthorities()) == 0 {
		return nil, errors.New("trustedRoot.certificateAuthorities: empty: keyless signatures need the Fulcio certificate authority that issued their certificates")
	}
	if len(tr.RekorLogs()) == 0 {
		return nil, errors.New("trustedRoot.tlogs: empty: keyless signatures need the Rekor transparency log that recorded them")
	}
	return &TrustRoot{material: tr}, nil
}

// NewTrustRoot wraps trusted material built in Go, such as sigstore-go's
// root.TrustedRoot.
func NewTrustRoot(m root.TrustedMaterial) *TrustRoot {
	return &TrustRoot{material: m}
}

// Source is the file the trust root was read from, "" when it was not.
func (t *TrustRoot) Source() string { return t.source }
