// Package verify checks the cosign signatures of policy modules stored in OCI
// registries, offline, the way Kubewarden's policy-server does with
// --verification-path (docs/compatibility.md#fetching-policies), and signs
// modules the way cosign sign --key does.
//
// A verification.yml (LoadConfig, ParseConfig; KeyConfig for kwctl-style
// -k/-a flags) lists the signatures a module needs: allOf, all of them, and
// anyOf, at least minimumMatches of them. A Verifier (New) checks a module
// against it: it resolves the manifest digest sha256:X, reads the image
// tagged sha256-X.sig in the same repository, and for each requirement
// looks for a layer of type application/vnd.dev.cosign.simplesigning.v1+json
// whose signature (annotation dev.cosignproject.cosign/signature) verifies
// with the requirement's key over the layer's bytes, whose simple-signing
// payload names manifest sha256:X, and whose "optional" section carries the
// required annotations.
//
// What is checked offline: pubKey (ECDSA, RSA PKCS#1 v1.5, Ed25519; SHA-256)
// and certificate, a Warden extension (the key of a given X.509 code-signing
// certificate, valid now, optionally chained to a given chain). Keyless
// requirements (genericIssuer, githubAction) and requireRekorBundle need a
// Sigstore trust root (LoadTrustConfig reads a ClientTrustConfig; give it
// with WithTrustRoot), never fetched: without one they are never met, and
// the error says so. With one, sigstore-go checks each keyless signature,
// both cosign's signature layers with a certificate (turned into a v0.1
// bundle) and the Sigstore v0.3 bundles attached to the manifest as OCI
// referrers (cosign v3): its certificate chains to a Fulcio authority of
// the trust root at the time a Rekor log of the trust root recorded it, and
// that log's entry verifies and records it; then the certificate's OIDC
// issuer and subject are matched as Kubewarden matches them
// (docs/compatibility.md#keyless-signatures).
//
// A Verifier is a policyfetch.Verifier: given to policyfetch.Options, it
// runs between reading a module's manifest and reading its layer, so an
// unverified module is never stored nor loaded. Verify does the same for one
// URI without pulling it (wardenctl verify). Sign writes signatures that
// cosign verify --key accepts.
//
// This package reaches registries only through policyfetch. It must not
// import wazero, internal/wasm or internal/engine.
package verify
