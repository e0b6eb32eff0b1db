//go:build linux

package wasm

import (
	"fmt"
	"testing"
)

// CodeRegions returns the "start-end" address ranges, as /proc/self/maps
// writes them, of the machine code r has moved into files.
func CodeRegions(r *Runtime) []string {
	codeMu.Lock()
	defer codeMu.Unlock()
	var out []string
	for _, c := range r.code {
		out = append(out, fmt.Sprintf("%x-%x", c.start, c.end))
	}
	return out
}

// SetCodeDir sets where r writes the files that back machine code.
func SetCodeDir(r *Runtime, dir string) { r.codeDir = dir }

// FindCodeByMappings makes compilations find their machine code by the
// mappings they create, as when wazero is not laid out as codeaddr.go
// expects, until the test ends.
func FindCodeByMappings(t testing.TB) {
	codeLayout.Lock()
	checked, ok := codeLayout.checked, codeLayout.ok
	codeLayout.checked, codeLayout.ok = true, false
	codeLayout.Unlock()
	t.Cleanup(func() {
		codeLayout.Lock()
		codeLayout.checked, codeLayout.ok = checked, ok
		codeLayout.Unlock()
	})
}
