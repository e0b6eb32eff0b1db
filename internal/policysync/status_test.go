package policysync

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

var capGVR = schema.GroupVersionResource{Group: "policies.kubewarden.io", Version: "v1", Resource: "clusteradmissionpolicies"}

func TestReadyCondition(t *testing.T) {
	valid := []validatedGVR{{gvr: capGVR}}
	invalid := []validatedGVR{{gvr: capGVR}, {gvr: rlp, err: errors.New("not served")}}
	synced := syncv1alpha1.ObjectStatus{Name: "a", Synced: true}
	notSynced := syncv1alpha1.ObjectStatus{Name: "b", Message: "namespace team does not exist in the cluster"}
	ok := func(name string) clusterReport {
		return clusterReport{name: name, running: true, reported: true,
			status: syncv1alpha1.ClusterStatus{Name: name, Reachable: true, Objects: []syncv1alpha1.ObjectStatus{synced}}}
	}
	down := clusterReport{name: "down", running: true, reported: true, status: syncv1alpha1.ClusterStatus{Name: "down", Message: "connection refused"}}
	conflict := ok("conflict")
	conflict.status.Conflicts = []syncv1alpha1.ConflictStatus{{Name: "a", Message: "made in the cluster"}}
	failing := ok("failing")
	failing.status.Objects = append(failing.status.Objects, notSynced)
	refused := ok("refused")
	refused.status.Objects, refused.status.Message = nil, "the hub refused the ManifestWork"
	pending := clusterReport{name: "pending", running: true}
	notStarted := clusterReport{name: "new"}

	for _, tc := range []struct {
		name      string
		resources []validatedGVR
		clusters  []clusterReport
		buildErr  error
		status    metav1.ConditionStatus
		reason    string
		message   string
	}{
		{"synced", valid, []clusterReport{ok("a"), ok("b")}, nil,
			metav1.ConditionTrue, syncv1alpha1.ReasonSynced, "every object is synced to every cluster"},
		{"no cluster", valid, nil, nil, metav1.ConditionTrue, syncv1alpha1.ReasonSynced, "every object is synced to every cluster"},
		{"copies not made", invalid, []clusterReport{down}, errors.New("spec.selector: bad"),
			metav1.ConditionFalse, syncv1alpha1.ReasonSyncFailed, "spec.selector: bad"},
		{"an invalid resource", invalid, []clusterReport{down, conflict}, nil,
			metav1.ConditionFalse, syncv1alpha1.ReasonInvalidGVR, "not synced, see status.policiesToSync: ratelimitpolicies.v1.example.com"},
		{"a cluster down", valid, []clusterReport{ok("a"), down, conflict, failing, pending}, nil,
			metav1.ConditionFalse, syncv1alpha1.ReasonClusterUnreachable, "clusters not reachable, see status.clusters: down"},
		{"a conflict", valid, []clusterReport{failing, conflict, pending}, nil,
			metav1.ConditionFalse, syncv1alpha1.ReasonConflict, "objects made in the clusters win over the hub's, see status.clusters: conflict"},
		{"an object not synced", valid, []clusterReport{failing, pending}, nil,
			metav1.ConditionFalse, syncv1alpha1.ReasonSyncFailed, "objects not synced, see status.clusters: failing"},
		{"a ManifestWork refused, holding nothing", valid, []clusterReport{ok("a"), refused}, nil,
			metav1.ConditionFalse, syncv1alpha1.ReasonSyncFailed, "objects not synced, see status.clusters: refused"},
		{"clusters not reported yet", valid, []clusterReport{ok("a"), pending, notStarted}, nil,
			metav1.ConditionUnknown, syncv1alpha1.ReasonSyncing, "not synced yet: pending, new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readyCondition(7, tc.resources, tc.clusters, tc.buildErr)
			want := metav1.Condition{Type: syncv1alpha1.ConditionReady, Status: tc.status, Reason: tc.reason, Message: tc.message, ObservedGeneration: 7}
			if got != want {
				t.Errorf("Ready:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestPolicySyncStatus(t *testing.T) {
	ps := &syncv1alpha1.PolicySync{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Generation: 3}}
	ps.Status.Conditions = []metav1.Condition{
		{Type: "Other", Status: metav1.ConditionTrue, Reason: "Kept"},
		{Type: syncv1alpha1.ConditionReady, Status: metav1.ConditionUnknown, Reason: syncv1alpha1.ReasonSyncing},
	}
	a := syncv1alpha1.ClusterStatus{Name: "a", Reachable: true}
	got := policySyncStatus(ps,
		[]validatedGVR{{gvr: capGVR}, {gvr: rlp, err: errors.New("the hub does not serve ratelimitpolicies.v1.example.com")}},
		[]clusterReport{
			{name: "a", running: true, reported: true, status: a},
			{name: "pending", running: true},
			{name: "new"},
		}, nil)

	want := syncv1alpha1.PolicySyncStatus{
		ObservedGeneration: 3,
		PoliciesToSync: []syncv1alpha1.GVRStatus{
			{Group: capGVR.Group, Version: "v1", Resource: capGVR.Resource, Valid: true},
			{Group: rlp.Group, Version: "v1", Resource: rlp.Resource, Message: "the hub does not serve ratelimitpolicies.v1.example.com"},
		},
		// A cluster whose worker has not reported is listed by name; one
		// without a worker (the copies could not be made) is not.
		Clusters: []syncv1alpha1.ClusterStatus{a, {Name: "pending"}},
	}
	ready := meta.FindStatusCondition(got.Conditions, syncv1alpha1.ConditionReady)
	if ready == nil || ready.Reason != syncv1alpha1.ReasonInvalidGVR {
		t.Errorf("Ready %+v, want reason %s", ready, syncv1alpha1.ReasonInvalidGVR)
	}
	if meta.FindStatusCondition(got.Conditions, "Other") == nil {
		t.Error("a condition of another type was dropped")
	}
	got.Conditions = nil
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("status:\n got %+v\nwant %+v", got, want)
	}
	if ps.Status.Conditions[1].Reason != syncv1alpha1.ReasonSyncing {
		t.Error("the PolicySync read was changed")
	}
}
