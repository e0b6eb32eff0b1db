package wardenctl

import (
	"fmt"
	"strings"

	"oras.land/oras-go/v2/registry"
)

// parseRegistryRef parses registry://host/repo[:tag|@digest] or the same
// without the scheme.
func parseRegistryRef(s string) (registry.Reference, error) {
	if scheme, _, ok := strings.Cut(s, "://"); ok && scheme != "registry" {
		return registry.Reference{}, fmt.Errorf("%s is not a registry reference: want registry://host/repository:tag", s)
	}
	ref, err := registry.ParseReference(strings.TrimPrefix(s, "registry://"))
	if err != nil {
		return registry.Reference{}, fmt.Errorf("invalid registry reference %q: %w", s, err)
	}
	return ref, nil
}
