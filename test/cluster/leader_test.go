//go:build cluster

package cluster_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/policybuild"
)

// TestLeaderKilledMidInitialisation kills the replica holding the
// policy server's Lease while it downloads a policy's module (the download
// is held by the test's HTTP server), and checks that another holder takes
// the Lease and finishes: the revision is Initialized, every replica
// reports Ready, the webhook moves to the generation and the API server
// admits and denies as the policy says.
func TestLeaderKilledMidInitialisation(t *testing.T) {
	module, err := os.ReadFile(policybuild.ForTest(t, "../../examples/policies/pod-privileged"))
	if err != nil {
		t.Fatal(err)
	}
	gate := newGatedModule(module)
	srv := httptest.NewServer(gate)
	t.Cleanup(srv.Close)
	t.Cleanup(gate.open) // before srv.Close, which waits for the handlers

	cl, runner := startLifecycle(t, nil)
	c := cl.Client
	host := srv.Listener.Addr().String() // 127.0.0.1:<port>, as sources.yml names it
	mustCreate(t, c, &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: policiesv1.PolicyServerSpec{
			Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 2,
			InsecureSources: []string{host},
		},
	})
	// Both replicas run, so both take part in the election.
	eventually(t, "both replicas are ready", func() bool { return runner.readyReplicas() == 2 })

	policy := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-privileged"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default",
			Module:       "http://" + host + "/policies/pod-privileged.wasm",
			Rules:        podCreateRules(),
		}},
	}
	mustCreate(t, c, policy)

	// Only the leader downloads before the revision is Initialized: the
	// first download is the initialisation under way.
	select {
	case <-gate.arrived:
	case <-time.After(90 * time.Second):
		t.Fatal("no replica started downloading the module: the initialisation never began, so no leader could be killed in the middle of it")
	}
	lease := "policy-server-default"
	leader := leaseHolder(t, c, lease)
	ord, ok := holderOrdinal(leader, "policy-server-default")
	if !ok {
		t.Fatalf("Lease %s is held by %q while the module downloads, want policy-server-default-<ordinal>_<suffix>", lease, leader)
	}
	if cond := initialized(t, c, policy); cond != nil {
		t.Fatalf("the revision has Initialized %s (%s) while its module is still held back", cond.Status, cond.Message)
	}
	t.Logf("replica %d (%s) holds the Lease and is downloading the module: killing it", ord, leader)
	killed := time.Now()
	runner.kill(ord)
	select {
	case <-gate.abandoned:
	case <-time.After(30 * time.Second):
		t.Fatalf("the download of the killed leader, replica %d, did not end: the kill did not interrupt the initialisation", ord)
	}
	gate.open()

	eventually(t, "another identity holds the Lease", func() bool {
		h := leaseHolder(t, c, lease)
		return h != "" && h != leader
	})
	t.Logf("Lease held by %s %s after the kill", leaseHolder(t, c, lease), time.Since(killed).Round(10*time.Millisecond))
	eventually(t, "the revision is Initialized", func() bool {
		cond := initialized(t, c, policy)
		return cond != nil && cond.Status == metav1.ConditionTrue
	})
	t.Logf("revision Initialized %s after the kill: %s", time.Since(killed).Round(10*time.Millisecond), initialized(t, c, policy).Message)
	waitServedGeneration(t, c, policy, 1)
	assertReplicaConditions(t, c, policy, 2)
	waitActive(t, c, policy)

	assertPrivilegedDenied(t, c)

	if n := runner.restarts(ord); n != 1 {
		t.Errorf("the killed replica %d restarted %d times, want 1", ord, n)
	}
	if n := runner.restarts(1 - ord); n != 0 {
		t.Errorf("replica %d restarted %d times, want 0", 1-ord, n)
	}
	if n := gate.downloads.Load(); n < 2 {
		t.Errorf("%d downloads of the module completed, want at least 2 (the new leader's, the other replica's)", n)
	}
}

