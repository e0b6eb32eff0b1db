package controller

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

func TestRevisionName(t *testing.T) {
	p := &policiesv1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "psp", Generation: 3}}
	if got := revisionName(p); got != "namespaced-team-psp-3" {
		t.Errorf("revisionName = %q, want namespaced-team-psp-3", got)
	}
	long := &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 250), Generation: 7}}
	other := long.DeepCopy()
	other.Generation = 8
	a, b := revisionName(long), revisionName(other)
	if len(a) > validation.DNS1123SubdomainMaxLength || a == b {
		t.Errorf("long names %q and %q: want distinct names of at most %d bytes", a, b, validation.DNS1123SubdomainMaxLength)
	}
	if errs := validation.IsDNS1123Subdomain(a); len(errs) > 0 {
		t.Errorf("%q is not an object name: %v", a, errs)
	}
}

func ready(replica int32, status metav1.ConditionStatus) policiesv1.PolicyStatusCondition {
	return policiesv1.PolicyStatusCondition{Type: policiesv1.PolicyReady, Status: status, Replica: &replica, Reason: "x"}
}

func TestReadyOnAll(t *testing.T) {
	rev := &policiesv1.PolicyRevision{Status: policiesv1.PolicyRevisionStatus{Conditions: []policiesv1.PolicyStatusCondition{
		ready(0, metav1.ConditionTrue), ready(1, metav1.ConditionTrue), ready(2, metav1.ConditionFalse),
	}}}
	for replicas, want := range map[int32]bool{0: false, 1: true, 2: true, 3: false, 4: false} {
		if got := readyOnAll(rev, replicas); got != want {
			t.Errorf("readyOnAll with %d replicas = %t, want %t", replicas, got, want)
		}
	}
}

// While a lone replica's template changes, its StatefulSet runs a second
// replica that answers the webhooks too: a generation is served only once
// both load it.
func TestReplicasServing(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int32
		sts  *appsv1.StatefulSet
		got  int32
	}{
		{"no StatefulSet yet", 1, nil, 1},
		{"replicas unset", 3, &appsv1.StatefulSet{}, 3},
		{"surge of a lone replica", 1, &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)}}, 2},
		{"scaling up", 3, &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)}}, 3},
		{"scaling down", 1, &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)}}, 3},
	} {
		if got := replicasServing(tc.want, tc.sts); got != tc.got {
			t.Errorf("%s: replicasServing(%d) = %d, want %d", tc.name, tc.want, got, tc.got)
		}
	}
}

func TestAwaitingFirstReadyPod(t *testing.T) {
	for _, tc := range []struct {
		name string
		sts  *appsv1.StatefulSet
		want bool
	}{
		{"no StatefulSet yet", nil, false},
		{"no StatefulSet controller (status never written)", &appsv1.StatefulSet{}, false},
		{"no pod ready", &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 1}}, true},
		{"one pod ready", &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 2, ReadyReplicas: 1}}, false},
	} {
		if got := awaitingFirstReadyPod(tc.sts); got != tc.want {
			t.Errorf("%s: awaitingFirstReadyPod = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// The policy gets the current revision's conditions, one Ready per
// replica it has now: Unknown for a replica that has not reported, none
// for a replica it no longer has.
func TestPropagateConditions(t *testing.T) {
	p := &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 2}}
	p.Status.Conditions = []policiesv1.PolicyStatusCondition{ready(0, metav1.ConditionTrue), ready(1, metav1.ConditionTrue), ready(2, metav1.ConditionTrue)}
	rev := &policiesv1.PolicyRevision{
		Spec: policiesv1.PolicyRevisionSpec{PolicyGeneration: 2},
		Status: policiesv1.PolicyRevisionStatus{Conditions: []policiesv1.PolicyStatusCondition{
			{Type: policiesv1.PolicyScheduled, Status: metav1.ConditionTrue, Reason: reasonScheduled},
			{Type: policiesv1.PolicyInitialized, Status: metav1.ConditionFalse, Reason: "PullError", Message: "gone"},
			ready(0, metav1.ConditionFalse),
		}},
	}
	propagateConditions(p, rev, 2)
	var got []string
	for _, c := range p.Status.Conditions {
		s := string(c.Type) + "=" + string(c.Status) + "/" + c.Reason
		if c.Replica != nil {
			s += "@" + string(rune('0'+*c.Replica))
		}
		got = append(got, s)
	}
	want := "Ready=False/x@0 Ready=Unknown/PolicyPending@1 Scheduled=True/PolicyScheduled Initialized=False/PullError"
	if strings.Join(got, " ") != want {
		t.Errorf("conditions:\n %s\nwant\n %s", strings.Join(got, " "), want)
	}
}
