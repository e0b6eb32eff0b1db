// Package kubepolicy evaluates Kubernetes' own admission policies, one
// ValidatingAdmissionPolicy or one MutatingAdmissionPolicy
// (admissionregistration.k8s.io/v1) with its bindings and param objects, as
// kube-apiserver evaluates them: it runs the API server's admission plugins
// from k8s.io/apiserver (pkg/admission/plugin/policy/validating and
// .../mutating) on an in-memory store that holds exactly the user's policy,
// bindings, params and namespaces, and turns the plugin's verdict into the
// AdmissionResponse the API server's answer amounts to.
//
// Load checks the policy as the API server checks it when it is created
// (docs/kubernetes-policies.md lists what is checked), so a policy the API
// server would refuse is refused with the API server's message; Review
// evaluates one AdmissionRequest. The engine serves a Policy as the
// builtin://vap and builtin://map modules.
//
// The engine adapts it to its runners (internal/engine/vap.go).
package kubepolicy
