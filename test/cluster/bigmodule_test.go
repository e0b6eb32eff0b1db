//go:build cluster

package cluster_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/policybuild"
)

// TestBigModuleSwitch measures, for docs/benchmarks.md, how long a policy
// whose module is a 32 MB Go policy (hack/bigpolicy: cel-go and the
// Kubernetes API types) takes to be served by two replicas when nobody has
// compiled it yet, with and without the shared cache, and then how long a
// settings update takes. It only logs figures, and runs only when
// WARDEN_BIG_MODULE_BENCH is set: building the module takes a minute.
func TestBigModuleSwitch(t *testing.T) {
	if os.Getenv("WARDEN_BIG_MODULE_BENCH") == "" {
		t.Skip("set WARDEN_BIG_MODULE_BENCH=1 to measure (builds a 32 MB module)")
	}
	module := policybuild.ForTest(t, "../../hack/bigpolicy")
	info, err := os.Stat(module)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("module: %.1f MB", float64(info.Size())/1e6)
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared cache %v", shared), func(t *testing.T) {
			ctx := t.Context()
			cl, runner := startLifecycle(t, nil)
			c := cl.Client
			ps := &policiesv1.PolicyServer{
				ObjectMeta: metav1.ObjectMeta{Name: "default"},
				Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 2},
			}
			if shared {
				mustCreate(t, c, &corev1.PersistentVolumeClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: wardenNamespace, Name: "compiled-policies"},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
					},
				})
				ps.Spec.PolicyCache = &policiesv1.PolicyCache{ClaimName: "compiled-policies"}
			}
			mustCreate(t, c, ps)
			eventually(t, "both replicas are ready", func() bool { return runner.readyReplicas() == 2 })

			policy := &policiesv1.ClusterAdmissionPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: "big"},
				Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
					PolicyServer: "default", Rules: podCreateRules(), Module: "file://" + module,
				}},
			}
			start := time.Now()
			mustCreate(t, c, policy)
			waitServedGeneration(t, c, policy, 1)
			t.Logf("created -> served by both replicas, module not compiled anywhere: %s", time.Since(start).Round(10*time.Millisecond))
			assertPrivilegedDenied(t, c)

			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				p := get(t, c, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy.Name}})
				p.Spec.Settings = runtime.RawExtension{Raw: []byte(`{"expression":"true"}`)}
				return c.Update(ctx, p)
			})
			if err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			waitServedGeneration(t, c, policy, 2)
			t.Logf("settings updated -> served by both replicas, module compiled: %s", time.Since(start).Round(10*time.Millisecond))
		})
	}
}
