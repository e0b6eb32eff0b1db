package policysync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
	"github.com/wardenhq/warden/internal/testkit"
)

// The Reconcile tests run the Syncer on fakes of the hub: controller-
// runtime's fake client (PolicySyncs, SelfSubjectAccessReviews), with
// interceptors for the API errors they inject, client-go's fake dynamic
// client (the objects to sync, ManifestWorks) and clientset (kubeconfig
// Secrets), and a discovery that serves clusteradmissionpolicies. They
// assert the end state: status, finalizers, ManifestWorks. What a spoke
// does with the copies is the cluster tier's (test/cluster).

// waitFor bounds every wait of these tests; it is no timing assertion.
const waitFor = 30 * time.Second

// fakeDiscovery serves resources; block, when set, is called first with
// the group version asked for, and may wait.
type fakeDiscovery struct {
	resources []*metav1.APIResourceList
	err       error
	block     func(groupVersion string)
}

func (d *fakeDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if d.block != nil {
		d.block(gv)
	}
	if d.err != nil {
		return nil, d.err
	}
	for _, r := range d.resources {
		if r.GroupVersion == gv {
			return r, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: gv}, "")
}

// servedPolicies is what the fake discovery serves.
var servedPolicies = []*metav1.APIResourceList{{
	GroupVersion: capGVR.GroupVersion().String(),
	APIResources: []metav1.APIResource{{Name: capGVR.Resource, Kind: "ClusterAdmissionPolicy"}},
}}

// fakeHub is a Syncer on fakes of the hub.
type fakeHub struct {
	client  client.WithWatch
	dynamic *dynamicfake.FakeDynamicClient
	syncer  *Syncer
	// cancel stops the Syncer, and done is closed once it stopped.
	cancel context.CancelFunc
	done   chan struct{}
}

// hubSetup is what a fakeHub starts with.
type hubSetup struct {
	policySyncs []*syncv1alpha1.PolicySync
	policies    []*unstructured.Unstructured
	secrets     []*corev1.Secret
	// funcs intercept the fake client's calls; a nil Create answers
	// SelfSubjectAccessReviews with allowSSAR.
	funcs     interceptor.Funcs
	discovery *fakeDiscovery
}

// allowSSAR answers SelfSubjectAccessReviews: allowed, unless the verb is
// in denied. It creates any other object.
func allowSSAR(denied ...string) func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
	return func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
		if !ok {
			return c.Create(ctx, obj, opts...)
		}
		review.Status.Allowed = true
		for _, verb := range denied {
			if review.Spec.ResourceAttributes.Verb == verb {
				review.Status.Allowed = false
			}
		}
		return nil
	}
}

// startHub starts a Syncer on fakes set up as setup says; it stops when
// the test ends.
func startHub(t *testing.T, setup hubSetup) *fakeHub {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if setup.funcs.Create == nil {
		setup.funcs.Create = allowSSAR()
	}
	objects := make([]client.Object, 0, len(setup.policySyncs))
	for _, ps := range setup.policySyncs {
		objects = append(objects, ps)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).
		WithStatusSubresource(&syncv1alpha1.PolicySync{}).WithInterceptorFuncs(setup.funcs).Build()

	hubObjects := make([]runtime.Object, 0, len(setup.policies))
	for _, p := range setup.policies {
		hubObjects = append(hubObjects, p)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		capGVR:          "ClusterAdmissionPolicyList",
		manifestWorkGVR: "ManifestWorkList",
	}, hubObjects...)
	dyn.PrependReactor("patch", "manifestworks", applyManifestWork(dyn.Tracker()))
	secrets := make([]runtime.Object, 0, len(setup.secrets))
	for _, s := range setup.secrets {
		secrets = append(secrets, s)
	}
	if setup.discovery == nil {
		setup.discovery = &fakeDiscovery{resources: servedPolicies}
	}

	opts := DefaultOptions()
	opts.ResyncPeriod, opts.SpokeTimeout = 100*time.Millisecond, 5*time.Second
	s := newSyncer(syncerDeps{client: c, reader: c, hub: dyn, kube: kubefake.NewClientset(secrets...), discovery: setup.discovery},
		opts, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	h := &fakeHub{client: c, dynamic: dyn, syncer: s, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		_ = s.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-h.done
	})
	return h
}

