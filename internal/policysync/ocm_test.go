package policysync

import (
	"encoding/json"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// oneCopy is a desired state holding the copy of hubObject.
func oneCopy(t *testing.T) *desiredState {
	t.Helper()
	c, err := makeCopy(rlp, hubObject(), "fleet")
	if err != nil {
		t.Fatal(err)
	}
	return &desiredState{gvrs: []schema.GroupVersionResource{rlp}, copies: map[objectKey]spokeCopy{c.key: c}}
}

// The ManifestWork API of open-cluster-management.io/api v1.1.0 takes the
// work agent's field manager only under this pattern.
var agentFieldManagerPattern = regexp.MustCompile(`^work-agent`)

func TestManifestWorkFieldsTheAPITakes(t *testing.T) {
	desired := oneCopy(t)
	desired.feedback = []syncv1alpha1.StatusFeedback{
		{Name: "policyStatus", JSONPath: ".status.policyStatus"},
		{Name: "limit", JSONPath: " {.spec.limit} "},
	}
	o := newOCMCluster("fleet", "edge-1", nil, time.Minute, time.Second, slog.New(slog.DiscardHandler), func() {})
	w := o.manifestWork(desired)
	configs, _, _ := unstructured.NestedSlice(w.Object, "spec", "manifestConfigs")
	if len(configs) != 1 {
		t.Fatalf("manifestConfigs %v, want one", configs)
	}
	manager, _, _ := unstructured.NestedString(configs[0].(map[string]any), "updateStrategy", "serverSideApply", "fieldManager")
	if !agentFieldManagerPattern.MatchString(manager) {
		t.Errorf("fieldManager %q does not match %s", manager, agentFieldManagerPattern)
	}
	rules, _, _ := unstructured.NestedSlice(configs[0].(map[string]any), "feedbackRules")
	raw, _ := json.Marshal(rules)
	if want := `[{"jsonPaths":[{"name":"policyStatus","path":".status.policyStatus"},{"name":"limit","path":".spec.limit"}],"type":"JSONPaths"}]`; string(raw) != want {
		t.Errorf("feedbackRules %s, want %s", raw, want)
	}
}

func TestAgentJSONPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{".status.policyStatus", ".status.policyStatus"},
		{"{.spec.limit}", ".spec.limit"},
		{" {.status.conditions[?(@.type==\"Ready\")].status} ", `.status.conditions[?(@.type=="Ready")].status`},
		// The agent puts the outer braces back: {.a}{.b} again.
		{"{.a}{.b}", ".a}{.b"},
	} {
		if got := agentJSONPath(tc.in); got != tc.want {
			t.Errorf("agentJSONPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
