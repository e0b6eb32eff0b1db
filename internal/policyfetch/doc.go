// Package policyfetch fetches policy modules (WebAssembly) for the policy
// server and the CLI, the way Kubewarden's policy-fetcher does
// (docs/compatibility.md#fetching-policies):
//
//   - registry://host[:port]/repo:tag, registry://host/repo@sha256:..., and a
//     bare host/repo:tag, which means registry://: OCI artifacts with a single
//     application/vnd.wasm.content.layer.v1+wasm layer, pulled with oras-go;
//   - https://, and http:// only for hosts listed in insecure_sources;
//   - file://, read in place and never copied.
//
// Remote modules land in a local store laid out as Kubewarden lays it out,
// <store>/<scheme>/<host[:port]>/<path dirs>/<file or name:tag>, so that a
// store filled by one can be read by the other. A registry reference whose
// tag is latest (written or implied) is pulled every time; any other remote
// module is reused when the store has it. A module reaches the store only
// once it is complete and verified (size, layer digest, Wasm magic): it is
// written to a temporary file in the same directory and renamed.
//
// sources.yml (insecure sources, per-host certificate authorities, proxies),
// Docker's config.json (auths, credential helpers) and the proxy environment
// variables are honoured for every request.
//
// Signature verification is not done here: a Verifier in Options (see
// internal/verify) is asked about every registry module between reading its
// manifest and reading its layer, and other schemes are then refused.
// FetchManifest, FetchBlob, PushBlob and PushManifest give such a verifier,
// and signing, access to the registry under the same sources and
// credentials.
//
// This package must not import wazero, internal/wasm or internal/engine: it
// moves bytes and knows nothing about what they do.
package policyfetch