// applyManifestWork makes the fake dynamic client take server-side applies
// of ManifestWorks, which its tracker does not create: the spec and
// labels applied replace those held, the status is kept.
func applyManifestWork(tracker clienttesting.ObjectTracker) clienttesting.ReactionFunc {
	return func(action clienttesting.Action) (bool, runtime.Object, error) {
		patch, ok := action.(clienttesting.PatchAction)
		if !ok || patch.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		applied := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(patch.GetPatch(), &applied.Object); err != nil {
			return true, nil, err
		}
		held, err := tracker.Get(manifestWorkGVR, patch.GetNamespace(), patch.GetName())
		switch {
		case apierrors.IsNotFound(err):
			applied.SetGeneration(1)
			err = tracker.Create(manifestWorkGVR, applied, patch.GetNamespace())
		case err == nil:
			work := held.(*unstructured.Unstructured)
			work.Object["spec"] = applied.Object["spec"]
			work.SetLabels(applied.GetLabels())
			err = tracker.Update(manifestWorkGVR, work, patch.GetNamespace())
		}
		if err != nil {
			return true, nil, err
		}
		out, err := tracker.Get(manifestWorkGVR, patch.GetNamespace(), patch.GetName())
		return true, out, err
	}
}

// runController reconciles the PolicySyncs as the controller does, one
// at a time, until the test ends: those the watches and workers name,
// those whose reconcile failed (after a short wait), and those that asked
// to be looked at again. kick names one more.
func (h *fakeHub) runController(t *testing.T) (kick func(name string)) {
	t.Helper()
	requeue := make(chan string, 64)
	kick = func(name string) {
		select {
		case requeue <- name:
		case <-h.done:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var name string
			select {
			case <-ctx.Done():
				return
			case ev := <-h.syncer.events:
				name = ev.Object.GetName()
			case name = <-requeue:
			}
			res, err := h.syncer.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
			after := res.RequeueAfter
			if err != nil {
				after = 50 * time.Millisecond
			}
			if after > 0 && after < time.Minute {
				time.AfterFunc(after, func() {
					select {
					case requeue <- name:
					case <-ctx.Done():
					}
				})
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return kick
}

// len returns the number of informers running.
func (s *informerSet[K]) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// policySync reads a PolicySync, nil when it does not exist.
func (h *fakeHub) policySync(t *testing.T, name string) *syncv1alpha1.PolicySync {
	t.Helper()
	var ps syncv1alpha1.PolicySync
	if err := h.client.Get(context.Background(), client.ObjectKey{Name: name}, &ps); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return &ps
}

// waitForReady waits until the PolicySync name's Ready condition has
// reason, and returns the PolicySync.
func (h *fakeHub) waitForReady(t *testing.T, name, reason string) *syncv1alpha1.PolicySync {
	t.Helper()
	var ps *syncv1alpha1.PolicySync
	testkit.Eventually(t, waitFor, fmt.Sprintf("PolicySync %s is Ready with reason %s", name, reason), func() bool {
		ps = h.policySync(t, name)
		c := meta.FindStatusCondition(ps.Status.Conditions, syncv1alpha1.ConditionReady)
		return c != nil && c.Reason == reason
	})
	return ps
}

// newPolicySync is a PolicySync of the clusteradmissionpolicies labelled
// sync=true, changed by options.
func newPolicySync(name string, options ...func(*syncv1alpha1.PolicySync)) *syncv1alpha1.PolicySync {
	ps := &syncv1alpha1.PolicySync{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: syncv1alpha1.PolicySyncSpec{
			PoliciesToSync: []syncv1alpha1.GroupVersionResource{{Group: capGVR.Group, Version: capGVR.Version, Resource: capGVR.Resource}},
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"sync": "true"}},
		},
	}
	for _, o := range options {
		o(ps)
	}
	return ps
}

func withResource(gvr schema.GroupVersionResource) func(*syncv1alpha1.PolicySync) {
	return func(ps *syncv1alpha1.PolicySync) {
		ps.Spec.PoliciesToSync = append(ps.Spec.PoliciesToSync, syncv1alpha1.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource})
	}
}

