// Package policyserver implements the policy-server command: Warden's
// admission webhook. It serves Kubewarden's routes over HTTPS, evaluates
// AdmissionReviews with an engine.Environment, and keeps that environment in
// step with its policies: a policies.yml (standalone mode) or the
// PolicyRevisions of a PolicyServer (cluster mode, RFC 000).
//
// # Main types
//
//   - Options (options.go) are the flags, each also read from Kubewarden's
//     environment variable (AddFlags, ApplyEnv, Validate).
//   - Main (main.go) is the whole program: cmd/policy-server only calls it.
//     It parses the options, builds the host capabilities
//     (newHostCapabilities: registries, DNS, certificates, and the
//     Kubernetes API with its reflectors), then calls New and Server.Serve.
//   - Server (server.go): New reads the policies, starts their reflectors,
//     creates the wasm runtime, the fetcher and the environment, loads every
//     policy (engine.Environment.Init, where one that fails fails the start;
//     in cluster mode revisions.start, where it is reported on its revision
//     and left out) and binds the listeners; Serve answers until its context
//     ends, then drains and closes.
//
// # The request path
//
// Server.Handler routes POST /validate/{id...} and /audit/{id...} to
// Server.handleReview, and POST /validate_raw/{id...} to Server.handleRaw
// (handlers.go). handleReview reads the body with Server.readJSON (media
// type, size limit, and the budget of bodies held in memory at once),
// decodes it once with admission.DecodeReview, opens the request's span,
// and calls engine.Environment.Validate (handleRaw: admission.DecodeRawReview
// and engine.Environment.ValidateRaw); neither reads the request's bytes
// again. It answers with admission.NewReview, or through
// Server.evaluationError with 404 for an unknown policy and 500 for an
// evaluation that failed. A policy's
// rejection is a normal 200 answer. /readiness, /policies and /metrics are
// served on the readiness port (Server.Serve).
//
// # Changing policies
//
// In standalone mode Server.watchPolicies and SIGHUP call Server.Reload
// (reload.go), which reads the file again and hands it to
// engine.Environment.Apply. In cluster mode revisions (revisions.go) watches
// the PolicyServer's PolicyRevisions, turns each enabled, Initialized one
// into an engine configuration with policyconfig.Config, applies them under
// <unique name>/<generation> with an alias for the newest, and reports a
// Ready condition per replica; the replica holding the Lease
// (revisions.elect, leader.go) first initialises each revision
// (revisions.initialize: pull, verify, compile, validate the settings in a
// scratch environment) and sets its Initialized condition.
//
// The handlers and Server.Reload are safe for concurrent use (reloads run
// one at a time); Serve is called once.
//
// It must not import wazero (guests run through internal/engine and
// internal/wasm), internal/controller or internal/wardenctl.
package policyserver
