//go:build cluster

package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/controller"
	"github.com/wardenhq/warden/internal/testkit"
)

// startPolicyServers runs the replicas of the PolicyServer called name as
// local processes from its StatefulSet, behind a round-robin proxy on port
// (the URL the controller's --dev-policy-server-url names), until the test
// ends.
func startPolicyServers(t *testing.T, cl *clustertest.Cluster, port int, name string) *podRunner {
	t.Helper()
	runner := newPodRunner(t, cl.Client, writeKubeconfig(t, cl.Config), name)
	newRoundRobin(t, runner, port)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runner.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return runner
}

// startLifecycle starts a cluster with the deployments namespace, the
// controller (its options changed by configure, when not nil) calling the
// policy servers through a round-robin proxy, and the runner of the
// replicas of PolicyServer "default", which the test creates.
func startLifecycle(t *testing.T, configure func(*controller.Options)) (*clustertest.Cluster, *podRunner) {
	t.Helper()
	cl := startCluster(t)
	mustCreate(t, cl.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardenNamespace}})
	port := testkit.FreePort(t)
	opts := controllerOptions(t)
	opts.PolicyServerURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	if configure != nil {
		configure(&opts)
	}
	startController(t, cl, opts)
	return cl, startPolicyServers(t, cl, port, "default")
}

// celLabelPolicy is a CEL policy rejecting pods labelled "blocked" with
// message.
func celLabelSettings(message string) runtime.RawExtension {
	return runtime.RawExtension{Raw: fmt.Appendf(nil,
		`{"validations":[{"expression":"!has(object.metadata.labels) || !('blocked' in object.metadata.labels)","message":%q}]}`, message)}
}

