package policyserver

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/wardenhq/warden/internal/observability"
)

// The generations a replica shows are those of the revisions it serves:
// every generation of a policy that loaded (two during a rollout), none
// that failed to load or cannot be decoded, each under the policy's
// unique name.
func TestServedGenerations(t *testing.T) {
	rev := func(unique string, gen int64) servable {
		return servable{id: unique + "/" + strconv.FormatInt(gen, 10), unique: unique, gen: gen}
	}
	undecodable := rev("clusterwide-bad", 1)
	undecodable.err = errors.New("cannot decode")
	tests := []struct {
		name   string
		list   []servable
		served []string
		want   []observability.PolicyGeneration
	}{
		{name: "nothing", want: nil},
		{
			name:   "one generation",
			list:   []servable{rev("clusterwide-psp", 3)},
			served: []string{"clusterwide-psp/3"},
			want:   []observability.PolicyGeneration{{PolicyName: "clusterwide-psp", Generation: 3}},
		},
		{
			name:   "a rollout serves both, sorted",
			list:   []servable{rev("namespaced-shop-labels", 1), rev("clusterwide-psp", 4), rev("clusterwide-psp", 3)},
			served: []string{"clusterwide-psp/3", "clusterwide-psp/4", "namespaced-shop-labels/1"},
			want: []observability.PolicyGeneration{
				{PolicyName: "clusterwide-psp", Generation: 3},
				{PolicyName: "clusterwide-psp", Generation: 4},
				{PolicyName: "namespaced-shop-labels", Generation: 1},
			},
		},
		{
			name:   "a generation that failed to load is not served",
			list:   []servable{rev("clusterwide-psp", 3), rev("clusterwide-psp", 4)},
			served: []string{"clusterwide-psp/3"},
			want:   []observability.PolicyGeneration{{PolicyName: "clusterwide-psp", Generation: 3}},
		},
		{
			name:   "an undecodable revision is never served",
			list:   []servable{undecodable},
			served: []string{"clusterwide-bad/1"},
			want:   nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := servedGenerations(tt.list, func(id string) bool { return slices.Contains(tt.served, id) })
			if !slices.Equal(got, tt.want) {
				t.Errorf("servedGenerations = %v, want %v", got, tt.want)
			}
		})
	}
}
