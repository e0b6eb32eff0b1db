package policyfetch

import (
	"bytes"
	"context"
	"errors"

	"github.com/wardenhq/warden/internal/observability"
)

// Verifier decides whether a registry module may be used. When Options has
// one, Fetch asks it about every registry module after reading the module's
// manifest and before reading its layer, so a module it refuses never
// reaches the store nor the caller; modules of any other scheme are refused,
// since only registry artifacts carry signatures.
//
// Implementations must be safe for concurrent use; internal/verify has one.
type Verifier interface {
	// VerifyModule returns nil when the module t describes may be used, and
	// otherwise an error that tells why on one line (Fetch puts "fetching
	// <uri>: " before it). It reads what it needs from the registry, such
	// as signatures, through f.
	VerifyModule(ctx context.Context, f *Fetcher, t Target) error
}

// Target is the module a Verifier is asked about.
type Target struct {
	// URI is the module URI, normalised: registry://host[:port]/repo:tag or
	// registry://host[:port]/repo@sha256:...
	URI string
	// Repository is host[:port]/repo, without scheme, tag or digest.
	Repository string
	// ManifestDigest is the digest of the manifest URI resolved to,
	// "sha256:<hex>". The layer Fetch returns is the one this manifest
	// names, its digest checked.
	ManifestDigest string
}

// errNotVerifiable refuses modules that cannot carry a signature.
var errNotVerifiable = &VerificationError{Err: errors.New("signature verification is on, and only registry:// modules carry signatures")}

// VerificationError is a module the Verifier refused, or one that cannot
// carry a signature while verification is on: found with errors.As in a
// Fetch error, it tells a refused module from one that could not be pulled.
type VerificationError struct{ Err error }

func (e *VerificationError) Error() string { return e.Err.Error() }
func (e *VerificationError) Unwrap() error { return e.Err }

// fetchVerified gets a registry module for a Fetcher with a Verifier: the
// manifest, its verification, then the layer the verified manifest names,
// reused from the store when the stored file is that layer.
func (f *Fetcher) fetchVerified(ctx context.Context, loc location, dest string) (Module, error) {
	man, err := f.manifest(ctx, loc.ref)
	if err != nil {
		return Module{}, err
	}
	layer, err := policyLayer(man.MediaType, man.Bytes)
	if err != nil {
		return Module{}, err
	}
	t := Target{URI: loc.uri, Repository: loc.ref.Registry + "/" + loc.ref.Repository, ManifestDigest: man.Digest}
	if err := f.verifier.VerifyModule(ctx, f, t); err != nil {
		return Module{}, &VerificationError{Err: err}
	}
	f.logger.DebugContext(ctx, "module signatures verified", keyModule, loc.uri, keyManifest, man.Digest)
	if !loc.alwaysPull {
		m, err := readModule(loc.uri, dest)
		if err == nil && m.Digest == layer.Digest.String() {
			f.logger.DebugContext(ctx, "module reused from store", keyModule, loc.uri, observability.KeyPath, dest, keyDigest, m.Digest)
			return m, nil
		}
		if err == nil {
			f.logger.InfoContext(ctx, "stored module is not the signed one, pulling it again", keyModule, loc.uri,
				observability.KeyPath, dest, keyDigest, m.Digest, "signed_sha256sum", layer.Digest.String())
		}
	}
	data, err := f.blob(ctx, loc.ref, layer, "layer")
	if err != nil {
		return Module{}, err
	}
	if !bytes.HasPrefix(data, wasmMagic) {
		return Module{}, errors.New("the module is not a WebAssembly binary (no \\0asm magic)")
	}
	if err := writeAtomic(dest, data); err != nil {
		return Module{}, err
	}
	m := newModule(loc.uri, dest, data)
	f.logger.DebugContext(ctx, "module pulled", keyModule, loc.uri, observability.KeyPath, dest, keyDigest, m.Digest)
	return m, nil
}

// keyManifest is the log key of a manifest digest.
const keyManifest = "manifest_digest"
