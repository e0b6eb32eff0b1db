package certwatch

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
)

// defaultCipherSuites are the TLS 1.2 suites offered by default: ECDHE key
// exchange with an AEAD cipher, the Kubernetes API server's and Mozilla's
// "intermediate" choice. No CBC suite (their MAC-then-encrypt construction is
// the source of Lucky13-style padding oracles), no static RSA key exchange
// (no forward secrecy). TLS 1.3 suites are all AEAD and not configurable.
var defaultCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// DefaultCipherSuites returns the TLS 1.2 cipher suites [Watcher.TLSConfig]
// offers: ECDHE key exchange with AES-GCM or ChaCha20-Poly1305 only.
func DefaultCipherSuites() []uint16 { return slices.Clone(defaultCipherSuites) }

// CipherSuiteNames returns the names [ParseCipherSuites] accepts: the
// IANA names (which are Go's) of the TLS 1.2 suites Go considers secure.
func CipherSuiteNames() []string {
	var names []string
	for _, cs := range tls.CipherSuites() {
		if slices.Contains(cs.SupportedVersions, tls.VersionTLS12) {
			names = append(names, cs.Name)
		}
	}
	return names
}

// ParseCipherSuites returns the IDs of the named TLS 1.2 cipher suites (see
// [CipherSuiteNames]), in order, or an error naming the unknown ones and
// listing the accepted names. No names: [DefaultCipherSuites].
func ParseCipherSuites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return DefaultCipherSuites(), nil
	}
	byName := map[string]uint16{}
	for _, cs := range tls.CipherSuites() {
		if slices.Contains(cs.SupportedVersions, tls.VersionTLS12) {
			byName[cs.Name] = cs.ID
		}
	}
	ids := make([]uint16, 0, len(names))
	var unknown []string
	for _, name := range names {
		id, ok := byName[strings.TrimSpace(name)]
		if !ok {
			unknown = append(unknown, fmt.Sprintf("%q", name))
			continue
		}
		ids = append(ids, id)
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown or insecure TLS 1.2 cipher suite %s (accepted: %s)",
			strings.Join(unknown, ", "), strings.Join(CipherSuiteNames(), ", "))
	}
	return ids, nil
}

// ParseMinVersion returns the TLS version named "1.2" or "1.3" (or, as the
// Kubernetes API server's --tls-min-version takes them, "VersionTLS12" or
// "VersionTLS13"). Older versions are refused.
func ParseMinVersion(name string) (uint16, error) {
	switch name {
	case "1.2", "VersionTLS12":
		return tls.VersionTLS12, nil
	case "1.3", "VersionTLS13":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("unknown or insecure TLS version %q (accepted: 1.2, 1.3, VersionTLS12, VersionTLS13)", name)
}
