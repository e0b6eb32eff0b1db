// Package wardenctl implements the wardenctl command: Warden's offline CLI for
// policy authors, compatible with Kubewarden's kwctl
// (docs/compatibility.md#wardenctl-and-kwctl). Its commands and flags carry
// kwctl's names:
//
//   - run and bench evaluate a request with a policy through internal/engine,
//     exactly as the policy server does (protect mode, mutation allowed);
//   - pull, push, digest, policies and rm work on OCI registries and on the
//     local store, laid out as Kubewarden lays it out (internal/policyfetch);
//     save and load move policies of the store to and from a tar.gz;
//   - verify checks a policy's cosign signatures against kwctl's
//     verification flags (internal/verify), which pull, run and bench take
//     too; sign signs a pushed policy with a cosign key (a Warden extension);
//   - inspect, annotate and scaffold read and write policy metadata, and
//     scaffold vap turns a ValidatingAdmissionPolicy into a
//     ClusterAdmissionPolicy;
//   - info and docs describe wardenctl itself;
//   - test runs a declarative suite of cases against a policy, and scan
//     evaluates the objects of manifest files as CREATE requests (Warden
//     extensions).
//
// Main is the whole program: cmd/wardenctl only calls it. Everything a command
// needs from the process (arguments, standard streams, environment) is handed
// to Main, so commands run in tests exactly as they run from a shell. There
// are no package-level flag variables: each command has an Options struct with
// AddFlags and Validate.
//
// This package may import the engine, the fetcher, the metadata and wasm
// packages; nothing imports it but cmd/wardenctl.
package wardenctl