// TestPolicyLifecycle follows a policy through RFC 000's lifecycle on two,
// then three, then one policy server replicas, with requests going through
// the API server all along: each update reaches the webhook once both
// replicas serve it, broken updates leave the last good generation
// serving and say why on the policy, old revisions are collected, a
// rollback brings back an old spec, and no request fails and no replica
// restarts on the way.
func TestPolicyLifecycle(t *testing.T) {
	ctx := t.Context()
	cl, runner := startLifecycle(t, func(o *controller.Options) { o.RevisionHistoryLimit = 2 })
	c := cl.Client
	mustCreate(t, c, &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 2},
	})

	policy := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "lifecycle"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Module: "builtin://cel", Rules: podCreateRules(),
			Settings: celLabelSettings("gen-1"),
		}},
	}
	mustCreate(t, c, policy)
	waitServedGeneration(t, c, policy, 1)
	assertDenied(t, c, "gen-1")
	assertReplicaConditions(t, c, policy, 2)

	// Requests go through the API server until the end of the updates;
	// each must be denied by the policy, whatever generation answers.
	load := startAdmissionLoad(t, c)
	time.Sleep(5 * time.Second) // latencies without updates, for comparison
	load.setPhase("during updates")

	update := func(change func(*policiesv1.ClusterAdmissionPolicy)) int64 {
		t.Helper()
		var gen int64
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := get(t, c, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy.Name}})
			change(p)
			err := c.Update(ctx, p)
			gen = p.Generation
			return err
		})
		if err != nil {
			t.Fatalf("updating the policy: %v", err)
		}
		return gen
	}

	gen := update(func(p *policiesv1.ClusterAdmissionPolicy) { p.Spec.Settings = celLabelSettings("gen-2") })
	waitServedGeneration(t, c, policy, gen)
	assertDenied(t, c, "gen-2")
	good := gen

	broken := []struct {
		name   string
		change func(*policiesv1.ClusterAdmissionPolicy)
		reason string
	}{
		{"a missing module", func(p *policiesv1.ClusterAdmissionPolicy) {
			p.Spec.Module = "file:///nonexistent/policy.wasm"
		}, "PullError"},
		{"invalid settings", func(p *policiesv1.ClusterAdmissionPolicy) {
			p.Spec.Module = "builtin://cel"
			p.Spec.Settings = runtime.RawExtension{Raw: []byte(`{"validations":[{"expression":"nonsense((("}]}`)}
		}, "SettingsInvalid"},
		{"a registry that is down", func(p *policiesv1.ClusterAdmissionPolicy) {
			p.Spec.Module = fmt.Sprintf("registry://127.0.0.1:%d/policies/gone:v1", testkit.FreePort(t))
		}, "PullError"},
	}
	for _, b := range broken {
		gen := update(b.change)
		eventually(t, b.name+" shows "+b.reason+" on the policy", func() bool {
			p := get(t, c, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy.Name}})
			cond := policiesv1.FindPolicyStatusCondition(p.Status.Conditions, policiesv1.PolicyInitialized, nil)
			return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == b.reason && cond.ObservedGeneration == gen
		})
		if got := servedGeneration(t, c, policy); got != good {
			t.Errorf("after %s (generation %d), the webhook calls generation %d, want %d", b.name, gen, got, good)
		}
		assertDenied(t, c, "gen-2")
	}

	gen = update(func(p *policiesv1.ClusterAdmissionPolicy) {
		p.Spec.Module = "builtin://cel"
		p.Spec.Settings = celLabelSettings("gen-fixed")
	})
	waitServedGeneration(t, c, policy, gen)
	assertDenied(t, c, "gen-fixed")

	// Rollback to the second generation: a new generation with its spec.
	update(func(p *policiesv1.ClusterAdmissionPolicy) {
		p.Annotations = map[string]string{policiesv1.RollbackAnnotation: strconv.FormatInt(good, 10)}
	})
	start := time.Now()
	eventually(t, "the rollback is served", func() bool {
		p := get(t, c, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy.Name}})
		_, annotated := p.Annotations[policiesv1.RollbackAnnotation]
		return !annotated && p.Generation > gen && servedGeneration(t, c, policy) == p.Generation
	})
	t.Logf("rollback served by every replica %s after the annotation", time.Since(start).Round(10*time.Millisecond))
	assertDenied(t, c, "gen-2")

	// A rollback to a generation that has no revision is refused: the
	// annotation goes, the policy stays, and an Event says why.
	before := get(t, c, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy.Name}}).Generation
	update(func(p *policiesv1.ClusterAdmissionPolicy) {
		p.Annotations = map[string]string{policiesv1.RollbackAnnotation: "999"}
	})
	eventually(t, "the refused rollback is reported in an Event", func() bool {
		var list eventsv1.EventList
		if err := c.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == policy.Name && e.Reason == "RollbackRefused" && e.Type == corev1.EventTypeWarning &&
				strings.Contains(e.Note, `generation "999"`)
		})
	})
	if p := get(t, c, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy.Name}}); p.Generation != before ||
		p.Annotations[policiesv1.RollbackAnnotation] != "" {
		t.Errorf("after a refused rollback: generation %d (was %d), annotations %v", p.Generation, before, p.Annotations)
	}

	// Twenty updates in all: the last ones in a row.
	last := ""
	for i := range 13 {
		last = fmt.Sprintf("gen-row-%d", i)
		waitServedGeneration(t, c, policy, update(func(p *policiesv1.ClusterAdmissionPolicy) { p.Spec.Settings = celLabelSettings(last) }))
	}
	assertDenied(t, c, last)

	failed, total := load.stop()
	load.logLatencies()
	if failed > 0 || total == 0 {
		t.Errorf("%d of %d requests through the API server failed during the updates, want 0 of some", failed, total)
	}
	for i := range 2 {
		if n := runner.restarts(i); n != 0 {
			t.Errorf("replica %d restarted %d times during the updates, want 0", i, n)
		}
	}
	eventually(t, "at most 2 disabled revisions are kept", func() bool {
		enabled, disabled := countRevisions(t, c, policy)
		return disabled <= 2 && enabled >= 1
	})

	// Scale up: the new replica loads the served generation and shows on
	// the policy; scale down: the removed replicas' conditions go.
	scale := func(n int32) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var ps policiesv1.PolicyServer
			if err := c.Get(ctx, client.ObjectKey{Name: "default"}, &ps); err != nil {
				return err
			}
			ps.Spec.Replicas = n
			return c.Update(ctx, &ps)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	scale(3)
	eventually(t, "the third replica reports Ready", func() bool {
		return replicaConditions(t, c, policy) == "0:True,1:True,2:True"
	})
	scale(1)
	eventually(t, "the removed replicas' conditions are gone", func() bool {
		return replicaConditions(t, c, policy) == "0:True"
	})
	// The API server may still hold a keep-alive connection, through the
	// test's TCP proxy, to a replica that is shutting down: a request sent
	// on it as the replica closes it fails with EOF (seen once in four
	// runs). What is checked here is that the replica left serves the last
	// generation; admissions during a scale-down are counted on a real node
	// by test/e2e (TestE2E/scaling).
	eventually(t, "the replica left denies with the last generation", func() bool {
		err := c.Create(ctx, blockedPod("blocked"), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), last)
	})

	// Deleting the policy deletes its revisions and its webhook.
	if err := c.Delete(ctx, get(t, c, policy)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the revisions and the webhook are gone", func() bool {
		enabled, disabled := countRevisions(t, c, policy)
		err := c.Get(ctx, client.ObjectKey{Name: "clusterwide-lifecycle"}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
		return enabled+disabled == 0 && apierrors.IsNotFound(err)
	})
	// Admitted once the API server's informer of webhook configurations
	// has seen the deletion too, a moment after the object is gone.
	eventually(t, "the API server admits the blocked pod", func() bool {
		return c.Create(ctx, blockedPod("after-delete")) == nil
	})
}

func blockedPod(name string) *corev1.Pod {
	p := pod("default", name, false)
	p.Labels = map[string]string{"blocked": "true"}
	return p
}

// assertDenied checks that the API server refuses a blocked pod with
// message.
func assertDenied(t *testing.T, c client.Client, message string) {
	t.Helper()
	err := c.Create(t.Context(), blockedPod("blocked"), client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), message) {
		t.Fatalf("creating a blocked pod: %v, want a denial with %q", err, message)
	}
}

