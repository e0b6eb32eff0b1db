// Package certwatch serves a TLS certificate that follows its files: the
// policy server's serving certificate and key, and the optional client CAs
// that turn on mutual TLS (--cert-file, --key-file and --client-ca-file:
// docs/compatibility.md#tls).
//
// The files are reloaded when they change, without a restart and without
// dropping connections: the directories holding them are watched, which works
// for plain rewrites as well as for the symlink swap Kubernetes performs when a
// mounted Secret changes, and a periodic re-check catches anything the
// watch missed. A pair that does not load (half written, or a key that does
// not match the certificate) never replaces one that does.
//
// The configuration it returns offers TLS 1.2 and 1.3, and under TLS 1.2 only
// ECDHE suites with AEAD ciphers (no CBC); ParseCipherSuites and
// ParseMinVersion read the flags that change them (--tls-cipher-suites,
// --tls-min-version).
//
// It imports only internal/observability from Warden (for the log keys) and
// must not import anything that serves requests.
package certwatch
