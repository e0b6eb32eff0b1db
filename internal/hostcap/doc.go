// Package hostcap answers the host capabilities that reach beyond a policy
// (docs/compatibility.md#host-capabilities): oci (manifest digests, manifests,
// image configs, cosign signature verification), net (DNS lookups), crypto
// (certificate trust) and kubernetes (get, list, can_i), and records and
// replays those interactions in kwctl's session files.
//
// The engine decides whether a policy may make a call (the host-capability
// allow-list and the contextAwareResources gate); this package only answers
// calls that passed. A Host decodes a guest payload into a Request (the
// variants of kwctl's CallbackRequestType), hands it to a Handler and returns
// the JSON the guest reads. Handlers:
//
//   - Direct answers from the real world: registries through
//     internal/policyfetch (sources.yml, Docker credentials), signatures
//     through internal/verify (key and certificate based, offline), the
//     system resolver, and a Kubernetes API server (Kubernetes).
//   - Recorder forwards to another Handler and keeps every exchange; its
//     Session is written as kwctl writes --record-host-capabilities-interactions.
//   - Replayer answers from a Session, without any network, as kwctl's
//     --replay-host-capabilities-interactions does.
//
// Caching follows Kubewarden: OCI and signature answers are kept 60 s,
// get_resource and can_i answers 5 s unless the request disables the cache;
// only successes are kept. Lists are answered from reflectors
// (internal/reflector) when the Kubernetes was given a store.
//
// This package must not import wazero, internal/wasm or internal/engine: the
// engine depends on it through a small interface of its own.
package hostcap
