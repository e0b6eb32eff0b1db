package controller

import (
	"maps"
	"testing"
	"time"
)

func TestDecideRouting(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	before := now.Add(-3 * time.Second) // within drainDelay
	long := now.Add(-time.Minute)       // past it
	for _, tc := range []struct {
		name  string
		facts routingFacts
		want  routing
	}{{
		name:  "a new policy not Ready everywhere has no webhook",
		facts: routingFacts{current: 1, revisions: map[int64]bool{1: true}},
		want:  routing{enabled: map[int64]bool{1: true}},
	}, {
		name:  "a new policy Ready everywhere gets its webhook",
		facts: routingFacts{current: 1, currentReady: true, revisions: map[int64]bool{1: true}},
		want:  routing{target: 1, switchedAt: now, enabled: map[int64]bool{1: true}},
	}, {
		name:  "a new policy waits for the PolicyServer's first ready pod",
		facts: routingFacts{current: 1, currentReady: true, revisions: map[int64]bool{1: true}, awaitingFirstPod: true},
		want:  routing{enabled: map[int64]bool{1: true}, waitingForPod: true},
	}, {
		name: "a served policy keeps its webhook whatever the pods say",
		facts: routingFacts{served: 1, switchedAt: long, current: 1, currentReady: true,
			revisions: map[int64]bool{1: true}, awaitingFirstPod: true},
		want: routing{target: 1, switchedAt: long, enabled: map[int64]bool{1: true}},
	}, {
		name:  "an update not Ready everywhere leaves the webhook on the served generation",
		facts: routingFacts{served: 1, switchedAt: long, current: 2, revisions: map[int64]bool{1: true, 2: true}},
		want:  routing{target: 1, switchedAt: long, enabled: map[int64]bool{1: true, 2: true}},
	}, {
		name:  "an update Ready everywhere moves the webhook; the old generation drains",
		facts: routingFacts{served: 1, switchedAt: long, current: 2, currentReady: true, revisions: map[int64]bool{1: true, 2: true}},
		want:  routing{target: 2, previous: 1, switchedAt: now, enabled: map[int64]bool{1: true, 2: true}, requeueAfter: drainDelay},
	}, {
		name: "during the drain the old generation stays enabled until drainDelay",
		facts: routingFacts{served: 2, previous: 1, switchedAt: before, current: 2, currentReady: true,
			revisions: map[int64]bool{1: true, 2: true}},
		want: routing{target: 2, previous: 1, switchedAt: before, enabled: map[int64]bool{1: true, 2: true}, requeueAfter: drainDelay - 3*time.Second},
	}, {
		name: "after the drain the old generation is disabled",
		facts: routingFacts{served: 2, previous: 1, switchedAt: long, current: 2, currentReady: true,
			revisions: map[int64]bool{1: true, 2: true}},
		want: routing{target: 2, previous: 1, switchedAt: long, enabled: map[int64]bool{2: true}},
	}, {
		name:  "a served generation whose revision was collected is not called",
		facts: routingFacts{served: 1, switchedAt: long, current: 2, revisions: map[int64]bool{2: true}},
		want:  routing{previous: 1, switchedAt: now, enabled: map[int64]bool{2: true}},
	}, {
		name:  "a served generation disabled by hand is not called, nor enabled again to drain",
		facts: routingFacts{served: 1, switchedAt: long, current: 2, revisions: map[int64]bool{1: false, 2: true}},
		want:  routing{previous: 1, switchedAt: now, enabled: map[int64]bool{2: true}},
	}, {
		name: "a rollback to an older generation, Ready everywhere, moves the webhook back",
		facts: routingFacts{served: 3, switchedAt: long, current: 4, currentReady: true,
			revisions: map[int64]bool{2: false, 3: true, 4: true}},
		want: routing{target: 4, previous: 3, switchedAt: now, enabled: map[int64]bool{3: true, 4: true}, requeueAfter: drainDelay},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideRouting(tc.facts, now)
			if got.target != tc.want.target || got.previous != tc.want.previous || !got.switchedAt.Equal(tc.want.switchedAt) ||
				got.requeueAfter != tc.want.requeueAfter || got.waitingForPod != tc.want.waitingForPod || !maps.Equal(got.enabled, tc.want.enabled) {
				t.Errorf("decideRouting =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}