func withCluster(name string, secret syncv1alpha1.SecretKeySelector) func(*syncv1alpha1.PolicySync) {
	return func(ps *syncv1alpha1.PolicySync) {
		ps.Spec.Clusters = append(ps.Spec.Clusters, syncv1alpha1.Cluster{Name: name, KubeconfigSecretRef: secret})
	}
}

func withManagedCluster(name string) func(*syncv1alpha1.PolicySync) {
	return func(ps *syncv1alpha1.PolicySync) {
		if ps.Spec.Placement == nil {
			ps.Spec.Placement = &syncv1alpha1.Placement{}
		}
		ps.Spec.Placement.ClusterNames = append(ps.Spec.Placement.ClusterNames, name)
	}
}

// hubPolicy is a ClusterAdmissionPolicy on the hub.
func hubPolicy(name string, labels map[string]string) *unstructured.Unstructured {
	p := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"module": "registry://ghcr.io/kubewarden/policies/pod-privileged:v1.0.0", "mode": "protect"},
	}}
	p.SetAPIVersion("policies.kubewarden.io/v1")
	p.SetKind("ClusterAdmissionPolicy")
	p.SetName(name)
	p.SetUID(types.UID("uid-" + name))
	p.SetResourceVersion("1")
	p.SetGeneration(1)
	p.SetLabels(labels)
	return p
}

// unreachableKubeconfig is a kubeconfig for an API server that is not
// there.
func unreachableKubeconfig(t *testing.T) []byte {
	return fmt.Appendf(nil, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:%d\"}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: t}}]\n", testkit.FreePort(t))
}