// TestLeaderReleasesLeaseOnShutdown stops the replica holding the policy
// server's Lease as the kubelet does (SIGTERM) and checks that it gave the
// Lease up before exiting: a replica that exits holding it keeps the next
// leader, and every revision created meanwhile, waiting out the Lease.
func TestLeaderReleasesLeaseOnShutdown(t *testing.T) {
	cl, runner := startLifecycle(t, nil)
	c := cl.Client
	mustCreate(t, c, &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 1},
	})
	eventually(t, "the replica is ready", func() bool { return runner.readyReplicas() == 1 })
	lease := "policy-server-default"
	eventually(t, "the replica holds the Lease", func() bool { return leaseHolder(t, c, lease) != "" })
	leader := leaseHolder(t, c, lease)

	exited := runner.terminate(0)
	if exited == nil {
		t.Fatal("no process runs for replica 0")
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("the replica did not exit within a minute of SIGTERM")
	}
	// The runner restarts the replica a second after it exited; the Lease
	// read now is the one the old process left.
	if h := leaseHolder(t, c, lease); h == leader {
		t.Errorf("the Lease is still held by %s, which has exited: it was not released on shutdown", leader)
	}
}

// gatedModule serves a module over HTTP, holding every download until
// open is called; the first one is also let go when its client goes away,
// which abandoned tells.
type gatedModule struct {
	module    []byte
	arrived   chan struct{} // closed when the first download arrives
	abandoned chan struct{} // closed when the first download's client went away before open
	release   chan struct{} // closed by open
	first     atomic.Bool
	once      sync.Once
	downloads atomic.Int32 // served in full
}

func newGatedModule(module []byte) *gatedModule {
	return &gatedModule{module: module, arrived: make(chan struct{}), abandoned: make(chan struct{}), release: make(chan struct{})}
}

// open lets the downloads held and to come through. It may be called more
// than once.
func (g *gatedModule) open() { g.once.Do(func() { close(g.release) }) }

func (g *gatedModule) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	first := g.first.CompareAndSwap(false, true)
	if first {
		close(g.arrived)
	}
	select {
	case <-g.release:
	case <-r.Context().Done():
		if first {
			close(g.abandoned)
		}
		return
	}
	w.Header().Set("Content-Type", "application/wasm")
	w.Header().Set("Content-Length", strconv.Itoa(len(g.module)))
	if _, err := w.Write(g.module); err == nil {
		g.downloads.Add(1)
	}
}

// leaseHolder is the holder identity of the Lease called name in
// wardenNamespace, or "" when there is none.
func leaseHolder(t *testing.T, c client.Client, name string) string {
	t.Helper()
	var l coordinationv1.Lease
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: wardenNamespace, Name: name}, &l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// holderOrdinal is the ordinal of the StatefulSet's pod a Lease holder
// identity (<pod name>_<suffix>) names.
func holderOrdinal(identity, statefulSet string) (int, bool) {
	podName, _, ok := strings.Cut(identity, "_")
	if !ok {
		return 0, false
	}
	rest, ok := strings.CutPrefix(podName, statefulSet+"-")
	if !ok {
		return 0, false
	}
	ord, err := strconv.Atoi(rest)
	return ord, err == nil && ord >= 0
}

// initialized is the Initialized condition of the policy's enabled
// revision, or nil when it has none yet.
func initialized(t *testing.T, c client.Client, p policiesv1.Policy) *policiesv1.PolicyStatusCondition {
	t.Helper()
	var list policiesv1.PolicyRevisionList
	if err := c.List(t.Context(), &list, client.InNamespace(wardenNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, rev := range list.Items {
		if rev.Spec.ObjectReference.Name == p.GetName() && rev.Spec.Enabled {
			return policiesv1.FindPolicyStatusCondition(rev.Status.Conditions, policiesv1.PolicyInitialized, nil)
		}
	}
	return nil
}
