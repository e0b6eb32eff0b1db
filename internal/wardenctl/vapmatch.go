package wardenctl

import (
	"fmt"
	"strings"
	"sync"

	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
)

// webhookConditionCompiler compiles matchConditions as the API server
// compiles a webhook's: object, oldObject, request and authorizer, no
// params, variables or namespaceObject. Its environment takes a while to
// build, so it is made on first use.
var webhookConditionCompiler = sync.OnceValue(func() plugincel.Compiler {
	return plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

// checkMatchConditions checks that a ValidatingAdmissionPolicy's
// matchConditions can be a ClusterAdmissionPolicy's, which the controller
// writes into the policy's webhook: each has a name, no two share one, and
// each compiles in the webhook's environment to a bool. A condition that
// reads what only a policy has (params, variables, namespaceObject) does not.
func checkMatchConditions(conds []vapExpression) error {
	names := map[string]bool{}
	for i, c := range conds {
		where := fmt.Sprintf("the ValidatingAdmissionPolicy's spec.matchConditions[%d]", i)
		switch {
		case c.Name == "":
			return fmt.Errorf("%s has no name", where)
		case names[c.Name]:
			return fmt.Errorf("%s: a second match condition named %s", where, c.Name)
		case strings.TrimSpace(c.Expression) == "":
			return fmt.Errorf("%s (%s) has no expression", where, c.Name)
		}
		names[c.Name] = true
		res := webhookConditionCompiler().CompileCELExpression(&matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression},
			plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions)
		if res.Error != nil {
			return fmt.Errorf("%s (%s) cannot become the ClusterAdmissionPolicy's: the API server evaluates those for its webhook, "+
				"with object, oldObject, request and authorizer only (no params, variables or namespaceObject): %s",
				where, c.Name, res.Error.Detail)
		}
	}
	return nil
}
