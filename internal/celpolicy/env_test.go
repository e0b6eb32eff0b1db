package celpolicy

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/cel-go/common/types"
)

// TestLeanEnvironmentsKeepCosts plans each expression in the environment
// Compile picks and in the full one, the check environment, and evaluates
// both on the same request: results and actual costs must be the same.
func TestLeanEnvironmentsKeepCosts(t *testing.T) {
	env, err := baseEnvs()
	if err != nil {
		t.Fatal(err)
	}
	var in input
	if rej, err := in.slow(admissionRequest("CREATE", pod, "null"), json.RawMessage(`{}`)); rej != nil || err != nil {
		t.Fatal(rej, err)
	}
	vars := map[string]any{varObject: in.object, varOldObject: in.oldObject, varRequest: in.request}
	for _, tt := range []struct {
		expr string
		tier int // the environment the expression is planned in
	}{
		{`object.spec.containers.all(c, !c.image.endsWith(':latest'))`, 0},
		{`'team' in object.metadata.labels && object.metadata.name.matches('^pod')`, 0},
		{`sets.contains(object.spec.containers.map(c, c.image), ['nginx:1.27'])`, 1},
		{`sets.intersects(object.metadata.labels.map(k, k), ['team']) && sets.equivalent([1, 2], [2, 1, 1])`, 1},
		{`lists.range(3).size() == 3 && object.spec.containers.map(c, c.name).sort()[0] == 'side'`, 2},
		{`sets.contains(object.spec.containers.map(c, c.name).distinct(), ['web'])`, 2},
	} {
		t.Run(tt.expr, func(t *testing.T) {
			ast, err := compileExpr(env.check, tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			lean, err := env.program(ast, programOptions(DefaultCostLimit)...)
			if err != nil {
				t.Fatal(err)
			}
			full, err := env.check.Program(ast, programOptions(DefaultCostLimit)...)
			if err != nil {
				t.Fatal(err)
			}
			if tier := env.tier(ast); tier != tt.tier {
				t.Errorf("planned in environment %d, want %d", tier, tt.tier)
			}
			got, gotDet, gotErr := lean.ContextEval(context.Background(), vars)
			want, wantDet, wantErr := full.ContextEval(context.Background(), vars)
			if gotErr != nil || wantErr != nil || got.Equal(want) != types.True {
				t.Fatalf("lean: %v, %v; full: %v, %v", got, gotErr, want, wantErr)
			}
			if *gotDet.ActualCost() != *wantDet.ActualCost() {
				t.Errorf("actual cost %d, %d in the full environment", *gotDet.ActualCost(), *wantDet.ActualCost())
			}
		})
	}
}
