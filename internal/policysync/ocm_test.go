package policysync

import (
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
	"github.com/wardenhq/warden/internal/logtest"
)

var manifestWorkGR = schema.GroupResource{Group: manifestWorkGVR.Group, Resource: manifestWorkGVR.Resource}

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

func TestWriteFailure(t *testing.T) {
	missingNamespace := apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "edge-1")
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: manifestWorkGVR.Group, Kind: "ManifestWork"}, "policysync-fleet", field.ErrorList{
		field.Invalid(field.NewPath("spec", "manifestConfigs").Index(0).Child("updateStrategy", "serverSideApply", "fieldManager"),
			"warden-policy-syncer", "should match '^work-agent'"),
	})
	for _, tc := range []struct {
		name      string
		err       error
		refused   bool
		reachable bool
		message   string
	}{
		{"invalid", invalid, true, true,
			`the hub refused the ManifestWork edge-1/policysync-fleet: ManifestWork.work.open-cluster-management.io "policysync-fleet" is invalid: ` +
				`spec.manifestConfigs[0].updateStrategy.serverSideApply.fieldManager: Invalid value: "warden-policy-syncer": should match '^work-agent'`},
		{"denied by a webhook", apierrors.NewBadRequest("the size of manifests is too large"), true, true,
			"the hub refused the ManifestWork edge-1/policysync-fleet: the size of manifests is too large"},
		{"forbidden", apierrors.NewForbidden(manifestWorkGR, "policysync-fleet", errors.New("no RBAC")), true, true,
			"the hub refused the ManifestWork edge-1/policysync-fleet: "},
		{"no namespace", missingNamespace, false, false, "the hub has no namespace edge-1: is edge-1 a ManagedCluster?"},
		{"unavailable", apierrors.NewServiceUnavailable("etcd down"), false, false, "writing the ManifestWork edge-1/policysync-fleet on the hub: etcd down"},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), false, false, "writing the ManifestWork edge-1/policysync-fleet on the hub: "},
		{"webhook failure", apierrors.NewInternalError(errors.New("failed calling webhook")), false, false, "writing the ManifestWork edge-1/policysync-fleet on the hub: "},
		{"no answer", errors.New("connection refused"), false, false, "writing the ManifestWork edge-1/policysync-fleet on the hub: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, err := writeFailure("edge-1", "policysync-fleet", oneCopy(t), tc.err)
			var refused *refusedError
			if errors.As(err, &refused) != tc.refused {
				t.Errorf("refused = %v, want %v (%v)", !tc.refused, tc.refused, err)
			}
			if status.Reachable != tc.reachable || !strings.HasPrefix(status.Message, tc.message) || err.Error() != status.Message {
				t.Errorf("status reachable=%v message %q (error %q), want reachable=%v message %q...", status.Reachable, status.Message, err, tc.reachable, tc.message)
			}
			// A refused ManifestWork: every object is reported not synced.
			if tc.refused != (len(status.Objects) == 1 && !status.Objects[0].Synced && status.Objects[0].Message != "") {
				t.Errorf("objects %+v", status.Objects)
			}
		})
	}
}

// TestRefusedManifestWork: a ManifestWork the hub refuses shows in the
// cluster's status with the API's message, is logged as an error, and is
// tried again with a backoff; a hub that does not answer is logged at info.
func TestRefusedManifestWork(t *testing.T) {
	hub := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{manifestWorkGVR: "ManifestWorkList"})
	refusal := apierrors.NewBadRequest("the size of manifests exceeds the limit")
	var answer error = refusal
	hub.PrependReactor("patch", "manifestworks", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, answer
	})
	var logs logtest.Buffer
	o := newOCMCluster("fleet", "edge-1", hub, time.Minute, time.Second, slog.New(slog.NewJSONHandler(&logs, nil)), func() {})
	o.setDesired(oneCopy(t))

	err := o.pass(t.Context())
	status, reported := o.clusterStatus()
	want := "the hub refused the ManifestWork edge-1/policysync-fleet: the size of manifests exceeds the limit"
	if !reported || !status.Reachable || status.Message != want {
		t.Errorf("status %+v, want reachable with message %q", status, want)
	}
	if len(status.Objects) != 1 || status.Objects[0].Synced {
		t.Errorf("objects %+v, want the one copy not synced", status.Objects)
	}

	var backoffs []time.Duration
	var backoff time.Duration
	for range 7 {
		backoff = o.failed(err, backoff)
		backoffs = append(backoffs, backoff)
	}
	if want := []time.Duration{1, 2, 4, 8, 16, 30, 30}; !equalSeconds(backoffs, want) {
		t.Errorf("backoffs %v, want %v seconds", backoffs, want)
	}
	var entry struct{ Level, Msg, Error string }
	if err := json.Unmarshal([]byte(strings.SplitN(logs.String(), "\n", 2)[0]), &entry); err != nil {
		t.Fatal(err)
	}
	if entry.Level != "ERROR" || entry.Error != want {
		t.Errorf("logged %+v, want an ERROR with %q", entry, want)
	}

	logs.Reset()
	answer = apierrors.NewServiceUnavailable("etcd down")
	err = o.pass(t.Context())
	o.failed(err, 0)
	if status, _ := o.clusterStatus(); status.Reachable {
		t.Errorf("a hub that does not answer: status %+v, want not reachable", status)
	}
	if !strings.Contains(logs.String(), `"level":"INFO"`) {
		t.Errorf("a hub that does not answer is logged %s, want at INFO", logs.String())
	}
}

