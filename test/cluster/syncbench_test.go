//go:build cluster

package cluster_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/policybuild"
)

// TestPolicySyncScale is the policy syncer's benchmark (docs/benchmarks.md):
// N ClusterAdmissionPolicies to two spokes, each a real API server, with
// the syncer a process of its own. It reports the time to converge from
// empty, the time for one update to reach both spokes (one update at a
// time), and the syncer's memory.
func TestPolicySyncScale(t *testing.T) {
	spec := os.Getenv("WARDEN_SYNC_BENCH")
	if spec == "" {
		t.Skip("set WARDEN_SYNC_BENCH=policies,updates (e.g. 1000,100) to measure")
	}
	var nPolicies, nUpdates int
	if _, err := fmt.Sscanf(spec, "%d,%d", &nPolicies, &nUpdates); err != nil || nPolicies < 1 || nUpdates < 1 || nUpdates > nPolicies {
		t.Fatalf("WARDEN_SYNC_BENCH=%q: want policies,updates", spec)
	}
	binary := filepath.Join(t.TempDir(), "policy-syncer")
	build := exec.Command("go", "build", "-o", binary, "./cmd/policy-syncer")
	build.Dir = policybuild.RepoRootForTest(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the policy syncer: %v\n%s", err, out)
	}
	hub, spokeA, spokeB := startSyncCluster(t), startSyncCluster(t), startSyncCluster(t)
	spokes := []*clustertest.Cluster{spokeA, spokeB}
	ctx := t.Context()
	mustCreate(t, hub.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: syncNamespace}})
	mustCreate(t, hub.Client, kubeconfigSecret(t, "spoke-a", spokeA))
	mustCreate(t, hub.Client, kubeconfigSecret(t, "spoke-b", spokeB))

	created := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				mustCreate(t, hub.Client, syncedPolicy(fmt.Sprintf("policy-%05d", i), map[string]string{"sync": "true"}, policiesv1.PolicyModeProtect))
			}
		})
	}
	for i := range nPolicies {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("created %d policies on the hub in %s", nPolicies, time.Since(created).Round(time.Millisecond))

	var logs bytes.Buffer
	cmd := exec.Command(binary, "--kubeconfig", writeKubeconfig(t, hub.Config), "--namespace", syncNamespace,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("syncer logs:\n%s", logs.String())
		}
	})

	count := func(c client.Client) int {
		var list policiesv1.ClusterAdmissionPolicyList
		if err := c.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	start := time.Now()
	mustCreate(t, hub.Client, &syncv1alpha1.PolicySync{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
		Spec: syncv1alpha1.PolicySyncSpec{
			PoliciesToSync: []syncv1alpha1.GroupVersionResource{{Group: capGVR.Group, Version: "v1", Resource: capGVR.Resource}},
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"sync": "true"}},
			Clusters: []syncv1alpha1.Cluster{
				{Name: "spoke-a", KubeconfigSecretRef: syncv1alpha1.SecretKeySelector{Name: "spoke-a"}},
				{Name: "spoke-b", KubeconfigSecretRef: syncv1alpha1.SecretKeySelector{Name: "spoke-b"}},
			},
		},
	})
	deadline := time.Now().Add(10 * time.Minute)
	for count(spokeA.Client) < nPolicies || count(spokeB.Client) < nPolicies {
		if time.Now().After(deadline) {
			t.Fatalf("the spokes hold %d and %d of %d policies", count(spokeA.Client), count(spokeB.Client), nPolicies)
		}
		time.Sleep(100 * time.Millisecond)
	}
	copied := time.Since(start)
	for {
		ps := policySync(t, hub.Client, "fleet")
		if c := meta.FindStatusCondition(ps.Status.Conditions, syncv1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the PolicySync never became Ready")
		}
		time.Sleep(100 * time.Millisecond)
	}
	ready := time.Since(start)
	t.Logf("converged from empty: every copy in both spokes after %s, Ready after %s", copied.Round(time.Millisecond), ready.Round(time.Millisecond))
	t.Logf("syncer memory after the first sync: %s", syncerMemory(t, cmd.Process.Pid))

	var latencies []time.Duration
	for i := range nUpdates {
		name := fmt.Sprintf("policy-%05d", i*(nPolicies/nUpdates))
		p := get(t, hub.Client, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
		module := fmt.Sprintf("registry://example.com/updated:v%d", i)
		p.Spec.Module = module
		begin := time.Now()
		if err := hub.Client.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		for _, spoke := range spokes {
			for {
				c := &policiesv1.ClusterAdmissionPolicy{}
				if err := spoke.Client.Get(ctx, client.ObjectKey{Name: name}, c); err != nil {
					t.Fatal(err)
				}
				if c.Spec.Module == module {
					break
				}
				if time.Since(begin) > time.Minute {
					t.Fatalf("update %d did not reach a spoke in a minute", i)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		latencies = append(latencies, time.Since(begin))
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		return latencies[int(p*float64(len(latencies)-1))].Round(time.Millisecond)
	}
	t.Logf("one update to both spokes, %d updates one at a time: p50 %s, p99 %s, max %s",
		len(latencies), pct(0.5), pct(0.99), latencies[len(latencies)-1].Round(time.Millisecond))
	t.Logf("syncer memory at the end: %s", syncerMemory(t, cmd.Process.Pid))
}

// syncerMemory reads VmRSS and VmHWM (the peak) of a process.
func syncerMemory(t *testing.T, pid int) string {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if ok && (key == "VmRSS" || key == "VmHWM") {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(value), " kB"))
			if err != nil {
				t.Fatalf("%s: %q", key, value)
			}
			values[key] = fmt.Sprintf("%.0f MiB", float64(kib)/1024)
		}
	}
	return fmt.Sprintf("RSS %s, peak %s", values["VmRSS"], values["VmHWM"])
}
