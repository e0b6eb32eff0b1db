//go:build cluster

package dashboards

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/testkit"
)

// clusterReplica is the pod name of the policy server that runs in
// cluster mode (RFC 000), replica 1 of the PolicyServer default: it serves
// the PolicyRevisions the controller makes of the policies
// startController creates, each under its generation, as a replica in a
// cluster does. The standalone policy server stands in for replica 0.
const clusterReplica = "policy-server-default-1"

// startClusterReplica runs policyserver.Main in cluster mode against the
// test's API server, and returns the address of its /metrics once it
// serves the first generation of the controller's CEL policies (the
// third, pulled from ghcr.io, may fail: it does not matter here).
func startClusterReplica(t *testing.T, cfg *rest.Config) net.Addr {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, clustertest.Kubeconfig(t, cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	readiness := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: testkit.FreePort(t)}
	env := map[string]string{"KUBECONFIG": kubeconfig, "HOME": dir}
	args := []string{"--addr", "127.0.0.1", "--port", fmt.Sprint(testkit.FreePort(t)), "--readiness-probe-port", fmt.Sprint(readiness.Port),
		"--policy-server-name", "default", "--pod-name", clusterReplica, "--pod-namespace", "kubewarden",
		"--policies-download-dir", dir, "--sigstore-cache-dir", filepath.Join(dir, "sigstore"), "--cache-dir", "", "--workers", "1"}
	done, logs := runPolicyServer(t, "policy server in cluster mode", args, env)
	waitGenerations(t, readiness, done, logs,
		`warden_policy_generation{generation="1",policy_name="clusterwide-pods-validated"} 1`,
		`warden_policy_generation{generation="1",policy_name="namespaced-default-shop-pods"} 1`)
	return readiness
}

// waitGenerations waits until the /metrics at addr shows every series of
// wants.
func waitGenerations(t *testing.T, addr net.Addr, done chan int, logs *logtest.Buffer, wants ...string) {
	t.Helper()
	testkit.Eventually(t, 2*time.Minute, "the replica in cluster mode serves "+strings.Join(wants, ", "), func() bool {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("the policy server in cluster mode stopped: exit %d\n%s", code, logs.String())
		default:
		}
		metrics := get(metricsURL(addr))
		for _, want := range wants {
			if !strings.Contains(metrics, want+"\n") {
				return false
			}
		}
		return true
	})
}

// rollout changes the settings of the policy pods-validated, its second
// generation, and waits until the replica at addr serves it.
func rollout(t *testing.T, c client.Client, addr net.Addr) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p policiesv1.ClusterAdmissionPolicy
		if err := c.Get(t.Context(), client.ObjectKey{Name: "pods-validated"}, &p); err != nil {
			return err
		}
		p.Spec.Settings.Raw = []byte(`{"validations":[{"expression":"1 == 1"}]}`)
		return c.Update(t.Context(), &p)
	})
	if err != nil {
		t.Fatalf("updating pods-validated: %v", err)
	}
	const want = `warden_policy_generation{generation="2",policy_name="clusterwide-pods-validated"} 2` + "\n"
	testkit.Eventually(t, 2*time.Minute, "the replica in cluster mode serves generation 2 of pods-validated", func() bool {
		return strings.Contains(get(metricsURL(addr)), want)
	})
}
