package observability_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/wardenhq/warden/internal/observability"
)

func ExampleMetrics() {
	ctx := context.Background()
	m, err := observability.NewMetrics(ctx, observability.MetricsOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Shutdown(ctx)

	m.RecordEvaluation(ctx, observability.Evaluation{
		PolicyName:   "psp-capabilities",
		PolicyMode:   observability.ModeProtect,
		ResourceKind: "Pod",
		Operation:    "CREATE",
		Namespace:    "default",
		Origin:       observability.OriginValidate,
		Accepted:     true,
	}, 1500*time.Microsecond)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "kubewarden_policy_evaluations_total") ||
			strings.HasPrefix(line, "kubewarden_policy_evaluation_latency_milliseconds_sum") {
			fmt.Print(line)
		}
	}
	// Output:
	// kubewarden_policy_evaluation_latency_milliseconds_sum{accepted="true",mutated="false",policy_mode="protect",policy_name="psp-capabilities",request_origin="validate",resource_kind="Pod",resource_namespace="default",resource_request_operation="CREATE"} 1.5
	// kubewarden_policy_evaluations_total{accepted="true",mutated="false",policy_mode="protect",policy_name="psp-capabilities",request_origin="validate",resource_kind="Pod",resource_namespace="default",resource_request_operation="CREATE"} 1
}