func TestReconcileStatus(t *testing.T) {
	rlpStatus := syncv1alpha1.GVRStatus{Group: rlp.Group, Version: rlp.Version, Resource: rlp.Resource}
	capStatus := syncv1alpha1.GVRStatus{Group: capGVR.Group, Version: capGVR.Version, Resource: capGVR.Resource}
	valid := capStatus
	valid.Valid = true
	invalid := func(g syncv1alpha1.GVRStatus, message string) syncv1alpha1.GVRStatus {
		g.Message = message
		return g
	}
	secretRef := syncv1alpha1.SecretKeySelector{Name: "spoke-a"}

	for _, tc := range []struct {
		name      string
		ps        *syncv1alpha1.PolicySync
		secrets   []*corev1.Secret
		funcs     interceptor.Funcs
		discovery *fakeDiscovery
		reason    string
		message   string
		resources []syncv1alpha1.GVRStatus
		clusters  []syncv1alpha1.ClusterStatus
	}{
		{
			name:      "a resource the hub does not serve",
			ps:        newPolicySync("fleet", withResource(rlp)),
			reason:    syncv1alpha1.ReasonInvalidGVR,
			message:   "not synced, see status.policiesToSync: ratelimitpolicies.v1.example.com",
			resources: []syncv1alpha1.GVRStatus{valid, invalid(rlpStatus, "the hub does not serve ratelimitpolicies.v1.example.com")},
		},
		{
			name:      "discovery fails",
			ps:        newPolicySync("fleet"),
			discovery: &fakeDiscovery{err: apierrors.NewServiceUnavailable("etcd down")},
			reason:    syncv1alpha1.ReasonInvalidGVR,
			message:   "not synced, see status.policiesToSync: clusteradmissionpolicies.v1.policies.kubewarden.io",
			resources: []syncv1alpha1.GVRStatus{invalid(capStatus, "discovering policies.kubewarden.io/v1 on the hub: etcd down")},
		},
		{
			name:      "the syncer may not watch",
			ps:        newPolicySync("fleet"),
			funcs:     interceptor.Funcs{Create: allowSSAR("watch")},
			reason:    syncv1alpha1.ReasonInvalidGVR,
			message:   "not synced, see status.policiesToSync: clusteradmissionpolicies.v1.policies.kubewarden.io",
			resources: []syncv1alpha1.GVRStatus{invalid(capStatus, "the syncer may not watch clusteradmissionpolicies.v1.policies.kubewarden.io on the hub")},
		},
		{
			name: "a SelfSubjectAccessReview fails",
			ps:   newPolicySync("fleet"),
			funcs: interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*authorizationv1.SelfSubjectAccessReview); ok {
					return apierrors.NewTooManyRequests("slow down", 1)
				}
				return c.Create(ctx, obj, opts...)
			}},
			reason:  syncv1alpha1.ReasonInvalidGVR,
			message: "not synced, see status.policiesToSync: clusteradmissionpolicies.v1.policies.kubewarden.io",
			resources: []syncv1alpha1.GVRStatus{invalid(capStatus,
				"checking whether the syncer may list clusteradmissionpolicies.v1.policies.kubewarden.io: slow down")},
		},
		{
			name: "an invalid selector",
			ps: newPolicySync("fleet", func(ps *syncv1alpha1.PolicySync) {
				ps.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "sync", Operator: "Near"}}}
			}),
			reason:    syncv1alpha1.ReasonSyncFailed,
			message:   `spec.selector: "Near" is not a valid label selector operator`,
			resources: []syncv1alpha1.GVRStatus{valid},
		},
		{
			name:      "no kubeconfig Secret",
			ps:        newPolicySync("fleet", withCluster("spoke-a", secretRef)),
			reason:    syncv1alpha1.ReasonClusterUnreachable,
			message:   "clusters not reachable, see status.clusters: spoke-a",
			resources: []syncv1alpha1.GVRStatus{valid},
			clusters:  []syncv1alpha1.ClusterStatus{{Name: "spoke-a", Message: "the kubeconfig Secret kubewarden/spoke-a does not exist"}},
		},
		{
			name:      "a kubeconfig Secret outside the syncer's namespace",
			ps:        newPolicySync("fleet", withCluster("spoke-a", syncv1alpha1.SecretKeySelector{Namespace: "default", Name: "spoke-a"})),
			reason:    syncv1alpha1.ReasonClusterUnreachable,
			message:   "clusters not reachable, see status.clusters: spoke-a",
			resources: []syncv1alpha1.GVRStatus{valid},
			clusters: []syncv1alpha1.ClusterStatus{{Name: "spoke-a",
				Message: "the kubeconfig Secret default/spoke-a is not in the syncer's namespace kubewarden"}},
		},
		{
			name: "a kubeconfig Secret without the key",
			ps:   newPolicySync("fleet", withCluster("spoke-a", syncv1alpha1.SecretKeySelector{Name: "spoke-a", Key: "config"})),
			secrets: []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "kubewarden", Name: "spoke-a"},
				Data: map[string][]byte{"kubeconfig": []byte("{}")}}},
			reason:    syncv1alpha1.ReasonClusterUnreachable,
			message:   "clusters not reachable, see status.clusters: spoke-a",
			resources: []syncv1alpha1.GVRStatus{valid},
			clusters:  []syncv1alpha1.ClusterStatus{{Name: "spoke-a", Message: `the kubeconfig Secret kubewarden/spoke-a has no key "config"`}},
		},
		{
			name:      "a status write fails once",
			ps:        newPolicySync("fleet", withResource(rlp)),
			funcs:     interceptor.Funcs{SubResourcePatch: statusPatchFailingOnce()},
			reason:    syncv1alpha1.ReasonInvalidGVR,
			message:   "not synced, see status.policiesToSync: ratelimitpolicies.v1.example.com",
			resources: []syncv1alpha1.GVRStatus{valid, invalid(rlpStatus, "the hub does not serve ratelimitpolicies.v1.example.com")},
		},
		{
			name:      "adding the finalizer fails once",
			ps:        newPolicySync("fleet"),
			funcs:     interceptor.Funcs{Update: updateFailingOnce()},
			reason:    syncv1alpha1.ReasonSynced,
			message:   "every object is synced to every cluster",
			resources: []syncv1alpha1.GVRStatus{valid},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHub(t, hubSetup{
				policySyncs: []*syncv1alpha1.PolicySync{tc.ps},
				policies:    []*unstructured.Unstructured{hubPolicy("privileged", map[string]string{"sync": "true"})},
				secrets:     tc.secrets,
				funcs:       tc.funcs,
				discovery:   tc.discovery,
			})
			h.runController(t)("fleet")
			ps := h.waitForReady(t, "fleet", tc.reason)

			ready := meta.FindStatusCondition(ps.Status.Conditions, syncv1alpha1.ConditionReady)
			if ready.Message != tc.message || ready.ObservedGeneration != 1 || ps.Status.ObservedGeneration != 1 {
				t.Errorf("Ready %+v, observedGeneration %d; want message %q at generation 1", ready, ps.Status.ObservedGeneration, tc.message)
			}
			if !equalJSON(t, ps.Status.PoliciesToSync, tc.resources) {
				t.Errorf("policiesToSync %+v, want %+v", ps.Status.PoliciesToSync, tc.resources)
			}
			if !equalJSON(t, ps.Status.Clusters, tc.clusters) {
				t.Errorf("clusters %+v, want %+v", ps.Status.Clusters, tc.clusters)
			}
			if len(ps.Finalizers) != 1 || ps.Finalizers[0] != finalizer {
				t.Errorf("finalizers %v, want %s", ps.Finalizers, finalizer)
			}
		})
	}
}

