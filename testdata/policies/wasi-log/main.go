//go:build wasip1

// Command wasi-log is a WASI-mode policy that logs every evaluation through
// the host.call tracing/log callback, at level info, with the message
// "wasi-log evaluated <kind>/<name>", then accepts the request unless the
// object has the label reject: "true", which it rejects with the message
// "rejected by wasi-log". <kind> is request.kind.kind (else
// request.object.kind), <name> is request.object.metadata.name (else
// request.name).
//
// Settings: none (any JSON object is valid).
package main

import (
	"errors"

	"github.com/tidwall/gjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wasi"
)

func main() {
	wasi.Run(validate, func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil })
}

func validate(payload []byte) ([]byte, error) {
	if !gjson.ValidBytes(payload) {
		return nil, errors.New("the validation request is not valid JSON")
	}
	f := gjson.GetManyBytes(payload,
		"request.kind.kind", "request.object.kind",
		"request.object.metadata.name", "request.name",
		"request.object.metadata.labels.reject")
	kind, name := first(f[0], f[1]), first(f[2], f[3])
	wasi.Log("info", "wasi-log evaluated "+kind+"/"+name)
	if f[4].Type == gjson.String && f[4].Str == "true" {
		return protocol.Reject("rejected by wasi-log"), nil
	}
	return protocol.Accept(), nil
}

// first returns the first of the results that is a non-empty string.
func first(rs ...gjson.Result) string {
	for _, r := range rs {
		if r.Type == gjson.String && r.Str != "" {
			return r.Str
		}
	}
	return ""
}
