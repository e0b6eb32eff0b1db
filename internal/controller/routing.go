package controller

import "time"

// routingFacts is what decides which generation of a policy its webhook
// calls: where the webhook points now (its annotations, servedGeneration),
// and the state of the policy's revisions and PolicyServer.
type routingFacts struct {
	// served and previous are the generations the webhook calls and
	// called before its last switch (0: none), switchedAt when it switched.
	served, previous int64
	switchedAt       time.Time
	// current is the policy's generation; currentReady says whether every
	// replica that may answer the webhook reports it Ready (readyOnAll).
	current      int64
	currentReady bool
	// revisions holds, by generation, whether each existing PolicyRevision
	// of the policy is enabled.
	revisions map[int64]bool
	// awaitingFirstPod says that no pod of the PolicyServer is ready yet
	// (awaitingFirstReadyPod), when the webhook would reach it through its
	// Service.
	awaitingFirstPod bool
}

// routing is the decision: the generation the webhook calls (0: no
// webhook), the routing annotations to write, the revisions to keep
// enabled, and when to look again.
type routing struct {
	target, previous int64
	switchedAt       time.Time
	// enabled are the generations whose revisions the replicas keep
	// serving; every other revision is disabled.
	enabled map[int64]bool
	// requeueAfter is when the previous generation stops being served.
	requeueAfter time.Duration
	// waitingForPod says the webhook is withheld until the PolicyServer's
	// first pod is ready.
	waitingForPod bool
}

// decideRouting moves the webhook to the current generation once every
// replica serves it (RFC 000) and otherwise leaves it where it is. A
// generation whose revision is gone, or was disabled by hand, is not safe
// to call: then there is no webhook. Neither is there one before the
// PolicyServer's first pod is ready: the webhook fails closed. After a
// switch the generation called before stays enabled for drainDelay, for
// the requests already on their way to it, unless it was disabled by hand
// or collected.
func decideRouting(f routingFacts, now time.Time) routing {
	target := f.served
	if f.currentReady {
		target = f.current
	}
	if enabled, exists := f.revisions[target]; !exists || !enabled && target != f.current {
		target = 0
	}
	r := routing{target: target, previous: f.previous, switchedAt: f.switchedAt}
	if f.served == 0 && f.awaitingFirstPod {
		r.target, r.waitingForPod = 0, true
	}
	if r.target != f.served {
		r.previous, r.switchedAt = f.served, now
	}
	r.enabled = map[int64]bool{f.current: true}
	if r.target != 0 {
		r.enabled[r.target] = true
	}
	if r.previous != 0 && r.previous != r.target && f.revisions[r.previous] {
		if wait := drainDelay - now.Sub(r.switchedAt); wait > 0 {
			r.enabled[r.previous] = true
			r.requeueAfter = wait
		}
	}
	return r
}
