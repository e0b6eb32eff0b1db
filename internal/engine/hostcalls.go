package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/wardenhq/warden/internal/capabilities"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/observability"
)

const (
	tracingNamespace    = "tracing"
	kubernetesNamespace = "kubernetes"
)

// HostCapabilities answers the host calls that reach beyond a policy: the oci,
// net, crypto and kubernetes namespaces
// (docs/compatibility.md#host-capabilities). The engine calls it only for calls
// the policy was granted (its hostCapabilities and, for the kubernetes reads,
// its contextAwareResources); its answer, or its error text, goes to the guest
// as it is. internal/hostcap implements it. Implementations must be safe for
// concurrent use.
type HostCapabilities interface {
	HostCall(ctx context.Context, namespace, operation string, payload []byte) ([]byte, error)
}

// hostCalls answers the host calls of one policy. It is safe for concurrent
// use.
type hostCalls struct {
	policyID  string
	allowed   []string               // host capability patterns
	resources []ContextAwareResource // Kubernetes kinds the policy may read
	caps      HostCapabilities       // nil: none
	logger    *slog.Logger
	logs      logLimiter // the rate of its tracing/log lines
}

// hostCalls returns the host calls of a policy: what it was granted, and
// the engine's provider.
func (l *loader) hostCalls(id string, c *PolicyConfig, meta *metadata.Metadata) *hostCalls {
	return &hostCalls{policyID: id, allowed: c.HostCapabilities, resources: grantedResources(c, meta),
		caps: l.opts.HostCapabilities, logger: l.opts.Logger}
}

// grantedResources returns the Kubernetes kinds a policy may read: its
// contextAwareResources, or its metadata's when it trusts them.
func grantedResources(c *PolicyConfig, meta *metadata.Metadata) []ContextAwareResource {
	if !c.ContextAwareFromMetadata {
		return c.ContextAwareResources
	}
	var resources []ContextAwareResource
	if meta != nil {
		for _, r := range meta.ContextAwareResources {
			resources = append(resources, ContextAwareResource{APIVersion: r.APIVersion, Kind: r.Kind})
		}
	}
	return resources
}

// HostCall implements wasm.HostCaller.
func (h *hostCalls) HostCall(ctx context.Context, _, namespace, operation string, payload []byte) ([]byte, error) {
	if namespace == tracingNamespace {
		if operation != "log" {
			return nil, fmt.Errorf("unknown operation: %s", operation)
		}
		h.guestLog(ctx, payload)
		return nil, nil
	}
	switch nsKnown, opKnown := capabilities.Lookup(namespace, operation); {
	case !nsKnown:
		return nil, fmt.Errorf("unknown namespace: %s", namespace)
	case !opKnown:
		return nil, fmt.Errorf("unknown operation: %s", operation)
	}
	path := namespace + "/" + operation
	if !h.granted(path) {
		h.logger.WarnContext(ctx, "policy used a host capability it was not granted",
			observability.KeyPolicyID, h.policyID, "capability", path)
		//lint:ignore ST1005 Kubewarden's wording, which users and policies see
		return nil, fmt.Errorf("Policy has not been granted access to the '%s' host capability. The violation has been reported.", path)
	}
	if namespace == kubernetesNamespace && operation != "can_i" {
		if err := h.checkResource(ctx, operation, payload); err != nil {
			return nil, err
		}
	}
	if h.caps == nil {
		return nil, fmt.Errorf("the '%s' host capability is not available: this evaluation has no host capabilities provider", path)
	}
	return h.caps.HostCall(ctx, namespace, operation, payload)
}