// failingOnce returns a function that returns a conflict the first time
// it is called, and nil after.
func failingOnce() func() error {
	var once sync.Once
	return func() (err error) {
		once.Do(func() {
			err = apierrors.NewConflict(schema.GroupResource{Group: syncv1alpha1.GroupVersion.Group, Resource: "policysyncs"}, "fleet", errors.New("changed"))
		})
		return err
	}
}

// updateFailingOnce is an interceptor of updates whose first one fails.
func updateFailingOnce() func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
	fail := failingOnce()
	return func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		if err := fail(); err != nil {
			return err
		}
		return c.Update(ctx, obj, opts...)
	}
}

// statusPatchFailingOnce is an interceptor of status patches whose first
// one fails.
func statusPatchFailingOnce() func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	fail := failingOnce()
	return func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		if err := fail(); err != nil {
			return err
		}
		return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
	}
}

// equalJSON says whether a and b encode to the same JSON, an empty list
// and none being the same.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	encode := func(v any) []byte {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) == "null" {
			return []byte("[]")
		}
		return raw
	}
	return testkit.JSONEqual(t, encode(a), encode(b))
}

// TestReconcileSpokeDown: a spoke whose API server does not answer is
// reported not reachable, with the client's error.
func TestReconcileSpokeDown(t *testing.T) {
	h := startHub(t, hubSetup{
		policySyncs: []*syncv1alpha1.PolicySync{newPolicySync("fleet", withCluster("spoke-a", syncv1alpha1.SecretKeySelector{Name: "spoke-a"}))},
		policies:    []*unstructured.Unstructured{hubPolicy("privileged", map[string]string{"sync": "true"})},
		secrets: []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "kubewarden", Name: "spoke-a"},
			Data: map[string][]byte{"kubeconfig": unreachableKubeconfig(t)}}},
	})
	h.runController(t)("fleet")
	ps := h.waitForReady(t, "fleet", syncv1alpha1.ReasonClusterUnreachable)
	if len(ps.Status.Clusters) != 1 || ps.Status.Clusters[0].Reachable || !strings.Contains(ps.Status.Clusters[0].Message, "connection refused") {
		t.Errorf("clusters %+v, want spoke-a not reachable: connection refused", ps.Status.Clusters)
	}
}

