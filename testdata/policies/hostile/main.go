//go:build wasip1

// Command hostile is a waPC policy that does, on every validate, what its
// settings ask of the host, to test the host's bounds:
//
//	{"log_bytes": N}       one tracing/log call whose message is N bytes
//	{"log_lines": N}       N tracing/log calls of a short message
//	{"host_call": {"namespace": ns, "operation": op, "payload": any}}
//	                       one host call with that payload (its JSON text)
//	{"response_bytes": N}  an answer whose message is N bytes of "x"
//
// It accepts, with one line per host call as its message ("<what>: ok" or
// "<what> failed: <error>"), unless response_bytes asks for another
// message. validate_settings accepts anything.
package main

import (
	"strconv"
	"strings"

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

func validate(payload []byte) ([]byte, error) {
	settings := gjson.GetBytes(payload, "settings")
	var lines []string
	report := func(what string, err error) {
		if err != nil {
			lines = append(lines, what+" failed: "+err.Error())
			return
		}
		lines = append(lines, what+": ok")
	}
	if n := settings.Get("log_bytes").Int(); n > 0 {
		_, err := wapc.HostCall("kubewarden", "tracing", "log", protocol.LogPayload("info", strings.Repeat("x", int(n))))
		report("log", err)
	}
	if n := settings.Get("log_lines").Int(); n > 0 {
		for i := range n {
			_, err := wapc.HostCall("kubewarden", "tracing", "log", protocol.LogPayload("info", "line "+strconv.FormatInt(i, 10)))
			if err != nil {
				report("log line "+strconv.FormatInt(i, 10), err)
				break
			}
		}
	}
	if c := settings.Get("host_call"); c.Exists() {
		ns, op := c.Get("namespace").Str, c.Get("operation").Str
		_, err := wapc.HostCall("kubewarden", ns, op, []byte(c.Get("payload").Raw))
		report(ns+"/"+op, err)
	}
	if n := settings.Get("response_bytes").Int(); n > 0 {
		return protocol.ValidationResponse{Accepted: true, Message: strings.Repeat("x", int(n))}.Marshal(), nil
	}
	return protocol.ValidationResponse{Accepted: true, Message: strings.Join(lines, "\n")}.Marshal(), nil
}
