//go:build wasip1

// Command deny-latest-tag is a WASI policy, a plain Go command built with
// GOOS=wasip1 GOARCH=wasm: it rejects Pods with a container (of any kind:
// containers, initContainers, ephemeralContainers) whose image has no tag or
// the tag latest, with the message
// "container <name> uses image <image>: pin a tag other than latest".
// An image pinned by digest (name@sha256:...) is accepted with or without a
// tag. Other objects are accepted.
//
// Each evaluation is logged at level info through the kubewarden/tracing/log
// host call, so it shows in the policy server's log.
//
// Settings: none (any JSON object is valid).
package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wasi"
)

func main() {
	wasi.Run(validate, func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil })
}

// containerLists are the gjson paths of the container lists of a Pod.
var containerLists = []string{
	"request.object.spec.containers",
	"request.object.spec.initContainers",
	"request.object.spec.ephemeralContainers",
}

func validate(payload []byte) ([]byte, error) {
	if !gjson.ValidBytes(payload) {
		return nil, errors.New("the validation request is not valid JSON")
	}
	if gjson.GetBytes(payload, "request.object.kind").Str != "Pod" {
		return protocol.Accept(), nil
	}
	meta := gjson.GetManyBytes(payload, "request.object.metadata.namespace", "request.object.metadata.name", "request.object.metadata.generateName")
	pod := meta[0].Str + "/" + first(meta[1].Str, meta[2].Str)

	checked := 0
	for _, list := range gjson.GetManyBytes(payload, containerLists...) {
		for _, c := range list.Array() {
			checked++
			name, image := c.Get("name").Str, c.Get("image").Str
			if !pinned(image) {
				wasi.Log("info", "deny-latest-tag rejected pod "+pod+": container "+name+" uses image "+image)
				return protocol.Reject("container " + name + " uses image " + image + ": pin a tag other than latest"), nil
			}
		}
	}
	wasi.Log("info", "deny-latest-tag accepted pod "+pod+": "+strconv.Itoa(checked)+" images pinned")
	return protocol.Accept(), nil
}

// pinned reports whether image names a digest, or a tag other than latest.
func pinned(image string) bool {
	if strings.Contains(image, "@") {
		return true // name[:tag]@sha256:...
	}
	// The tag follows the last ':' after the last '/': a ':' before that
	// separates a registry host from its port.
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, found := strings.Cut(name, ":")
	return found && tag != "" && tag != "latest"
}

// first returns the first non-empty string of s.
func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