// TestReconcileOCM: a ManagedCluster's copies go into a ManifestWork in
// its namespace on the hub; the work agent's report on it becomes the
// cluster's status, its feedback included; deleting the PolicySync
// deletes the ManifestWork and lets the PolicySync go.
func TestReconcileOCM(t *testing.T) {
	ps := newPolicySync("fleet", withManagedCluster("edge-1"), func(ps *syncv1alpha1.PolicySync) {
		ps.Spec.StatusFeedback = []syncv1alpha1.StatusFeedback{{Name: "policyStatus", JSONPath: ".status.policyStatus"}}
	})
	h := startHub(t, hubSetup{
		policySyncs: []*syncv1alpha1.PolicySync{ps},
		policies: []*unstructured.Unstructured{
			hubPolicy("privileged", map[string]string{"sync": "true"}),
			hubPolicy("local", nil),
		},
	})
	kick := h.runController(t)
	kick("fleet")
	got := h.waitForReady(t, "fleet", syncv1alpha1.ReasonClusterUnreachable)
	want := []syncv1alpha1.ClusterStatus{{Name: "edge-1",
		Message: "the work agent of edge-1 has not reported on ManifestWork policysync-fleet yet",
		Objects: []syncv1alpha1.ObjectStatus{{Group: capGVR.Group, Resource: capGVR.Resource, Name: "privileged", HubGeneration: 1,
			Message: "not applied by the work agent yet"}}}}
	if !equalJSON(t, got.Status.Clusters, want) {
		t.Errorf("clusters %+v, want %+v", got.Status.Clusters, want)
	}
	works := h.dynamic.Resource(manifestWorkGVR).Namespace("edge-1")
	work, err := works.Get(t.Context(), "policysync-fleet", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	manifests, _, _ := unstructured.NestedSlice(work.Object, "spec", "workload", "manifests")
	if len(manifests) != 1 || manifests[0].(map[string]any)["metadata"].(map[string]any)["name"] != "privileged" {
		t.Errorf("manifests %v, want the copy of privileged alone", manifests)
	}

	// The work agent reports.
	work.Object["status"] = map[string]any{
		"conditions": []any{map[string]any{"type": "Applied", "status": "True", "observedGeneration": work.GetGeneration()}},
		"resourceStatus": map[string]any{"manifests": []any{map[string]any{
			"resourceMeta":   map[string]any{"group": capGVR.Group, "resource": capGVR.Resource, "name": "privileged"},
			"conditions":     []any{map[string]any{"type": "Applied", "status": "True"}},
			"statusFeedback": map[string]any{"values": []any{map[string]any{"name": "policyStatus", "fieldValue": map[string]any{"type": "String", "string": "active"}}}},
		}}},
	}
	if _, err := works.Update(t.Context(), work, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = h.waitForReady(t, "fleet", syncv1alpha1.ReasonSynced)
	want = []syncv1alpha1.ClusterStatus{{Name: "edge-1", Reachable: true,
		Objects: []syncv1alpha1.ObjectStatus{{Group: capGVR.Group, Resource: capGVR.Resource, Name: "privileged", HubGeneration: 1,
			Synced: true, Feedback: map[string]string{"policyStatus": "active"}}}}}
	if !equalJSON(t, got.Status.Clusters, want) {
		t.Errorf("clusters %+v, want %+v", got.Status.Clusters, want)
	}

	if err := h.client.Delete(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	kick("fleet")
	testkit.Eventually(t, waitFor, "the PolicySync is gone", func() bool { return h.policySync(t, "fleet") == nil })
	if _, err := works.Get(t.Context(), "policysync-fleet", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ManifestWork of a deleted PolicySync: %v, want it deleted", err)
	}
	if n := h.syncer.hubWatches.len(); n != 0 {
		t.Errorf("%d hub watches left, want none", n)
	}
}

// TestReconcileErrors: a PolicySync that cannot be read, or whose
// finalizer cannot be added, is not synced: the reconcile fails, to be
// retried, and the syncer keeps nothing of it.
func TestReconcileErrors(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("etcd down")
	for _, tc := range []struct {
		name  string
		funcs interceptor.Funcs
	}{
		{"reading the PolicySync", interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return unavailable
		}}},
		{"adding the finalizer", interceptor.Funcs{Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return unavailable
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHub(t, hubSetup{policySyncs: []*syncv1alpha1.PolicySync{newPolicySync("fleet")}, funcs: tc.funcs})
			_, err := h.syncer.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "fleet"}})
			if !errors.Is(err, unavailable) {
				t.Errorf("Reconcile: %v, want %v", err, unavailable)
			}
			if h.syncer.take("fleet") != nil || h.syncer.hubWatches.len() != 0 {
				t.Error("the syncer keeps a PolicySync it could not sync")
			}
		})
	}
}

