// Package celpolicy runs Kubewarden's cel-policy natively, without
// WebAssembly: the same settings (ValidatingAdmissionPolicy-style variables
// and validations in CEL), the same verdicts on settings and the same
// answers to requests.
//
// Compile validates settings as cel-policy's validate-settings does, with its
// messages, and compiles every expression once, against cel-policy's
// environment: the variables object, oldObject, request, namespaceObject,
// params and variables.<name> (all dynamically typed, as in cel-policy), the
// Kubernetes CEL libraries and cel-go extensions ValidatingAdmissionPolicy
// offers, and VAP's cost limits. (*Policy).Validate evaluates one request: it
// decodes the request once, lazily, into values that mean what cel-policy's
// encoding/json maps mean (numbers are doubles; a null object or oldObject is
// an empty map), evaluates variables on first use, and answers with the first
// validation that is false.
//
// params read through paramRef come from a ParamSource handed to
// (*Policy).ValidateWith: the same kubernetes host capability calls
// cel-policy makes, so that the caller answers them as it answers a wasm
// policy's (the engine, through the policy's granted contextAwareResources),
// with the same rejections when they fail
// (docs/compatibility.md#cel-policy-params).
//
// The rest of what cel-policy reads from the cluster through host
// capabilities is not available yet, and fails loudly rather than answering
// differently: the kw.* libraries fail to compile, and namespaceObject of a
// namespaced object fails the evaluation that reads it. authorizer is not
// declared, as in cel-policy.
//
// The package must not import wazero or internal/wasm.
package celpolicy
