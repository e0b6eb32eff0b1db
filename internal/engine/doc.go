// Package engine gives policies their meaning: it loads each policy of a
// policies.yml (a module, its settings, its mode) into a runner for its
// execution mode, evaluates admission requests with it, and turns the
// policy's answer into an AdmissionResponse, with Kubewarden's semantics
// for modes, mutations, groups, timeouts and errors. The policy server and
// wardenctl evaluate through it, and a policy server's leader initialises
// PolicyRevisions with it, so all of them answer alike.
//
// # Main types
//
//   - PolicyConfig (config.go) is one entry of a policies.yml; ParsePolicies
//     reads a whole file and checks its shape, the settings included (a
//     mapping or nothing).
//   - Environment (environment.go) is the set of policies a server serves,
//     changed one policy at a time while requests run (RFC 000's hot
//     reload): Init loads the first set, Apply builds what changed before it
//     replaces what served, Validate and ValidateRaw evaluate on the
//     snapshot current when the request starts.
//   - Engine (engine.go) is one such snapshot, immutable; Load returns one
//     for a fixed set of policies (wardenctl run and bench).
//   - runner (runner.go) is a loaded module in its execution mode:
//     wapcRunner and wasiRunner (runner.go), opaRunner and gatekeeperRunner
//     (opa.go), celRunner (cel.go, natively, without wasm).
//   - HostCapabilities (hostcalls.go) and KubernetesReader (regocontext.go)
//     are what the engine needs from the world beyond a policy; hostcap.Host
//     implements both.
//
// # Loading a policy
//
// Environment.build runs a loader (load.go): loader.compileAll fetches every
// module (Options.Fetch), reads its metadata (metadata.FromModule,
// Metadata.ValidateForServer) and compiles it once per digest
// (wasm.Runtime.Compile or CompileOPA); loader.policy then builds the
// runner (loader.runner, loader.regoRunner) and, as the last step, has the
// policy validate its own settings (runner.validateSettings): a refusal is
// an invalidSettingsError, "Policy settings are invalid: ...", at
// StageSettings (see FailedStage). loader.group builds a group and each
// member the same way. A policy that fails never serves: Init fails, or
// with Options.ContinueOnErrors the policy answers every request with its
// error; Apply keeps the previous version serving.
//
// # The request path
//
// Environment.Validate takes the current snapshot and calls Engine.Validate,
// which finds the policy by id (a policy, group/member, or in cluster mode
// <unique name>/<generation> and its alias), accepts at once in the
// always-accept namespace, and calls Engine.run. Engine.run answers with the
// load error of a policy that failed, or calls Engine.evaluate: it waits for
// one of the policy's turns (callQueue) under the policy's time limit, calls
// runner.validate, and converts the answer with toAdmissionResponse
// (response.go; a mutated object becomes a JSONPatch). A group is evaluated
// by Engine.evaluateGroup (group.go), which calls Engine.evaluate for each
// member its expression reaches. Engine.postProcess (postprocess.go) then applies monitor
// mode, the allowedToMutate gate and the custom message, for validate and
// raw requests, never for audit ones; the Recorder (metrics and spans)
// records the policy's own answer, before post-processing.
//
// A guest's host calls reach hostCalls.HostCall (hostcalls.go), which
// answers tracing/log itself, checks the call against the policy's
// hostCapabilities and, for kubernetes reads, its contextAwareResources,
// and hands the calls that pass to Options.HostCapabilities.
//
// Environment and Engine are safe for concurrent use; changes to an
// Environment are serialised.
//
// It must not import the packages that serve or configure it
// (internal/policyserver, internal/policyconfig, internal/wardenctl,
// internal/controller), nor internal/hostcap or internal/reflector, which it
// reaches through the HostCapabilities and KubernetesReader interfaces it
// defines, nor wazero or the Kubernetes client libraries.
package engine
