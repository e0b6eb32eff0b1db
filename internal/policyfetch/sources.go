package policyfetch

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/pki"
)

// Sources is the content of Kubewarden's sources.yml: which hosts may be
// reached over plain HTTP or with unverified TLS, which extra certificate
// authorities each host is trusted with, and optionally which proxies to use.
// Hosts are written host or host:port, exactly as they appear in module URIs.
//
// A Sources must not be modified once it has been given to New; reading it
// from several goroutines is safe.
type Sources struct {
	// InsecureSources lists the hosts that may be reached over plain HTTP or
	// over TLS without verifying the certificate.
	InsecureSources []string
	// SourceAuthorities maps a host to the certificate authorities, in
	// addition to the system ones, that its TLS certificate may chain to.
	SourceAuthorities map[string][]*x509.Certificate
	// Proxies, when set, replaces the proxy environment variables
	// (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, upper or lower case).
	Proxies *ProxyConfig
}

// ProxyConfig is the proxies section of sources.yml. Empty fields mean no
// proxy for that scheme.
type ProxyConfig struct {
	HTTPProxy  string `json:"http_proxy"`
	HTTPSProxy string `json:"https_proxy"`
	NoProxy    string `json:"no_proxy"`
}

// IsInsecure reports whether host (host or host:port) is an insecure source.
// A nil Sources has none.
func (s *Sources) IsInsecure(host string) bool {
	return s != nil && slices.Contains(s.InsecureSources, host)
}

// authorities returns the extra certificate authorities of host, if any.
func (s *Sources) authorities(host string) []*x509.Certificate {
	if s == nil {
		return nil
	}
	return s.SourceAuthorities[host]
}

// LoadSources reads a sources.yml (YAML or JSON). Unknown keys are ignored,
// as Kubewarden does; an authority entry is {type: Path, path: file} or
// {type: Data, data: "<PEM>"} (data may also be a list of bytes), and its
// certificate may be PEM (one or more CERTIFICATE blocks) or DER. Relative
// paths are relative to the working directory.
func LoadSources(path string) (*Sources, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading sources from %s: %w", path, err)
	}
	s, err := ParseSources(b)
	if err != nil {
		return nil, fmt.Errorf("loading sources from %s: %w", path, err)
	}
	return s, nil
}

// ParseSources parses the content of a sources.yml; see LoadSources.
func ParseSources(data []byte) (*Sources, error) {
	var raw struct {
		InsecureSources   []string                     `json:"insecure_sources"`
		SourceAuthorities map[string][]sourceAuthority `json:"source_authorities"`
		Proxies           *ProxyConfig                 `json:"proxies"`
	}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parsing sources: %w", err)
	}
	s := &Sources{InsecureSources: raw.InsecureSources, Proxies: raw.Proxies}
	for host, entries := range raw.SourceAuthorities {
		for i, e := range entries {
			certs, err := e.certificates()
			if err != nil {
				return nil, fmt.Errorf("source authority %d of %s: %w", i+1, host, err)
			}
			if s.SourceAuthorities == nil {
				s.SourceAuthorities = map[string][]*x509.Certificate{}
			}
			s.SourceAuthorities[host] = append(s.SourceAuthorities[host], certs...)
		}
	}
	return s, nil
}

// sourceAuthority is one entry of source_authorities, tagged by type.
type sourceAuthority struct {
	Type string      `json:"type"`
	Path string      `json:"path"`
	Data certificate `json:"data"`
}

func (e sourceAuthority) certificates() ([]*x509.Certificate, error) {
	var b []byte
	switch e.Type {
	case "Path":
		if e.Path == "" {
			return nil, errors.New("type Path needs a path")
		}
		var err error
		if b, err = os.ReadFile(e.Path); err != nil {
			return nil, fmt.Errorf("reading certificate: %w", err)
		}
	case "Data":
		if len(e.Data) == 0 {
			return nil, errors.New("type Data needs data")
		}
		b = e.Data
	default:
		return nil, fmt.Errorf("unknown type %q (want Path or Data)", e.Type)
	}
	return parseCertificates(b)
}

// certificate is the data of a Data entry: a string, or a list of bytes as
// serde writes them.
type certificate []byte

// UnmarshalJSON accepts a string or a list of integers from 0 to 255.
func (c *certificate) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = []byte(s)
		return nil
	}
	var ints []int
	if err := json.Unmarshal(b, &ints); err != nil {
		return errors.New("data must be a string or a list of bytes")
	}
	out := make([]byte, len(ints))
	for i, v := range ints {
		if v < 0 || v > 255 {
			return fmt.Errorf("data byte %d is %d, out of range", i, v)
		}
		out[i] = byte(v)
	}
	*c = out
	return nil
}

// parseCertificates reads every CERTIFICATE block of PEM data, or one DER
// certificate.
func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	if !bytes.Contains(b, []byte("-----BEGIN")) {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return nil, errors.New("the certificate is neither PEM nor DER")
		}
		return []*x509.Certificate{c}, nil
	}
	return pki.ParseCertificates(b)
}
