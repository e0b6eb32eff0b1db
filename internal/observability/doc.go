// Package observability defines what the policy server tells the outside world
// about itself: the log keys used across Warden, the slog logger built from
// Kubewarden's --log-level and --log-fmt values, and the policy evaluation
// metrics (Kubewarden's names and attributes, docs/compatibility.md#metrics),
// exported on a Prometheus /metrics endpoint and, optionally, pushed over
// OTLP/gRPC, and the trace spans of admission requests
// (docs/compatibility.md#tracing), exported over OTLP/gRPC with --log-fmt otlp.
// Its otlptest subpackage is a collector for tests.
//
// It is a leaf package: it must not import any other Warden package, nor
// Kubernetes or wazero packages, so that every other package can import it.
package observability
