//go:build wasip1

// Command oom is a waPC policy whose validate operation allocates 1 MiB
// blocks without bound, keeping every block reachable (and touched) so that
// the garbage collector cannot reclaim it, until the host's memory cap makes
// memory.grow fail; the Go runtime then reports "out of memory" on stderr
// and exits with status 2 (proc_exit). validate_settings accepts anything.
package main

import (
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

// hoard holds every block, so none can be collected.
var hoard [][]byte

func validate([]byte) ([]byte, error) {
	for {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		hoard = append(hoard, b)
	}
}
