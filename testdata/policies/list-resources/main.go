//go:build wasip1

// Command list-resources is a waPC policy that lists Kubernetes resources
// through the kubernetes host capabilities on every validation, for the
// scale benchmark (hack/scalebench). Settings:
//
//	call:        all | namespace   list_resources_all or list_resources_by_namespace
//	api_version: v1                the apiVersion of the kind to list
//	kind:        Pod               the kind to list
//	namespace:   team-a            the namespace to list (call: namespace only)
//	scan:        true              walk the answer and count its items
//	min_items:   3000              with scan: reject when the answer has fewer items
//
// validate makes the host call and accepts. With scan it walks every item of
// the answer in one pass, as a policy looking for something in the list
// would, and rejects with "listed N items, want at
// least M" when there are fewer than min_items; without scan it does not look
// at the answer, so the cost measured is the host's alone. A failed host call
// is a rejection: "listing failed: <error>".
//
// validate_settings refuses a call other than all or namespace, a missing
// api_version or kind, and a call: namespace without a namespace.
package main

import (
	"strconv"

	"warden.test/policies/guest/jsonscan"
	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
)

// main never runs: the policy is a c-shared reactor (see package wapc).
func main() {}

func init() {
	wapc.Register(map[string]wapc.Handler{
		"validate":          validate,
		"validate_settings": validateSettings,
	})
}

func validateSettings(doc []byte) ([]byte, error) {
	if _, msg := parseSettings(doc); msg != "" {
		return protocol.SettingsInvalid(msg), nil
	}
	return protocol.SettingsValid(), nil
}

func validate(payload []byte) ([]byte, error) {
	s, msg := parseSettings(jsonscan.Get(payload, "settings"))
	if msg != "" {
		return protocol.Reject(msg), nil
	}
	list, err := wapc.HostCall("kubewarden", "kubernetes", s.operation, s.request)
	if err != nil {
		return protocol.Reject("listing failed: " + err.Error()), nil
	}
	if !s.scan {
		return protocol.Accept(), nil
	}
	n, ok := countItems(list)
	if !ok {
		return protocol.Reject("the list answer is not a list of objects"), nil
	}
	if int64(n) < s.minItems {
		return protocol.Reject("listed " + strconv.Itoa(n) + " items, want at least " + strconv.FormatInt(s.minItems, 10)), nil
	}
	return protocol.Accept(), nil
}
