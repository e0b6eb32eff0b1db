// Package capabilities is the tree of host capabilities a policy can be granted
// (docs/compatibility.md#host-capabilities), and the allow-list patterns that
// grant them. The policy server checks every host call against a policy's
// patterns; the controller refuses a PolicyServer whose patterns name no
// capability. Both use this package, so they agree on what a pattern means.
//
// A capability is a path: "<namespace>/<operation>", where the operation may
// carry a version, as in "oci/v1/verify" or "kubernetes/can_i". A pattern is
// "*", an exact path, or a path prefix ending in "/*" ("oci/*", "oci/v1/*").
// The tracing namespace is always allowed and is not in the tree.
package capabilities

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// tree holds the known capabilities: inner nodes map a segment to their
// children, leaves are nil.
var tree = node{
	"oci": {
		"v1": {"verify": nil, "manifest_digest": nil, "oci_manifest": nil, "oci_manifest_config": nil},
		"v2": {"verify": nil},
	},
	"net":    {"v1": {"dns_lookup_host": nil}},
	"crypto": {"v1": {"is_certificate_trusted": nil}},
	"kubernetes": {
		"list_resources_by_namespace": nil, "list_resources_all": nil, "get_resource": nil, "can_i": nil,
	},
}

type node map[string]node

// Lookup reports whether namespace is a known capability namespace, and
// whether operation (such as "v1/verify") is one of its operations.
func Lookup(namespace, operation string) (namespaceKnown, operationKnown bool) {
	n, ok := tree[namespace]
	if !ok {
		return false, false
	}
	for _, seg := range strings.Split(operation, "/") {
		child, ok := n[seg]
		if !ok {
			return true, false
		}
		n = child
	}
	return true, n == nil
}

// Check returns nil when pattern is a valid allow-list pattern, or an error
// saying what is wrong with it and what would be valid at that point.
func Check(pattern string) error {
	if pattern == "" {
		return errors.New("capability must not be empty")
	}
	if pattern == "*" {
		return nil
	}
	parts := strings.Split(pattern, "/")
	n := tree
	for i, part := range parts {
		if strings.Contains(part, "*") {
			if part != "*" || i != len(parts)-1 {
				return errors.New(`wildcard "*" is only allowed as the last path segment (e.g. "oci/*" or "oci/v1/*")`)
			}
			return nil
		}
		child, ok := n[part]
		if !ok {
			return fmt.Errorf("unknown segment %q, valid options at this level are: %s",
				part, strings.Join(slices.Sorted(maps.Keys(n)), ", "))
		}
		if child == nil {
			if i != len(parts)-1 {
				return fmt.Errorf("%q is a complete capability path and cannot have further segments",
					strings.Join(parts[:i+1], "/"))
			}
			return nil
		}
		n = child
	}
	return fmt.Errorf("%q is not a complete capability path; use %q to allow all capabilities under it",
		pattern, pattern+"/*")
}

// Validate checks every pattern, and names each invalid one in the error.
func Validate(patterns []string) error {
	var errs []error
	for _, p := range patterns {
		if err := Check(p); err != nil {
			errs = append(errs, fmt.Errorf("invalid host capability %q: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// Matches reports whether pattern grants the capability at path.
func Matches(pattern, path string) bool {
	if pattern == "*" || pattern == path {
		return true
	}
	prefix, ok := strings.CutSuffix(pattern, "*")
	return ok && strings.HasSuffix(prefix, "/") && strings.HasPrefix(path, prefix)
}
