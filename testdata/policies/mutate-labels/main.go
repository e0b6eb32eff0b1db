//go:build wasip1

// Command mutate-labels is a waPC mutating policy: it sets the label
// warden.io/mutated: "true" on request.object and returns the object as
// mutated_object. An object that already has that label with value "true",
// or a request without an object (DELETE), is accepted unchanged.
//
// Settings: {"mutate_without_object": true} makes it answer a mutated object
// even when the request has none, which hosts must refuse (a DELETE cannot be
// mutated). Any JSON object is valid.
package main

import (
	"errors"
	"fmt"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

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

// labelPath is the sjson/gjson path of the label (dots in the key escaped).
const labelPath = `metadata.labels.warden\.io/mutated`

func validate(payload []byte) ([]byte, error) {
	if !gjson.ValidBytes(payload) {
		return nil, errors.New("the validation request is not valid JSON")
	}
	object := gjson.GetBytes(payload, "request.object")
	if !object.IsObject() {
		if gjson.GetBytes(payload, "settings.mutate_without_object").Bool() {
			return protocol.Mutate([]byte(`{"metadata":{"labels":{"warden.io/mutated":"true"}}}`)), nil
		}
		return protocol.Accept(), nil
	}
	if v := object.Get(labelPath); v.Type == gjson.String && v.Str == "true" {
		return protocol.Accept(), nil
	}
	mutated, err := sjson.SetBytes([]byte(object.Raw), labelPath, "true")
	if err != nil {
		return nil, fmt.Errorf("setting the label: %w", err)
	}
	return protocol.Mutate(mutated), nil
}
