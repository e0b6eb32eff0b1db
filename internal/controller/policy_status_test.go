package controller

import (
	"errors"
	"testing"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

func TestDecidePolicyStatus(t *testing.T) {
	refused := errors.New("admission webhook denied the request")
	notReady := "generation 2 is not Ready on every one of the 3 replicas"
	pending := func(reason, message string) condition { return condition{reason: reason, message: message} }
	active := condition{ok: true, reason: "PolicyActive"}
	for _, tc := range []struct {
		name  string
		facts statusFacts
		want  policyStatus
	}{{
		name:  "a new policy not Ready everywhere is pending",
		facts: statusFacts{current: 2, replicas: 3},
		want: policyStatus{why: notReady, status: policiesv1.PolicyStatusPending,
			active: pending("PolicyServerNotReady", notReady), mode: policiesv1.PolicyModeStatusUnknown, requeueAfter: pendingRequeue},
	}, {
		name:  "a new policy waiting for the PolicyServer's first ready pod says so",
		facts: statusFacts{route: routing{waitingForPod: true}, current: 2, replicas: 3, policyServer: "default"},
		want: policyStatus{why: `no pod of PolicyServer "default" is ready yet`, status: policiesv1.PolicyStatusPending,
			active: pending("PolicyServerNotReady", `no pod of PolicyServer "default" is ready yet`),
			mode:   policiesv1.PolicyModeStatusUnknown, requeueAfter: pendingRequeue},
	}, {
		name:  "an active policy whose webhook is to be removed keeps its status until it is gone",
		facts: statusFacts{served: 1, current: 2, replicas: 3, wasActive: true, hasWebhook: true},
		want:  policyStatus{why: notReady, mode: policiesv1.PolicyModeStatusUnknown, requeueAfter: pendingRequeue},
	}, {
		name:  "a policy said active without a webhook is pending",
		facts: statusFacts{current: 2, replicas: 3, wasActive: true},
		want: policyStatus{why: notReady, status: policiesv1.PolicyStatusPending,
			active: pending("PolicyServerNotReady", notReady), mode: policiesv1.PolicyModeStatusUnknown, requeueAfter: pendingRequeue},
	}, {
		name: "a webhook written for the current generation makes the policy active in the mode served",
		facts: statusFacts{route: routing{target: 2}, served: 2, current: 2, replicas: 3, wasActive: true, hasWebhook: true,
			webhook: webhookWritten, mode: policiesv1.PolicyModeStatusMonitor},
		want: policyStatus{upToDate: true, status: policiesv1.PolicyStatusActive, active: active, mode: policiesv1.PolicyModeStatusMonitor},
	}, {
		name: "a webhook moved to the current generation looks again when the old one stops draining",
		facts: statusFacts{route: routing{target: 2, previous: 1, requeueAfter: drainDelay}, served: 1, current: 2, replicas: 3,
			wasActive: true, hasWebhook: true, webhook: webhookWritten, mode: policiesv1.PolicyModeStatusProtect},
		want: policyStatus{upToDate: true, status: policiesv1.PolicyStatusActive, active: active,
			mode: policiesv1.PolicyModeStatusProtect, requeueAfter: drainDelay},
	}, {
		name: "a webhook kept on an older generation: active, not up to date, looked at again",
		facts: statusFacts{route: routing{target: 1}, served: 1, current: 2, replicas: 3, wasActive: true, hasWebhook: true,
			webhook: webhookWritten, mode: policiesv1.PolicyModeStatusProtect},
		want: policyStatus{why: notReady, status: policiesv1.PolicyStatusActive, active: active,
			mode: policiesv1.PolicyModeStatusProtect, requeueAfter: pendingRequeue},
	}, {
		name:  "without a CA nothing is written: the status is left, the policy looked at again",
		facts: statusFacts{route: routing{target: 2}, current: 2, replicas: 3, webhook: webhookUntouched},
		want:  policyStatus{upToDate: true, requeueAfter: pendingRequeue},
	}, {
		name:  "a first webhook refused leaves the policy pending with the API server's answer",
		facts: statusFacts{route: routing{target: 2}, current: 2, replicas: 3, webhook: webhookRefused, writeErr: refused},
		want: policyStatus{why: "the webhook still calls generation 0: " + refused.Error(), status: policiesv1.PolicyStatusPending,
			active: pending("WebhookConfigurationFailed", refused.Error())},
	}, {
		name: "a move refused keeps the policy active through its old webhook, not up to date",
		facts: statusFacts{route: routing{target: 2, previous: 1}, served: 1, current: 2, replicas: 3, wasActive: true, hasWebhook: true,
			webhook: webhookRefused, writeErr: refused},
		want: policyStatus{why: "the webhook still calls generation 1: " + refused.Error()},
	}, {
		name: "a rewrite of the generation served, refused, leaves it up to date",
		facts: statusFacts{route: routing{target: 2}, served: 2, current: 2, replicas: 3, wasActive: true, hasWebhook: true,
			webhook: webhookRefused, writeErr: refused},
		want: policyStatus{upToDate: true},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decidePolicyStatus(tc.facts); got != tc.want {
				t.Errorf("decidePolicyStatus =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}
