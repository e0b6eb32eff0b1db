//go:build cluster

package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/testkit"
)

// TestStartPastUnloadableRevisions starts a policy server replica whose
// PolicyServer has, beside a good policy, two revisions it cannot load:
// one of a policy whose module's registry is gone (a loopback port nothing
// listens on) since a former leader initialised it, and one that outlived
// its policy (as an uninstall left it, issue 29), pointing at another gone
// registry. The replica must start and stay up (no restart), serve the
// good policy through the API server, and report each bad revision
// LoadError with its cause on the revision, and on its policy when it has
// one.
func TestStartPastUnloadableRevisions(t *testing.T) {
	ctx := t.Context()
	cl, runner := startLifecycle(t, nil)
	c := cl.Client
	// No replica runs until the broken revisions are in place.
	mustCreate(t, c, &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 0},
	})

	goneRegistry := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	unfetchable := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "unfetchable"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Module: "registry://" + goneRegistry + "/policies/gone:v1", Rules: podCreateRules(),
		}},
	}
	mustCreate(t, c, unfetchable)
	unfetchableRev := "clusterwide-unfetchable-1"
	eventually(t, "the controller creates "+unfetchableRev, func() bool {
		err := c.Get(ctx, client.ObjectKey{Namespace: wardenNamespace, Name: unfetchableRev}, &policiesv1.PolicyRevision{})
		return err == nil
	})
	// As if a former leader had initialised it while its registry was up.
	markInitialized(t, c, unfetchableRev)

	// A revision whose policy is gone, as an uninstall left it.
	orphanRegistry := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	orphanPolicy := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan", Generation: 1},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Module: "registry://" + orphanRegistry + "/policies/gone:v1", Rules: podCreateRules(),
		}},
	}
	data, err := policiesv1.NewPolicyRevisionData(orphanPolicy)
	if err != nil {
		t.Fatal(err)
	}
	orphanRev := "clusterwide-orphan-1"
	mustCreate(t, c, &policiesv1.PolicyRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: wardenNamespace, Name: orphanRev,
			Labels: map[string]string{policiesv1.PolicyServerLabel: "default"}},
		Spec: policiesv1.PolicyRevisionSpec{
			ObjectReference: policiesv1.NewPolicyReference(orphanPolicy), PolicyGeneration: 1, Enabled: true, Data: data,
		},
	})
	markInitialized(t, c, orphanRev)

	good := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "good"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Module: "builtin://cel", Rules: podCreateRules(),
			Settings: celLabelSettings("served beside the broken revisions"),
		}},
	}
	mustCreate(t, c, good)

	scalePolicyServer(t, c, "default", 1)
	eventually(t, "the replica is ready", func() bool { return runner.readyReplicas() == 1 })
	waitServedGeneration(t, c, good, 1)
	assertDenied(t, c, "served beside the broken revisions")

	for _, tc := range []struct{ revision, registry string }{
		{unfetchableRev, goneRegistry},
		{orphanRev, orphanRegistry},
	} {
		want := "cannot connect to " + tc.registry + ": connection refused"
		eventually(t, tc.revision+" reports LoadError on replica 0", func() bool {
			var rev policiesv1.PolicyRevision
			if err := c.Get(ctx, client.ObjectKey{Namespace: wardenNamespace, Name: tc.revision}, &rev); err != nil {
				return false
			}
			return isLoadError(rev.Status.Conditions, want)
		})
	}
	eventually(t, "the LoadError shows on the unfetchable policy", func() bool {
		p := get(t, c, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: unfetchable.Name}})
		return isLoadError(p.Status.Conditions, "cannot connect to "+goneRegistry+": connection refused")
	})
	if g := servedGeneration(t, c, unfetchable); g != 0 {
		t.Errorf("the unfetchable policy's webhook calls generation %d, want no webhook", g)
	}
	if n := runner.restarts(0); n != 0 {
		t.Errorf("the replica restarted %d times, want 0", n)
	}
	out := runner.output(0)
	for _, unwanted := range []string{"policy server failed to start", "log.SetLogger(...) was never called"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("the replica's output says %q:\n%s", unwanted, out)
		}
	}
}

// markInitialized sets the Initialized condition of PolicyRevision name to
// True, as the leader does once it has pulled, compiled and validated it.
func markInitialized(t *testing.T, c client.Client, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var rev policiesv1.PolicyRevision
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: wardenNamespace, Name: name}, &rev); err != nil {
			return err
		}
		policiesv1.SetPolicyStatusCondition(&rev.Status.Conditions, policiesv1.PolicyStatusCondition{
			Type: policiesv1.PolicyInitialized, Status: metav1.ConditionTrue, Reason: "PolicyInitialized",
			Message: "initialised by a former leader, while its registry was up",
		})
		return c.Status().Update(t.Context(), &rev)
	})
	if err != nil {
		t.Fatalf("marking %s Initialized: %v", name, err)
	}
}

// scalePolicyServer sets the replicas of PolicyServer name.
func scalePolicyServer(t *testing.T, c client.Client, name string, replicas int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var ps policiesv1.PolicyServer
		if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &ps); err != nil {
			return err
		}
		ps.Spec.Replicas = replicas
		return c.Update(t.Context(), &ps)
	})
	if err != nil {
		t.Fatalf("scaling PolicyServer %s to %d: %v", name, replicas, err)
	}
}

// isLoadError reports whether conds hold replica 0's Ready condition as
// False, reason LoadError, with a message containing cause.
func isLoadError(conds []policiesv1.PolicyStatusCondition, cause string) bool {
	replica := int32(0)
	cond := policiesv1.FindPolicyStatusCondition(conds, policiesv1.PolicyReady, &replica)
	return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "LoadError" && strings.Contains(cond.Message, cause)
}
