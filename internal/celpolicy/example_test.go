package celpolicy_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/wardenhq/warden/internal/celpolicy"
)

func ExampleCompile() {
	p, err := celpolicy.Compile(json.RawMessage(`{
		"variables": [{"name": "replicas", "expression": "object.spec.replicas"}],
		"validations": [{"expression": "variables.replicas <= 5", "message": "at most 5 replicas", "reason": "Forbidden"}]
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, replicas := range []int{3, 7} {
		request := fmt.Sprintf(`{"operation": "CREATE", "object": {"spec": {"replicas": %d}}}`, replicas)
		res, err := p.Validate(context.Background(), json.RawMessage(request))
		fmt.Printf("%d replicas: %+v %v\n", replicas, res, err)
	}
	// Output:
	// 3 replicas: {Accepted:true Message: Code:0} <nil>
	// 7 replicas: {Accepted:false Message:at most 5 replicas Code:403} <nil>
}
