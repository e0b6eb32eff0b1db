package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/wardenhq/warden/internal/observability"
)

// The host capabilities policies can be granted (compat 1.4), by namespace.
// tracing is always allowed and never checked.
var capabilityTree = map[string][]string{
	"oci":        {"v1/verify", "v1/manifest_digest", "v1/oci_manifest", "v1/oci_manifest_config", "v2/verify"},
	"net":        {"v1/dns_lookup_host"},
	"crypto":     {"v1/is_certificate_trusted"},
	"kubernetes": {"list_resources_by_namespace", "list_resources_all", "get_resource", "can_i"},
}

const tracingNamespace = "tracing"

// validateCapabilities checks allow-list patterns: "*", "ns/*", "ns/vN/*" or
// an exact path of the tree.
func validateCapabilities(patterns []string) error {
	for _, p := range patterns {
		if !validCapability(p) {
			return fmt.Errorf("invalid host capability %q: use \"*\", \"<namespace>/*\", \"<namespace>/<version>/*\" or a full path such as \"oci/v1/verify\" (namespaces: crypto, kubernetes, net, oci)", p)
		}
	}
	return nil
}

func validCapability(p string) bool {
	if p == "*" {
		return true
	}
	prefix, wildcard := strings.CutSuffix(p, "/*")
	for ns, ops := range capabilityTree {
		for _, op := range ops {
			path := ns + "/" + op
			if p == path || (wildcard && strings.HasPrefix(path, prefix+"/")) {
				return true
			}
		}
	}
	return false
}

// capabilityMatches reports whether pattern grants path.
func capabilityMatches(pattern, path string) bool {
	if pattern == "*" || pattern == path {
		return true
	}
	prefix, ok := strings.CutSuffix(pattern, "*")
	return ok && strings.HasSuffix(prefix, "/") && strings.HasPrefix(path, prefix)
}

// hostCalls answers the host calls of one policy. It is safe for concurrent
// use.
type hostCalls struct {
	policyID string
	allowed  []string
	logger   *slog.Logger
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
	ops, ok := capabilityTree[namespace]
	if !ok {
		return nil, fmt.Errorf("unknown namespace: %s", namespace)
	}
	known := false
	for _, op := range ops {
		known = known || op == operation
	}
	if !known {
		return nil, fmt.Errorf("unknown operation: %s", operation)
	}
	path := namespace + "/" + operation
	if !h.granted(path) {
		h.logger.WarnContext(ctx, "policy used a host capability it was not granted",
			observability.KeyPolicyID, h.policyID, "capability", path)
		return nil, fmt.Errorf("Policy has not been granted access to the '%s' host capability. The violation has been reported.", path)
	}
	return nil, fmt.Errorf("the '%s' host capability is not available in this version of Warden", path)
}

func (h *hostCalls) granted(path string) bool {
	for _, p := range h.allowed {
		if capabilityMatches(p, path) {
			return true
		}
	}
	return false
}

// guestLog logs a tracing/log payload: {"level": ..., "message": ..., extra
// fields...}. Malformed payloads are logged as they are; the call never fails.
func (h *hostCalls) guestLog(ctx context.Context, payload []byte) {
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
