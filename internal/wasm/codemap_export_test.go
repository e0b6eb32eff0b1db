//go:build linux

package wasm

import "fmt"

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
