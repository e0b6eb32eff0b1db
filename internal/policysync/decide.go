package policysync

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// The decisions a spoke's pass makes about each object, as functions of
// what they look at and nothing else: spoke.syncResource and spoke.update
// call them, and do what they say.

// objectAction is what a pass does with one object of a synced resource in
// a spoke.
type objectAction int

const (
	// actionNone: nothing to write. The spoke holds the copy as it was
	// applied, or the object is neither desired nor the PolicySync's.
	actionNone objectAction = iota
	// actionApply: write the copy with server-side apply.
	actionApply
	// actionConflict: an object of the same name that the PolicySync did
	// not make wins; it is reported and left alone.
	actionConflict
	// actionDelete: a copy the PolicySync made that it no longer holds.
	actionDelete
)

func (a objectAction) String() string {
	switch a {
	case actionNone:
		return "none"
	case actionApply:
		return "apply"
	case actionConflict:
		return "conflict"
	case actionDelete:
		return "delete"
	}
	return fmt.Sprintf("objectAction(%d)", int(a))
}

// objectVerdict is the decision about one object, and why.
type objectVerdict struct {
	action objectAction
	// uid guards the write: an apply keeps the uid of the copy the spoke
	// holds ("" for a new copy), a delete deletes only the object of uid.
	uid types.UID
	// reason says why, in words; for a conflict it is the message of the
	// conflict in the PolicySync's status.
	reason string
}

// decideObject is where a full pass decides about one object key in a
// spoke: want is the copy the PolicySync syncName wants there (nil: none),
// have the spoke's object of that key (nil: none), and last what the syncer
// last applied for the key (known false: nothing, or nothing it remembers).
//
// An object whose kubewarden.io/policy-synced annotation does not name
// syncName was made in the spoke, or by another PolicySync: when a copy is
// wanted it is a conflict, which the spoke's object wins; otherwise it is
// none of syncName's business. An object that names syncName is a copy of
// syncName's: applied again when it is not as last applied (upToDate),
// deleted when no copy is wanted any more.
func decideObject(syncName string, want *spokeCopy, have *unstructured.Unstructured, last applied, known bool) objectVerdict {
	switch {
	case have == nil && want == nil:
		return objectVerdict{action: actionNone, reason: "neither wanted nor in the cluster"}
	case have == nil:
		return objectVerdict{action: actionApply, reason: "not in the cluster"}
	}
	owner, annotated := have.GetAnnotations()[syncv1alpha1.SyncedAnnotation]
	ours := annotated && owner == syncName
	switch {
	case want == nil && ours:
		return objectVerdict{action: actionDelete, uid: have.GetUID(), reason: "a copy the PolicySync no longer holds"}
	case want == nil:
		return objectVerdict{action: actionNone, reason: "not made by the PolicySync"}
	case !annotated:
		return objectVerdict{action: actionConflict,
			reason: fmt.Sprintf("a %s of the same name was made in the cluster; it wins over the hub's", have.GetKind())}
	case !ours:
		return objectVerdict{action: actionConflict,
			reason: fmt.Sprintf("a %s of the same name in the cluster is synced by PolicySync %q", have.GetKind(), owner)}
	case known && upToDate(last, *want, have):
		return objectVerdict{action: actionNone, reason: "the cluster holds the copy as applied"}
	}
	return objectVerdict{action: actionApply, uid: have.GetUID(), reason: "the cluster's copy is not the one to hold"}
}

// decideChange is where an incremental pass, which does not list the
// spoke, decides about one object key from what the last pass left: want
// is the copy now wanted (nil: none), was the copy the last pass wanted
// (nil: none), conflict whether the last pass found the spoke's own object
// there, and last what the syncer last applied (known false: nothing).
func decideChange(want, was *spokeCopy, conflict bool, last applied, known bool) objectVerdict {
	var uid types.UID
	if known {
		uid = last.uid
	}
	switch {
	case want != nil && was != nil && want.digest == was.digest:
		return objectVerdict{action: actionNone, reason: "unchanged since the last pass"}
	case want != nil && conflict:
		return objectVerdict{action: actionConflict, reason: "the cluster's own object still wins"}
	case want != nil:
		return objectVerdict{action: actionApply, uid: uid, reason: "changed on the hub"}
	case was != nil && known:
		return objectVerdict{action: actionDelete, uid: uid, reason: "a copy the PolicySync no longer holds"}
	}
	return objectVerdict{action: actionNone, reason: "no copy of the PolicySync's in the cluster"}
}

// upToDate says whether the spoke's copy obj still holds c as the syncer
// last applied it (a): same digest, and neither its spec (generation) nor
// its identity (uid) changed in the spoke since, and its labels and
// annotations still include the copy's.
func upToDate(a applied, c spokeCopy, obj *unstructured.Unstructured) bool {
	return a.digest == c.digest && a.uid == obj.GetUID() && a.generation == obj.GetGeneration() &&
		includes(obj.GetLabels(), c.object.GetLabels()) && includes(obj.GetAnnotations(), c.object.GetAnnotations())
}

// includes says whether every entry of sub is in m.
func includes(m, sub map[string]string) bool {
	for k, v := range sub {
		if w, ok := m[k]; !ok || w != v {
			return false
		}
	}
	return true
}
