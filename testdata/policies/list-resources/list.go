package main

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"

	"warden.test/policies/guest/jsonscan"
	"warden.test/policies/guest/protocol"
)

// The policy's logic, apart from the waPC glue of main.go, so that it is
// tested natively.

// settings are the policy's settings, read from their JSON.
type settings struct {
	operation string // the host call
	request   []byte // its payload
	scan      bool
	minItems  int64
}

// parseSettings reads doc, or returns why it is invalid.
func parseSettings(doc []byte) (settings, string) {
	s := gjson.ParseBytes(doc)
	var out settings
	apiVersion, kind, namespace := s.Get("api_version").Str, s.Get("kind").Str, s.Get("namespace").Str
	if apiVersion == "" || kind == "" {
		return out, "api_version and kind are required"
	}
	out.request = append(out.request, `{"api_version":`...)
	out.request = protocol.AppendString(out.request, apiVersion)
	out.request = append(out.request, `,"kind":`...)
	out.request = protocol.AppendString(out.request, kind)
	switch call := s.Get("call").Str; call {
	case "all":
		out.operation = "list_resources_all"
	case "namespace":
		if namespace == "" {
			return out, "call: namespace needs a namespace"
		}
		out.operation = "list_resources_by_namespace"
		out.request = append(out.request, `,"namespace":`...)
		out.request = protocol.AppendString(out.request, namespace)
	default:
		return out, "call must be all or namespace, not " + strconv.Quote(call)
	}
	out.request = append(out.request, '}')
	out.scan = s.Get("scan").Bool()
	out.minItems = s.Get("min_items").Int()
	return out, ""
}

// countItems walks the items of a Kubernetes list answer, every byte of
// each, and counts them, as a policy looking for something in the list
// walks it. ok is false when the answer has no items array of objects.
//
// It checks the structure only (brackets and strings), the least a parser
// does: a 1 MB list costs ~7 ms in a Go guest under wazero. Looking up a key
// in each item with jsonscan, whose loops go byte by byte, tripled that, and
// a policy's own cost is not what the scale benchmark measures.
func countItems(list []byte) (n int, ok bool) {
	items := jsonscan.Get(list, "items")
	i := space(items, 0)
	if i >= len(items) || items[i] != '[' {
		return 0, false
	}
	i = space(items, i+1)
	if i < len(items) && items[i] == ']' {
		return 0, true
	}
	for i < len(items) {
		if items[i] != '{' {
			return n, false
		}
		end := valueEnd(items, i)
		if end < 0 {
			return n, false
		}
		n++
		i = space(items, end)
		if i < len(items) && items[i] == ']' {
			return n, true
		}
		if i >= len(items) || items[i] != ',' {
			return n, false
		}
		i = space(items, i+1)
	}
	return n, false
}

func space(doc []byte, i int) int {
	for i < len(doc) && (doc[i] == ' ' || doc[i] == '\n' || doc[i] == '\t' || doc[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just past the object or array that opens at i,
// or -1 when it is not closed. Strings, most of a Kubernetes object's
// bytes, are skipped with bytes.IndexByte (assembly in Go's wasm port too):
// a byte-by-byte loop costs several times more in a guest.
func valueEnd(doc []byte, i int) int {
	depth := 0
	for i < len(doc) {
		switch doc[i] {
		case '"':
			end := stringEnd(doc, i)
			if end < 0 {
				return -1
			}
			i = end
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return -1
}

// stringEnd returns the index of the quote that closes the string opening
// at i, or -1.
func stringEnd(doc []byte, i int) int {
	for j := i + 1; j < len(doc); j++ {
		k := bytes.IndexByte(doc[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		backslashes := 0
		for b := j - 1; b > i && doc[b] == '\\'; b-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return j
		}
	}
	return -1
}
