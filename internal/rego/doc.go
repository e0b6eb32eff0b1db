// Package rego runs, in Go, the Rego builtins that a policy compiled to
// WebAssembly by OPA leaves to its host: OPA's wasm runtime implements the
// common builtins itself and lists the others in its `builtins` export.
// Every one of them is delegated to OPA's own implementation
// (github.com/open-policy-agent/opa/v1/topdown), so it behaves exactly as
// in `opa eval` and Gatekeeper, except for the few refused at load (see
// NewBuiltins).
//
// Values cross the wasm boundary in OPA's text form: JSON plus sets, what
// the module's opa_value_dump writes and opa_value_parse reads.
//
// It does not know about wasm: it must not import wazero or
// internal/wasm. Its subpackage regotest compiles Rego for tests.
package rego