// servedGeneration is the generation the policy's webhook calls, from its
// URL, or 0 without a webhook.
func servedGeneration(t *testing.T, c client.Client, p policiesv1.Policy) int64 {
	t.Helper()
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(t.Context(), client.ObjectKey{Name: p.GetUniqueName()}, &cfg); err != nil || len(cfg.Webhooks) != 1 {
		return 0
	}
	u := cfg.Webhooks[0].ClientConfig.URL
	if u == nil {
		return 0
	}
	prefix := "/validate/" + p.GetUniqueName() + "/"
	i := strings.LastIndex(*u, prefix)
	if i < 0 {
		return 0
	}
	g, _ := strconv.ParseInt((*u)[i+len(prefix):], 10, 64)
	return g
}

// waitServedGeneration waits until the policy's webhook calls generation
// gen, and logs how long that took (docs/benchmarks.md quotes it).
func waitServedGeneration(t *testing.T, c client.Client, p policiesv1.Policy, gen int64) {
	t.Helper()
	start := time.Now()
	eventually(t, fmt.Sprintf("the webhook of %s calls generation %d", p.GetName(), gen), func() bool {
		return servedGeneration(t, c, p) == gen
	})
	t.Logf("generation %d of %s served by every replica %s after the update", gen, p.GetName(), time.Since(start).Round(10*time.Millisecond))
}

// replicaConditions lists the Ready conditions of the policy as
// "replica:status,...", in replica order.
func replicaConditions(t *testing.T, c client.Client, p *policiesv1.ClusterAdmissionPolicy) string {
	t.Helper()
	got := get(t, c, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: p.Name}})
	var out []string
	for i := range int32(8) {
		if cond := policiesv1.FindPolicyStatusCondition(got.Status.Conditions, policiesv1.PolicyReady, &i); cond != nil {
			out = append(out, fmt.Sprintf("%d:%s", i, cond.Status))
		}
	}
	return strings.Join(out, ",")
}

func assertReplicaConditions(t *testing.T, c client.Client, p *policiesv1.ClusterAdmissionPolicy, replicas int) {
	t.Helper()
	var want []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("%d:True", i))
	}
	eventually(t, "every replica reports Ready on the policy", func() bool {
		return replicaConditions(t, c, p) == strings.Join(want, ",")
	})
}

// countRevisions counts the policy's PolicyRevisions.
func countRevisions(t *testing.T, c client.Client, p policiesv1.Policy) (enabled, disabled int) {
	t.Helper()
	var list policiesv1.PolicyRevisionList
	if err := c.List(t.Context(), &list, client.InNamespace(wardenNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, rev := range list.Items {
		if rev.Spec.ObjectReference.Name != p.GetName() {
			continue
		}
		if rev.Spec.Enabled {
			enabled++
		} else {
			disabled++
		}
	}
	return enabled, disabled
}

// admissionLoad creates blocked pods (dry run) through the API server in a
// loop, counting the answers that are not the policy's denial.
type admissionLoad struct {
	cancel        context.CancelFunc
	wg            sync.WaitGroup
	failed, total atomic.Int64
	t             *testing.T

	mu           sync.Mutex
	firstFailure string
	phase        string                     // what the latencies recorded now are of
	latencies    map[string][]time.Duration // by phase
}

// setPhase files the latencies measured from now on under phase.
func (l *admissionLoad) setPhase(phase string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phase = phase
}

// logLatencies logs the median and 99th percentile of each phase
// (docs/benchmarks.md quotes them).
func (l *admissionLoad) logLatencies() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for phase, ds := range l.latencies {
		slices.Sort(ds)
		l.t.Logf("admission through the API server, %s: %d requests, p50 %s, p99 %s", phase, len(ds),
			ds[len(ds)/2].Round(100*time.Microsecond), ds[len(ds)*99/100].Round(100*time.Microsecond))
	}
}

func startAdmissionLoad(t *testing.T, c client.Client) *admissionLoad {
	ctx, cancel := context.WithCancel(t.Context())
	l := &admissionLoad{cancel: cancel, t: t, phase: "no update", latencies: map[string][]time.Duration{}}
	for range 2 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				err := c.Create(ctx, blockedPod("under-load"), client.DryRunAll)
				if ctx.Err() != nil {
					return
				}
				l.mu.Lock()
				l.latencies[l.phase] = append(l.latencies[l.phase], time.Since(start))
				l.mu.Unlock()
				l.total.Add(1)
				if err == nil || !strings.Contains(err.Error(), "denied the request") {
					l.failed.Add(1)
					l.mu.Lock()
					if l.firstFailure == "" {
						l.firstFailure = fmt.Sprint(err)
					}
					l.mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return l
}

// stop ends the load and returns how many requests failed, of how many.
func (l *admissionLoad) stop() (failed, total int64) {
	l.cancel()
	l.wg.Wait()
	if l.firstFailure != "" {
		l.t.Logf("first failed request: %s", l.firstFailure)
	}
	return l.failed.Load(), l.total.Load()
}
