//go:build wasip1

// Command pod-privileged is a waPC validating policy: it rejects Pods that run
// a privileged container, that is a container, init container or ephemeral
// container whose securityContext.privileged is true, with the message
// "Privileged container is not allowed". Other objects are accepted.
//
// It reads only the fields it needs with gjson rather than decoding the Pod.
//
// Settings: none (any JSON object is valid).
package main

import (
	"errors"

	"github.com/tidwall/gjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
)

// main never runs: the policy is a c-shared reactor (see package wapc).
func main() {}

func init() {
	wapc.Register(map[string]wapc.Handler{
		"validate":          validate,
		"validate_settings": func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil },
	})
}

// privilegedPaths are the gjson paths of the privileged flags of every kind
// of container of a Pod.
var privilegedPaths = []string{
	"request.object.spec.containers.#.securityContext.privileged",
	"request.object.spec.initContainers.#.securityContext.privileged",
	"request.object.spec.ephemeralContainers.#.securityContext.privileged",
}

func validate(payload []byte) ([]byte, error) {
	if !gjson.ValidBytes(payload) {
		return nil, errors.New("the validation request is not valid JSON")
	}
	if gjson.GetBytes(payload, "request.object.kind").Str != "Pod" {
		return protocol.Accept(), nil
	}
	for _, flags := range gjson.GetManyBytes(payload, privilegedPaths...) {
		for _, privileged := range flags.Array() {
			if privileged.Type == gjson.True {
				return protocol.Reject("Privileged container is not allowed"), nil
			}
		}
	}
	return protocol.Accept(), nil
}
