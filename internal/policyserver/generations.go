package policyserver

import (
	"cmp"
	"slices"

	"github.com/wardenhq/warden/internal/observability"
)

// servedGenerations returns the generation of each revision of list that
// served says is served, sorted by policy and generation: what the
// replica shows as warden_policy_generation.
func servedGenerations(list []servable, served func(id string) bool) []observability.PolicyGeneration {
	var out []observability.PolicyGeneration
	for _, sv := range list {
		if sv.err == nil && served(sv.id) {
			out = append(out, observability.PolicyGeneration{PolicyName: sv.unique, Generation: sv.gen})
		}
	}
	slices.SortFunc(out, func(a, b observability.PolicyGeneration) int {
		return cmp.Or(cmp.Compare(a.PolicyName, b.PolicyName), cmp.Compare(a.Generation, b.Generation))
	})
	return out
}

// generations returns the generations the replica serves, as the last
// apply left them; safe for concurrent use, and it does not wait for a
// sync in progress.
func (r *revisions) generations() []observability.PolicyGeneration {
	if p := r.served.Load(); p != nil {
		return *p
	}
	return nil
}
