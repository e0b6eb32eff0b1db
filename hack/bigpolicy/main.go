//go:build wasip1

// Command bigpolicy is a waPC policy the size of a real Go policy that links
// the Kubernetes API types and CEL, as Kubewarden's cel-policy does (some
// 27 MB of wasm): it denies pods whose containers are privileged, and
// objects for which the CEL expression of its settings is false. It exists
// to measure what compiling a module of that size costs a policy server
// (docs/benchmarks.md); no test builds it.
//
// Settings: {"expression": "<CEL over object>"} (absent: only the
// privileged check).
package main

import (
	"encoding/json"
	"fmt"

	"github.com/google/cel-go/cel"
	corev1 "k8s.io/api/core/v1"

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

type settings struct {
	Expression string `json:"expression"`
}

type request struct {
	Request struct {
		Object json.RawMessage `json:"object"`
	} `json:"request"`
	Settings settings `json:"settings"`
}

func program(expression string) (cel.Program, error) {
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expression)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	return env.Program(ast)
}

func validateSettings(payload []byte) ([]byte, error) {
	var s settings
	if err := json.Unmarshal(payload, &s); err != nil {
		return protocol.SettingsInvalid(err.Error()), nil
	}
	if s.Expression != "" {
		if _, err := program(s.Expression); err != nil {
			return protocol.SettingsInvalid(err.Error()), nil
		}
	}
	return protocol.SettingsValid(), nil
}

func validate(payload []byte) ([]byte, error) {
	var req request
	if err := json.Unmarshal(payload, &req); err != nil {
		return protocol.Reject(err.Error()), nil
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Request.Object, &pod); err == nil {
		for _, c := range pod.Spec.Containers {
			if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
				return protocol.Reject("Privileged container is not allowed"), nil
			}
		}
	}
	if req.Settings.Expression == "" {
		return protocol.Accept(), nil
	}
	prg, err := program(req.Settings.Expression)
	if err != nil {
		return protocol.Reject(err.Error()), nil
	}
	var object map[string]any
	_ = json.Unmarshal(req.Request.Object, &object)
	out, _, err := prg.Eval(map[string]any{"object": object})
	if err != nil {
		return protocol.Reject(err.Error()), nil
	}
	if allowed, ok := out.Value().(bool); !ok || !allowed {
		return protocol.Reject(fmt.Sprintf("%s is not true", req.Settings.Expression)), nil
	}
	return protocol.Accept(), nil
}
