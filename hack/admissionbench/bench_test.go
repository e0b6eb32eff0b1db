package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// newFakeBench is a bench against client-go's fake clientset, where the
// namespace's default ServiceAccount already exists and a delete
// collection of pods deletes them.
func newFakeBench(t *testing.T, opts *Options) (*bench, *fake.Clientset) {
	t.Helper()
	kube := fake.NewClientset(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: "default"}})
	kube.PrependReactor("delete-collection", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		list, err := kube.Tracker().List(gvr, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		for _, p := range list.(*corev1.PodList).Items {
			if err := kube.Tracker().Delete(gvr, p.Namespace, p.Name); err != nil {
				return true, nil, err
			}
		}
		return true, nil, nil
	})
	return &bench{opts: opts, kube: kube, proc: t.TempDir(), log: io.Discard}, kube
}

// testOptions are valid options for the fake clientset.
func testOptions(t *testing.T, args ...string) *Options {
	t.Helper()
	var opts Options
	var stderr bytes.Buffer
	if code, ok := parseArgs(append([]string{"admissionbench", "-kubeconfig", "unused"}, args...), &opts, &stderr); !ok {
		t.Fatalf("flags %q: exit %d: %s", args, code, stderr.String())
	}
	return &opts
}

func TestMeasure(t *testing.T) {
	opts := testOptions(t, "-c", "1,4", "-warmup", "0s", "-d", "1m", "-n", "30")
	b, kube := newFakeBench(t, opts)
	var creates atomic.Int64
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		if pod.Spec.NodeName != nowhere || pod.Namespace != "admissionbench" {
			t.Errorf("pod %s/%s on node %q, want namespace admissionbench and node %s", pod.Namespace, pod.Name, pod.Spec.NodeName, nowhere)
		}
		// Every fifth creation fails, as a webhook that denies would.
		if creates.Add(1)%5 == 0 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, pod.Name, errors.New("denied"))
		}
		return false, nil, nil // the tracker stores it
	})

	res, err := b.measure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Levels) != 2 || res.Levels[0].Concurrency != 1 || res.Levels[1].Concurrency != 4 {
		t.Fatalf("levels %+v, want 1 and 4 clients", res.Levels)
	}
	for _, l := range res.Levels {
		if l.Creates+l.Errors != 30 || l.Errors == 0 {
			t.Errorf("%d clients: %d creates and %d errors, want 30 in all, some errors", l.Concurrency, l.Creates, l.Errors)
		}
		for k := range l.ErrorSamples {
			if !strings.HasPrefix(k, "Forbidden: pods ") {
				t.Errorf("%d clients: error %q, want the Forbidden ones only", l.Concurrency, k)
			}
		}
		if l.Vanished != 0 || l.EvaluationsPerCreate != -1 {
			t.Errorf("%d clients: %d vanished, %v evaluations per create; want 0 and -1", l.Concurrency, l.Vanished, l.EvaluationsPerCreate)
		}
		if l.P50 > l.P95 || l.P95 > l.P99 || l.P99 > l.Max {
			t.Errorf("%d clients: percentiles out of order: %v %v %v %v", l.Concurrency, l.P50, l.P95, l.P99, l.Max)
		}
	}
	if _, err := kube.CoreV1().Namespaces().Get(t.Context(), "admissionbench", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace after the run: %v, want it deleted", err)
	}
	pods, err := kube.CoreV1().Pods("admissionbench").List(t.Context(), metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("%d pods left (%v), want none", len(pods.Items), err)
	}

	var out bytes.Buffer
	res.WriteText(&out)
	for _, want := range []string{"clients  creates  errors", "Forbidden: pods"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestMeasureKeepsNamespace(t *testing.T) {
	opts := testOptions(t, "-c", "2", "-warmup", "0s", "-n", "5", "-keep-namespace")
	b, kube := newFakeBench(t, opts)
	if _, err := b.measure(t.Context()); err != nil {
		t.Fatal(err)
	}
	ns, err := kube.CoreV1().Namespaces().Get(t.Context(), "admissionbench", metav1.GetOptions{})
	if err != nil || ns.Labels[labelManagedBy] != managedBy {
		t.Errorf("namespace %v (%v), want it kept with label %s", ns, err, podSelector)
	}
	// A second run takes over the namespace the first one left.
	if _, err := b.measure(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestMeasureRefusesForeignNamespace(t *testing.T) {
	opts := testOptions(t, "-namespace", "prod")
	b, kube := newFakeBench(t, opts)
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := b.measure(t.Context())
	if err == nil || !strings.Contains(err.Error(), "choose another -namespace") {
		t.Errorf("measure in a namespace it did not create: %v, want a refusal", err)
	}
	if _, err := kube.CoreV1().Namespaces().Get(t.Context(), "prod", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace prod after the refusal: %v, want it untouched", err)
	}
}

func TestFirstRejection(t *testing.T) {
	opts := testOptions(t, "-mode", "first-rejection", "-poll", "1ms", "-expect-message", privilegedMessage)
	b, kube := newFakeBench(t, opts)
	var calls atomic.Int64
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		create := a.(k8stesting.CreateActionImpl)
		pod := create.GetObject().(*corev1.Pod)
		if opts := create.CreateOptions; len(opts.DryRun) != 1 || opts.DryRun[0] != metav1.DryRunAll {
			t.Errorf("create options %+v, want a dry run", opts)
		}
		if !*pod.Spec.Containers[0].SecurityContext.Privileged {
			t.Error("the pod is not privileged")
		}
		switch n := calls.Add(1); {
		case n <= 3: // no policy yet
			return true, pod, nil
		case n == 4: // the webhook configuration is there, its policy server not yet
			return true, nil, apierrors.NewInternalError(errors.New(`failed calling webhook "x": connection refused`))
		case n == 5: // another webhook's denial
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, pod.Name,
				errors.New(`admission webhook "other" denied the request: no`))
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, pod.Name,
			errors.New(`admission webhook "clusterwide-admissionbench-pss-privileged.kubewarden.admission" denied the request: `+privilegedMessage))
	})
	r, err := b.firstRejection(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r.Admitted != 3 || r.Failed != 2 || !strings.Contains(r.Message, privilegedMessage) {
		t.Errorf("%d admitted, %d failed, message %q; want 3, 2 and the privileged policy's", r.Admitted, r.Failed, r.Message)
	}
	var out bytes.Buffer
	r.WriteText(&out, false)
	if !strings.Contains(out.String(), "first rejection") || !strings.Contains(out.String(), "3 admitted and 2 failed") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestFirstRejectionGivesUp(t *testing.T) {
	opts := testOptions(t, "-mode", "first-rejection", "-poll", "1ms", "-wait", "50ms")
	b, kube := newFakeBench(t, opts)
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, a.(k8stesting.CreateAction).GetObject(), nil
	})
	_, err := b.firstRejection(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no denial after 50ms") {
		t.Errorf("err %v, want no denial", err)
	}
}

func TestMeasureInterrupted(t *testing.T) {
	opts := testOptions(t, "-c", "2", "-warmup", "0s", "-d", "1m", "-n", "0")
	b, kube := newFakeBench(t, opts)
	ctx, cancel := context.WithCancel(t.Context())
	var creates atomic.Int64
	kube.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if creates.Add(1) == 10 {
			cancel()
		}
		time.Sleep(time.Millisecond)
		return false, nil, nil
	})
	if _, err := b.measure(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want context.Canceled", err)
	}
	pods, err := kube.CoreV1().Pods("admissionbench").List(t.Context(), metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("%d pods left after an interrupted run (%v), want none", len(pods.Items), err)
	}
	if _, err := kube.CoreV1().Namespaces().Get(t.Context(), "admissionbench", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace after an interrupted run: %v, want it deleted", err)
	}
}