// checkResource checks that a Kubernetes read names a kind of the policy's
// contextAwareResources (can_i is not gated by kind).
func (h *hostCalls) checkResource(ctx context.Context, operation string, payload []byte) error {
	var r struct {
		APIVersion string `json:"api_version"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(payload, &r); err != nil {
		return fmt.Errorf("decoding the kubernetes/%s request: %w", operation, err)
	}
	for _, a := range h.resources {
		if a.APIVersion == r.APIVersion && a.Kind == r.Kind {
			return nil
		}
	}
	h.logger.WarnContext(ctx, "policy read a Kubernetes resource it was not granted",
		observability.KeyPolicyID, h.policyID, "resource", r.APIVersion+"/"+r.Kind)
	//lint:ignore ST1005 Kubewarden's wording, which users and policies see
	return fmt.Errorf("Policy has not been granted access to Kubernetes %s/%s resources. The violation has been reported.", r.APIVersion, r.Kind)
}

func (h *hostCalls) granted(path string) bool {
	for _, p := range h.allowed {
		if capabilities.Matches(p, path) {
			return true
		}
	}
	return false
}

// guestLog logs a tracing/log payload: {"level": ..., "message": ..., extra
// fields...}. Malformed payloads are logged as they are; the call never fails.
// The lines are bounded in size and rate (maxLogBytes, logRate).
func (h *hostCalls) guestLog(ctx context.Context, payload []byte) {
	ok, dropped := h.logs.take()
	if dropped > 0 {
		h.logger.WarnContext(ctx, "policy log lines dropped: over the rate limit",
			observability.KeyPolicyID, h.policyID, "dropped", dropped, "lines_per_second", logRate)
	}
	if !ok {
		return
	}
	if len(payload) > maxLogBytes {
		h.logger.InfoContext(ctx, "policy log", observability.KeyPolicyID, h.policyID,
			"payload", string(payload[:maxLogBytes]), "truncated_bytes", len(payload)-maxLogBytes)
		return
	}
	var fields map[string]any
	if err := json.Unmarshal(payload, &fields); err != nil {
		h.logger.InfoContext(ctx, "policy log", observability.KeyPolicyID, h.policyID, "payload", string(payload))
		return
	}
	level := slog.LevelInfo
	switch fields["level"] {
	case "trace", "debug":
		level = slog.LevelDebug
	case "warning", "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	msg, _ := fields["message"].(string)
	attrs := []any{observability.KeyPolicyID, h.policyID, "message", msg}
	for _, k := range sortedKeys(fields) {
		if k != "level" && k != "message" {
			attrs = append(attrs, k, fields[k])
		}
	}
	h.logger.Log(ctx, level, "policy log", attrs...)
}

// Bounds of the tracing/log capability, per policy
// (docs/compatibility.md#host-capabilities): a payload over maxLogBytes is
// logged cut to that size, unparsed; past logBurst lines at once, a policy
// logs logRate lines a second, and the lines over that are dropped and
// counted in a warning, at most one a second. The call never fails, as in
// Kubewarden. The log lines of a policy's failed evaluations have a rate of
// their own with the same bounds (Engine.logFailure).
const (
	maxLogBytes = 16 << 10
	logRate     = 100
	logBurst    = 200
)

// logLimiter is a token bucket of log lines. Its zero value is ready (full);
// it is safe for concurrent use.
type logLimiter struct {
	now func() time.Time // nil: time.Now

	mu         sync.Mutex
	started    bool
	tokens     float64
	last       time.Time // tokens were last counted
	dropped    int       // since the last report
	lastReport time.Time
}

// take reports whether a line may be logged now, and the number of lines
// dropped to report now (0: none).
func (l *logLimiter) take() (ok bool, report int) {
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.started {
		l.started, l.tokens, l.last, l.lastReport = true, logBurst, now, now
	}
	l.tokens = min(l.tokens+now.Sub(l.last).Seconds()*logRate, logBurst)
	l.last = now
	ok = l.tokens >= 1
	if ok {
		l.tokens--
	} else {
		l.dropped++
	}
	if l.dropped > 0 && (ok || now.Sub(l.lastReport) >= time.Second) {
		report, l.dropped, l.lastReport = l.dropped, 0, now
	}
	return ok, report
}
