package controller

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// The controller's webhook configurations are first written once the
// webhook Service has an endpoint ready to answer.
func TestHasReadyEndpoint(t *testing.T) {
	slice := func(ready ...*bool) discoveryv1.EndpointSlice {
		var s discoveryv1.EndpointSlice
		for _, r := range ready {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: r}})
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		slices []discoveryv1.EndpointSlice
		want   bool
	}{
		{"no slice", nil, false},
		{"a slice without endpoints", []discoveryv1.EndpointSlice{slice()}, false},
		{"the pod not ready yet", []discoveryv1.EndpointSlice{slice(ptr.To(false))}, false},
		{"one ready of two", []discoveryv1.EndpointSlice{slice(ptr.To(false)), slice(ptr.To(false), ptr.To(true))}, true},
		{"readiness not said", []discoveryv1.EndpointSlice{slice(nil)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := hasReadyEndpoint(tc.slices); got != tc.want {
				t.Errorf("hasReadyEndpoint = %v, want %v", got, tc.want)
			}
		})
	}
}