// TestReconcileForgets: a PolicySync deleted without its finalizer (by a
// syncer that was not the leader) is forgotten: its watches are stopped.
func TestReconcileForgets(t *testing.T) {
	h := startHub(t, hubSetup{policySyncs: []*syncv1alpha1.PolicySync{newPolicySync("fleet")}})
	kick := h.runController(t)
	kick("fleet")
	ps := h.waitForReady(t, "fleet", syncv1alpha1.ReasonSynced)
	if h.syncer.hubWatches.len() != 1 {
		t.Fatalf("%d hub watches, want 1", h.syncer.hubWatches.len())
	}
	ps.Finalizers = nil
	if err := h.client.Update(t.Context(), ps); err != nil {
		t.Fatal(err)
	}
	if err := h.client.Delete(t.Context(), ps); err != nil {
		t.Fatal(err)
	}
	kick("fleet")
	testkit.Eventually(t, waitFor, "the hub watches of a deleted PolicySync stop", func() bool { return h.syncer.hubWatches.len() == 0 })
}

// TestSlowHubHoldsUpNoOtherPolicySync: while the hub is slow to answer the
// validation of one PolicySync's resources, another PolicySync is
// reconciled and gets its status: no lock the other needs is held across
// the call. The slow hub is a fake: discovery waits, for one group, until
// the test lets it answer.
func TestSlowHubHoldsUpNoOtherPolicySync(t *testing.T) {
	slow := schema.GroupVersionResource{Group: "slow.example.com", Version: "v1", Resource: "ratelimitpolicies"}
	asked, answer := make(chan struct{}), make(chan struct{})
	var once sync.Once
	discovery := &fakeDiscovery{resources: servedPolicies, block: func(gv string) {
		if gv == slow.GroupVersion().String() {
			once.Do(func() { close(asked) })
			<-answer
		}
	}}
	h := startHub(t, hubSetup{
		policySyncs: []*syncv1alpha1.PolicySync{newPolicySync("slow", withResource(slow)), newPolicySync("fleet")},
		policies:    []*unstructured.Unstructured{hubPolicy("privileged", map[string]string{"sync": "true"})},
		discovery:   discovery,
	})
	var released sync.Once
	release := func() { released.Do(func() { close(answer) }) }
	t.Cleanup(release) // when the test fails, the slow reconcile still ends

	reconcile := func(name string) <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = h.syncer.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
		}()
		return done
	}
	isClosed := func(c <-chan struct{}) func() bool {
		return func() bool {
			select {
			case <-c:
				return true
			default:
				return false
			}
		}
	}
	slowDone := reconcile("slow")
	testkit.Eventually(t, waitFor, "the slow PolicySync's reconcile asks the hub", isClosed(asked))
	// The other PolicySync is reconciled, as the controller would, until
	// its status is written; all the while the slow one waits.
	var fleetDone <-chan struct{}
	testkit.Eventually(t, waitFor, "the other PolicySync is reconciled while the slow one waits", func() bool {
		if fleetDone != nil && !isClosed(fleetDone)() {
			return false // one reconcile at a time, as the controller
		}
		c := meta.FindStatusCondition(h.policySync(t, "fleet").Status.Conditions, syncv1alpha1.ConditionReady)
		if c != nil && c.Reason == syncv1alpha1.ReasonSynced {
			return true
		}
		fleetDone = reconcile("fleet")
		return false
	})
	if isClosed(slowDone)() {
		t.Fatal("the slow reconcile did not wait for the hub")
	}
	release()
	testkit.Eventually(t, waitFor, "the slow reconcile ends once the hub answers", isClosed(slowDone))
}
