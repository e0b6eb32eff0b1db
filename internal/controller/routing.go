package controller

import (
	"fmt"
	"time"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

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

// webhookWrite is what became of the write of a policy's webhook
// configuration, when its routing called for one.
type webhookWrite int

const (
	// webhookUntouched: nothing was written, because there is no CA yet
	// or an error came before the write (reading the CA, decoding the
	// revision).
	webhookUntouched webhookWrite = iota
	// webhookWritten: the webhook configuration calls the routing's
	// target.
	webhookWritten
	// webhookRefused: the API server refused the write; the webhook, if
	// any, still calls the generation it called.
	webhookRefused
)

// statusFacts is what decides the status of a policy that names an
// existing PolicyServer, once its routing is decided.
type statusFacts struct {
	// route is the routing decided (decideRouting); served is the
	// generation the webhook called before it (0: none).
	route  routing
	served int64
	// current is the policy's generation, replicas the number of replicas
	// that may answer its webhook (replicasServing), policyServer the
	// PolicyServer's name.
	current      int64
	replicas     int32
	policyServer string
	// wasActive says the policy's status was Active, hasWebhook that a
	// webhook configuration of the policy existed.
	wasActive, hasWebhook bool
	// webhook is what became of the webhook configuration when
	// route.target is not 0, with the API server's error when it was
	// refused and the mode of the revision served when it was written.
	webhook  webhookWrite
	writeErr error
	mode     policiesv1.PolicyModeStatus
}

// condition is the status, reason and message of one of a policy's
// conditions.
type condition struct {
	ok              bool
	reason, message string
}

// policyStatus is the decision: what the policy's status says and when
// to look again.
type policyStatus struct {
	// upToDate is whether the webhook calls the current generation: the
	// PolicyServerConfigurationUpToDate and PolicyUniquelyReachable
	// conditions, the latter with why as its message.
	upToDate bool
	why      string
	// status and active, the PolicyActive condition, are left as they
	// are when status is empty.
	status policiesv1.PolicyStatusEnum
	active condition
	// mode is the policy mode served; empty leaves it as it is.
	mode policiesv1.PolicyModeStatus
	// requeueAfter is when to look again (0: only when a watch wakes the
	// reconciler).
	requeueAfter time.Duration
}

// decidePolicyStatus says what a policy's status reports: Active once its
// webhook calls a generation, Pending while it has none and did not have
// one; a policy active through the webhook of an older generation stays
// active, its conditions saying the webhook is not up to date and why. A
// policy that is not up to date is looked at again after pendingRequeue,
// or when its old generation stops draining.
func decidePolicyStatus(f statusFacts) policyStatus {
	upToDate := f.route.target == f.current
	s := policyStatus{upToDate: upToDate}
	switch {
	case f.route.waitingForPod:
		s.why = fmt.Sprintf("no pod of PolicyServer %q is ready yet", f.policyServer)
	case !upToDate:
		s.why = fmt.Sprintf("generation %d is not Ready on every one of the %d replicas", f.current, f.replicas)
	}
	keepsActive := f.wasActive && f.hasWebhook
	if f.route.target == 0 {
		s.mode = policiesv1.PolicyModeStatusUnknown
		if !keepsActive {
			s.status = policiesv1.PolicyStatusPending
			s.active = condition{reason: "PolicyServerNotReady", message: s.why}
		}
		s.requeueAfter = pendingRequeue
		return s
	}
	switch f.webhook {
	case webhookUntouched:
		s.requeueAfter = pendingRequeue
	case webhookRefused:
		// The webhook still calls the generation it called.
		s.upToDate = f.served == f.current
		s.why = ""
		if !s.upToDate {
			s.why = fmt.Sprintf("the webhook still calls generation %d: %v", f.served, f.writeErr)
		}
		if !keepsActive {
			s.status = policiesv1.PolicyStatusPending
			s.active = condition{reason: "WebhookConfigurationFailed", message: f.writeErr.Error()}
		}
	case webhookWritten:
		s.mode = f.mode
		s.status = policiesv1.PolicyStatusActive
		s.active = condition{ok: true, reason: "PolicyActive"}
		s.requeueAfter = f.route.requeueAfter
		if !upToDate && s.requeueAfter == 0 {
			s.requeueAfter = pendingRequeue
		}
	}
	return s
}
