package policyserver

import (
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/reflector"
)

// reflectorStates adapts the reflectors' states to what the metrics read;
// nil when states is nil (no reflectors: no reflector metrics).
func reflectorStates(states func() []reflector.State) func() []observability.ReflectorState {
	if states == nil {
		return nil
	}
	return func() []observability.ReflectorState {
		in := states()
		out := make([]observability.ReflectorState, len(in))
		for i, s := range in {
			out[i] = observability.ReflectorState{
				Group: s.Resource.Group, Version: s.Resource.Version, Resource: s.Resource.Resource,
				Synced: s.Synced, Lists: s.Lists, ListFailures: s.ListFailures, LastList: s.LastList,
			}
		}
		return out
	}
}
