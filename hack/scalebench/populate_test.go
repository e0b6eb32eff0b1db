//go:build cluster && scale

package scalebench

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/net"
)

// The populations of issue 21, created with client-go by many workers at
// once. Namespaces are always created (the other kinds live in them);
// RoleBindings and Pods only for the scenarios that read them.

func namespaceName(i int) string { return fmt.Sprintf("scale-%05d", i) }

// populate creates the populations the configured scenarios need and
// returns a line about each for the report.
func (b *bench) populate(ctx context.Context, t *testing.T) []string {
	t.Helper()
	cfg, cs := b.cfg, b.clientset
	var lines []string

	took := createAll(ctx, t, "Namespaces", cfg.namespaces, cfg.createWorkers, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name:   namespaceName(i),
			Labels: map[string]string{"scale.warden.dev/index": strconv.Itoa(i), "team": fmt.Sprintf("team-%02d", i%50)},
		}}, metav1.CreateOptions{})
		return err
	})
	lines = append(lines, fmt.Sprintf("%d Namespaces created in %s (%.0f/s)", cfg.namespaces, secs(took), float64(cfg.namespaces)/took.Seconds()))

	if cfg.has(scenarioRoleBindings) {
		roles := []string{"view", "edit", "admin"}
		took := createAll(ctx, t, "RoleBindings", cfg.roleBindings, cfg.createWorkers, func(ctx context.Context, i int) error {
			ns := namespaceName(i % cfg.namespaces)
			_, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rb-%05d", i), Labels: map[string]string{"app": fmt.Sprintf("app-%03d", i%200)}},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roles[i%len(roles)]},
				Subjects: []rbacv1.Subject{
					{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("user-%d", i%500)},
					{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("group-%d", i%50)},
					{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns},
				},
			}, metav1.CreateOptions{})
			return err
		})
		lines = append(lines, fmt.Sprintf("%d RoleBindings over %d namespaces created in %s (%.0f/s)",
			cfg.roleBindings, min(cfg.roleBindings, cfg.namespaces), secs(took), float64(cfg.roleBindings)/took.Seconds()))
	}

	if cfg.has(scenarioPods) {
		template := fatPod(cfg.podKB << 10)
		took := createAll(ctx, t, "Pods", cfg.pods, cfg.createWorkers, func(ctx context.Context, i int) error {
			pod := template.DeepCopy()
			pod.Name = fmt.Sprintf("fat-%05d", i)
			pod.Labels["scale.warden.dev/index"] = strconv.Itoa(i)
			_, err := cs.CoreV1().Pods(namespaceName(i/cfg.podsPerNamespace)).Create(ctx, pod, metav1.CreateOptions{})
			return err
		})
		plain, err := json.Marshal(template)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", namespaceName(0), "pods", "fat-00000").DoRaw(ctx)
		if err != nil {
			t.Fatalf("reading a pod back: %v", err)
		}
		lines = append(lines, fmt.Sprintf("%d Pods of %.1f KiB (%.1f KiB as the API server stores them, managedFields included), %d a namespace, created in %s (%.0f/s)",
			cfg.pods, float64(len(plain))/1024, float64(len(stored))/1024, cfg.podsPerNamespace, secs(took), float64(cfg.pods)/took.Seconds()))
	}
	return lines
}

// fatPod returns a Pod of about size bytes of JSON: one container with as
// many environment variables (48 random hex digits each) as it takes.
func fatPod(size int) *corev1.Pod {
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Labels: map[string]string{"app": "fat", "tier": "scale"},
			Annotations: map[string]string{
				"scale.warden.dev/purpose": "a Pod as large as a real one with many settings, for the scale benchmark",
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.example.com/scale/app:1.0.0",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
				},
			}},
		},
	}
	rng := rand.New(rand.NewPCG(21, 4))
	value := make([]byte, 24)
	for i := 0; ; i++ {
		doc, err := json.Marshal(pod)
		if err != nil {
			panic(err)
		}
		if len(doc) >= size {
			return pod
		}
		for j := range value {
			value[j] = byte(rng.UintN(256))
		}
		c := &pod.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("SCALE_SETTING_%03d", i), Value: hex.EncodeToString(value)})
	}
}

// createAll calls create for 0..n-1 from workers goroutines, retrying what
// the API server may refuse under load, and fails the test on other errors.
// An object that exists already counts as created. It returns how long it
// took and prints the progress every 10 seconds.
func createAll(ctx context.Context, t *testing.T, what string, n, workers int, create func(ctx context.Context, i int) error) time.Duration {
	t.Helper()
	start := time.Now()
	logf("creating %d %s with %d workers", n, what, workers)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := createRetrying(ctx, i, create); err != nil {
					cancel(fmt.Errorf("creating %s number %d: %w", what, i, err))
					return
				}
				done.Add(1)
			}
		})
	}
	finished := make(chan struct{})
	go func() {
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-finished:
				return
			case <-tick.C:
				logf("%d/%d %s created", done.Load(), n, what)
			}
		}
	}()
	wg.Wait()
	close(finished)
	if ctx.Err() != nil {
		t.Fatal(context.Cause(ctx))
	}
	took := time.Since(start)
	logf("created %d %s in %s", n, what, secs(took))
	return took
}

// createRetrying calls create until it succeeds, the object exists, or it
// fails with an error the API server does not give under load alone.
func createRetrying(ctx context.Context, i int, create func(ctx context.Context, i int) error) error {
	var err error
	for attempt := range 8 {
		err = create(ctx, i)
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
			return nil
		case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
			apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), net.IsConnectionReset(err), net.IsProbableEOF(err):
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
			}
		default:
			return err
		}
	}
	return err
}
