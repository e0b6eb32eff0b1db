package policysync

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// spokeObject is the spoke's object of hubObject's key: a copy with the
// given synced annotation ("-": none), uid and generation.
func spokeObject(t *testing.T, owner string, uid types.UID, generation int64) *unstructured.Unstructured {
	t.Helper()
	c, err := makeCopy(rlp, hubObject(), "fleet")
	if err != nil {
		t.Fatal(err)
	}
	obj := c.object.DeepCopy()
	annotations := obj.GetAnnotations()
	if owner == "-" {
		delete(annotations, syncv1alpha1.SyncedAnnotation)
	} else {
		annotations[syncv1alpha1.SyncedAnnotation] = owner
	}
	obj.SetAnnotations(annotations)
	obj.SetUID(uid)
	obj.SetGeneration(generation)
	return obj
}

func TestDecideObject(t *testing.T) {
	want, err := makeCopy(rlp, hubObject(), "fleet")
	if err != nil {
		t.Fatal(err)
	}
	changed := hubObject()
	changed.Object["spec"].(map[string]any)["limit"] = int64(11)
	wantChanged, err := makeCopy(rlp, changed, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	asApplied := applied{digest: want.digest, uid: "spoke-uid", generation: 1}
	ours := spokeObject(t, "fleet", "spoke-uid", 1)
	withoutLabel := ours.DeepCopy()
	withoutLabel.SetLabels(nil)
	withoutAnnotation := ours.DeepCopy()
	annotations := withoutAnnotation.GetAnnotations()
	delete(annotations, "owner")
	withoutAnnotation.SetAnnotations(annotations)

	for _, tc := range []struct {
		name   string
		want   *spokeCopy
		have   *unstructured.Unstructured
		last   applied
		known  bool
		action objectAction
		uid    types.UID
		reason string
	}{
		{name: "neither wanted nor there", action: actionNone},
		{name: "wanted, not there", want: &want, action: actionApply, uid: ""},
		{name: "made in the cluster", want: &want, have: spokeObject(t, "-", "local", 1),
			action: actionConflict, reason: "a RateLimitPolicy of the same name was made in the cluster; it wins over the hub's"},
		{name: "synced by another PolicySync", want: &want, have: spokeObject(t, "other", "theirs", 1),
			action: actionConflict, reason: `a RateLimitPolicy of the same name in the cluster is synced by PolicySync "other"`},
		{name: "annotated with no name", want: &want, have: spokeObject(t, "", "theirs", 1),
			action: actionConflict, reason: `a RateLimitPolicy of the same name in the cluster is synced by PolicySync ""`},
		{name: "ours, as applied", want: &want, have: ours, last: asApplied, known: true, action: actionNone},
		{name: "ours, not remembered (a restart)", want: &want, have: ours, action: actionApply, uid: "spoke-uid"},
		{name: "ours, changed on the hub", want: &wantChanged, have: ours, last: asApplied, known: true, action: actionApply, uid: "spoke-uid"},
		{name: "ours, spec changed in the cluster", want: &want, have: spokeObject(t, "fleet", "spoke-uid", 2), last: asApplied, known: true,
			action: actionApply, uid: "spoke-uid"},
		{name: "ours, deleted and made again", want: &want, have: spokeObject(t, "fleet", "new-uid", 1), last: asApplied, known: true,
			action: actionApply, uid: "new-uid"},
		{name: "ours, a label taken off in the cluster", want: &want, have: withoutLabel, last: asApplied, known: true,
			action: actionApply, uid: "spoke-uid"},
		{name: "ours, an annotation taken off in the cluster", want: &want, have: withoutAnnotation, last: asApplied, known: true,
			action: actionApply, uid: "spoke-uid"},
		{name: "ours, no longer wanted", have: ours, last: asApplied, known: true, action: actionDelete, uid: "spoke-uid"},
		{name: "ours, no longer wanted, not remembered", have: ours, action: actionDelete, uid: "spoke-uid"},
		{name: "made in the cluster, not wanted", have: spokeObject(t, "-", "local", 1), action: actionNone},
		{name: "another PolicySync's, not wanted", have: spokeObject(t, "other", "theirs", 1), action: actionNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := decideObject("fleet", tc.want, tc.have, tc.last, tc.known)
			if v.action != tc.action || v.uid != tc.uid {
				t.Errorf("verdict %s uid %q (%s), want %s uid %q", v.action, v.uid, v.reason, tc.action, tc.uid)
			}
			if tc.reason != "" && v.reason != tc.reason {
				t.Errorf("reason %q, want %q", v.reason, tc.reason)
			}
			if v.reason == "" {
				t.Error("no reason")
			}
		})
	}
}

func TestDecideChange(t *testing.T) {
	was, err := makeCopy(rlp, hubObject(), "fleet")
	if err != nil {
		t.Fatal(err)
	}
	changed := hubObject()
	changed.Object["spec"].(map[string]any)["limit"] = int64(11)
	now, err := makeCopy(rlp, changed, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	last := applied{digest: was.digest, uid: "spoke-uid", generation: 1}
	for _, tc := range []struct {
		name      string
		want, was *spokeCopy
		conflict  bool
		known     bool
		action    objectAction
		uid       types.UID
	}{
		{name: "unchanged", want: &was, was: &was, known: true, action: actionNone},
		{name: "unchanged, in conflict", want: &was, was: &was, conflict: true, action: actionNone},
		{name: "changed, in conflict", want: &now, was: &was, conflict: true, action: actionConflict},
		{name: "changed", want: &now, was: &was, known: true, action: actionApply, uid: "spoke-uid"},
		{name: "new", want: &now, action: actionApply, uid: ""},
		{name: "no longer wanted", was: &was, known: true, action: actionDelete, uid: "spoke-uid"},
		{name: "no longer wanted, never applied", was: &was, action: actionNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := decideChange(tc.want, tc.was, tc.conflict, last, tc.known)
			if v.action != tc.action || v.uid != tc.uid || v.reason == "" {
				t.Errorf("verdict %s uid %q (%q), want %s uid %q", v.action, v.uid, v.reason, tc.action, tc.uid)
			}
		})
	}
}

func TestIncludes(t *testing.T) {
	m := map[string]string{"a": "1", "b": "2"}
	for _, tc := range []struct {
		name string
		sub  map[string]string
		want bool
	}{
		{"a subset", map[string]string{"a": "1"}, true},
		{"nothing", nil, true},
		{"a different value", map[string]string{"a": "2"}, false},
		{"a missing key", map[string]string{"c": "1"}, false},
	} {
		if got := includes(m, tc.sub); got != tc.want {
			t.Errorf("%s: includes = %v, want %v", tc.name, got, tc.want)
		}
	}
}