func equalSeconds(got []time.Duration, want []time.Duration) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i]*time.Second {
			return false
		}
	}
	return true
}

// TestWorkStatus: how the work agent's conditions and feedback on a
// ManifestWork become the cluster's status.
func TestWorkStatus(t *testing.T) {
	manifest := func(applied string, message string, values ...any) map[string]any {
		m := map[string]any{
			"resourceMeta": map[string]any{"group": rlp.Group, "resource": rlp.Resource, "namespace": "team", "name": "limits"},
			"conditions":   []any{map[string]any{"type": "Applied", "status": applied, "message": message}},
		}
		if len(values) > 0 {
			m["statusFeedback"] = map[string]any{"values": values}
		}
		return m
	}
	value := func(name string, field map[string]any) any { return map[string]any{"name": name, "fieldValue": field} }
	work := func(generation, appliedAt int64, manifests ...any) *unstructured.Unstructured {
		w := &unstructured.Unstructured{Object: map[string]any{}}
		w.SetName("policysync-fleet")
		w.SetGeneration(generation)
		if appliedAt >= 0 {
			_ = unstructured.SetNestedSlice(w.Object, []any{map[string]any{"type": "Applied", "status": "True", "observedGeneration": appliedAt}}, "status", "conditions")
		}
		_ = unstructured.SetNestedSlice(w.Object, manifests, "status", "resourceStatus", "manifests")
		return w
	}
	object := func(synced bool, message string, feedback map[string]string) []syncv1alpha1.ObjectStatus {
		return []syncv1alpha1.ObjectStatus{{Group: rlp.Group, Resource: rlp.Resource, Namespace: "team", Name: "limits",
			HubGeneration: 3, Synced: synced, Message: message, Feedback: feedback}}
	}
	for _, tc := range []struct {
		name string
		work *unstructured.Unstructured
		want syncv1alpha1.ClusterStatus
	}{
		{"no ManifestWork: nothing to hold", nil, syncv1alpha1.ClusterStatus{Name: "edge-1", Reachable: true}},
		{"the agent has not reported", work(1, -1), syncv1alpha1.ClusterStatus{Name: "edge-1",
			Message: "the work agent of edge-1 has not reported on ManifestWork policysync-fleet yet",
			Objects: object(false, "not applied by the work agent yet", nil)}},
		{"applied at an older generation", work(2, 1, manifest("True", "")), syncv1alpha1.ClusterStatus{Name: "edge-1", Reachable: true,
			Objects: object(false, "not applied by the work agent yet", nil)}},
		{"not among the manifests reported", work(1, 1), syncv1alpha1.ClusterStatus{Name: "edge-1", Reachable: true,
			Objects: object(false, "not applied by the work agent yet", nil)}},
		{"refused in the cluster", work(1, 1, manifest("False", "Apply failed: conflict with local-manager")), syncv1alpha1.ClusterStatus{
			Name: "edge-1", Reachable: true, Objects: object(false, "Apply failed: conflict with local-manager", nil)}},
		{"applied, no feedback", work(1, 1, manifest("True", "")), syncv1alpha1.ClusterStatus{Name: "edge-1", Reachable: true,
			Objects: object(true, "", nil)}},
		{"applied, with feedback", work(1, 1, manifest("True", "",
			value("policyStatus", map[string]any{"type": "String", "string": "active"}),
			value("limit", map[string]any{"type": "Integer", "integer": int64(10)}),
			value("enabled", map[string]any{"type": "Boolean", "boolean": true}),
			value("targetRef", map[string]any{"type": "JsonRaw", "jsonRaw": `{"kind":"Gateway"}`}),
		)), syncv1alpha1.ClusterStatus{Name: "edge-1", Reachable: true, Objects: object(true, "",
			map[string]string{"policyStatus": "active", "limit": "10", "enabled": "true", "targetRef": `{"kind":"Gateway"}`})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			desired := oneCopy(t)
			if tc.work == nil {
				desired.copies = nil
			}
			got := workStatus("edge-1", tc.work, desired)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("status:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
