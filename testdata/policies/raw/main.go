//go:build wasip1

// Command raw is a waPC policy of type raw: its request is arbitrary JSON such
// as {"user":"alice","action":"eat","resource":"banana"}. It rejects a request
// whose resource is listed in the forbidden_resources setting with the message
// "resource <resource> is forbidden", and accepts the rest.
//
// Settings: {"forbidden_resources": ["banana"]} (absent: nothing is
// forbidden); validate_settings rejects a value that is not a list of strings
// with the message "forbidden_resources must be a list of strings".
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
		"validate_settings": validateSettings,
	})
}

func validateSettings(settings []byte) ([]byte, error) {
	if !gjson.ValidBytes(settings) {
		return protocol.SettingsInvalid("settings are not valid JSON"), nil
	}
	if v := gjson.GetBytes(settings, "forbidden_resources"); v.Exists() && !isStringList(v) {
		return protocol.SettingsInvalid("forbidden_resources must be a list of strings"), nil
	}
	return protocol.SettingsValid(), nil
}

func validate(payload []byte) ([]byte, error) {
	if !gjson.ValidBytes(payload) {
		return nil, errors.New("the validation request is not valid JSON")
	}
	f := gjson.GetManyBytes(payload, "request.resource", "settings.forbidden_resources")
	resource, forbidden := f[0], f[1]
	if resource.Type != gjson.String || !forbidden.IsArray() {
		return protocol.Accept(), nil
	}
	rejected := false
	forbidden.ForEach(func(_, r gjson.Result) bool {
		rejected = r.Type == gjson.String && r.Str == resource.Str
		return !rejected
	})
	if rejected {
		return protocol.Reject("resource " + resource.Str + " is forbidden"), nil
	}
	return protocol.Accept(), nil
}

func isStringList(v gjson.Result) bool {
	if !v.IsArray() {
		return false
	}
	ok := true
	v.ForEach(func(_, e gjson.Result) bool {
		ok = e.Type == gjson.String
		return ok
	})
	return ok
}
