package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A condition list ([]PolicyStatusCondition) holds at most one condition per
// type and replica: conditions about the whole policy have no replica, and a
// condition reported by a policy server replica carries its ordinal. The
// functions below keep that invariant. None of them is safe for concurrent
// use on the same list.

// FindPolicyStatusCondition returns the condition of type t reported by
// replica (nil for the condition that belongs to no replica), or nil when
// there is none. The result points into conditions.
func FindPolicyStatusCondition(conditions []PolicyStatusCondition, t PolicyConditionType, replica *int32) *PolicyStatusCondition {
	for i := range conditions {
		if conditions[i].Type == t && sameReplica(conditions[i].Replica, replica) {
			return &conditions[i]
		}
	}
	return nil
}

// IsPolicyStatusConditionTrue reports whether the condition of type t
// reported by replica exists and is True.
func IsPolicyStatusConditionTrue(conditions []PolicyStatusCondition, t PolicyConditionType, replica *int32) bool {
	c := FindPolicyStatusCondition(conditions, t, replica)
	return c != nil && c.Status == metav1.ConditionTrue
}

// SetPolicyStatusCondition adds c to conditions, or updates the condition
// with the same type and replica. LastTransitionTime changes only when the
// status changes: it is set to c.LastTransitionTime, or to now when that is
// zero. It reports whether conditions changed.
func SetPolicyStatusCondition(conditions *[]PolicyStatusCondition, c PolicyStatusCondition) bool {
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = metav1.Now()
	}
	existing := FindPolicyStatusCondition(*conditions, c.Type, c.Replica)
	if existing == nil {
		if c.Replica != nil {
			replica := *c.Replica
			c.Replica = &replica
		}
		*conditions = append(*conditions, c)
		return true
	}
	changed := false
	if existing.Status != c.Status {
		existing.Status = c.Status
		existing.LastTransitionTime = c.LastTransitionTime
		changed = true
	}
	if existing.Reason != c.Reason {
		existing.Reason = c.Reason
		changed = true
	}
	if existing.Message != c.Message {
		existing.Message = c.Message
		changed = true
	}
	if existing.ObservedGeneration != c.ObservedGeneration {
		existing.ObservedGeneration = c.ObservedGeneration
		changed = true
	}
	return changed
}

// RemovePolicyStatusCondition removes the condition of type t reported by
// replica, and reports whether there was one.
func RemovePolicyStatusCondition(conditions *[]PolicyStatusCondition, t PolicyConditionType, replica *int32) bool {
	for i := range *conditions {
		c := (*conditions)[i]
		if c.Type == t && sameReplica(c.Replica, replica) {
			*conditions = append((*conditions)[:i], (*conditions)[i+1:]...)
			return true
		}
	}
	return false
}

func sameReplica(a, b *int32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
