//go:build wasip1

// Command host-call is a WASI-mode policy that makes the host calls its
// settings list, in order, and reports what the host answered:
//
//	{"calls": [{"namespace": "kubernetes", "operation": "get_resource",
//	            "payload": {"api_version": "v1", "kind": "Namespace", ...}}]}
//
// Each payload is sent as its JSON text (a JSON string for the oci and net
// operations that take one). validate answers with one line per call,
// "<namespace>/<operation>: <response>" or "<namespace>/<operation> failed:
// <error>", joined by newlines, as its message; it accepts when every call
// succeeded and rejects otherwise.
//
// validate-settings refuses calls that are not a list of objects with a
// string namespace and operation: "calls must be a list of {namespace,
// operation, payload}".
package main

import (
	"errors"
	"strings"

	"github.com/tidwall/gjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wasi"
)

const badCalls = "calls must be a list of {namespace, operation, payload}"

func main() {
	wasi.Run(validate, validateSettings)
}

func validateSettings(settings []byte) ([]byte, error) {
	if _, ok := calls(gjson.ParseBytes(settings)); !ok {
		return protocol.SettingsInvalid(badCalls), nil
	}
	return protocol.SettingsValid(), nil
}

func validate(payload []byte) ([]byte, error) {
	if !gjson.ValidBytes(payload) {
		return nil, errors.New("the validation request is not valid JSON")
	}
	list, ok := calls(gjson.GetBytes(payload, "settings"))
	if !ok {
		return protocol.Reject(badCalls), nil
	}
	var lines []string
	accepted := true
	for _, c := range list {
		what := c.Get("namespace").Str + "/" + c.Get("operation").Str
		out, err := wasi.HostCall("kubewarden", c.Get("namespace").Str, c.Get("operation").Str, []byte(c.Get("payload").Raw))
		if err != nil {
			accepted = false
			lines = append(lines, what+" failed: "+err.Error())
			continue
		}
		lines = append(lines, what+": "+string(out))
	}
	return protocol.ValidationResponse{Accepted: accepted, Message: strings.Join(lines, "\n")}.Marshal(), nil
}

// calls returns the calls of the settings, or false when they are not a
// list of objects with a string namespace and operation. No calls is an
// empty list.
func calls(settings gjson.Result) ([]gjson.Result, bool) {
	v := settings.Get("calls")
	if !v.Exists() {
		return nil, true
	}
	if !v.IsArray() {
		return nil, false
	}
	list := v.Array()
	for _, c := range list {
		if !c.IsObject() || c.Get("namespace").Type != gjson.String || c.Get("operation").Type != gjson.String {
			return nil, false
		}
	}
	return list, true
}
