//go:build cluster

package cluster_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policysync"
)

// syncNamespace holds the spokes' kubeconfig Secrets on the hub.
const syncNamespace = "kubewarden"

var (
	capGVR = schema.GroupVersionResource{Group: policiesv1.GroupName, Version: "v1", Resource: "clusteradmissionpolicies"}
	apGVR  = schema.GroupVersionResource{Group: policiesv1.GroupName, Version: "v1", Resource: "admissionpolicies"}
	rlpGVR = schema.GroupVersionResource{Group: "sync.warden.test", Version: "v1", Resource: "ratelimitpolicies"}
)

// startSyncCluster starts an API server with Warden's CRDs (PolicySync
// included) and the test policy kinds of testdata/policysync.
func startSyncCluster(t *testing.T) *clustertest.Cluster {
	t.Helper()
	scheme, err := policysync.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := policiesv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return clustertest.Start(t, clustertest.WithScheme(scheme),
		clustertest.WithCRDDirectory("../../config/crd/bases", "testdata/policysync"))
}

// startSyncer runs the policy syncer against the hub until the test ends,
// and returns its logs; they are shown if the test fails.
func startSyncer(t *testing.T, hub *clustertest.Cluster) *logtest.Buffer {
	t.Helper()
	opts := policysync.DefaultOptions()
	opts.Namespace = syncNamespace
	opts.MetricsBindAddress, opts.HealthProbeBindAddress = "0", "0"
	opts.ResyncPeriod = time.Second
	opts.SpokeTimeout = 5 * time.Second
	var logs logtest.Buffer
	mgr, err := policysync.NewManager(hub.Config, opts, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runManager(t, "syncer", mgr, &logs)
	return &logs
}

// kubeconfigSecret is the Secret the PolicySync names for a spoke.
func kubeconfigSecret(t *testing.T, name string, spoke *clustertest.Cluster) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: syncNamespace, Name: name},
		Data:       map[string][]byte{"kubeconfig": clustertest.Kubeconfig(t, spoke.Config)},
	}
}

func syncedPolicy(name string, labels map[string]string, mode policiesv1.PolicyMode) *policiesv1.ClusterAdmissionPolicy {
	return &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"team": "platform"}},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			Module: "registry://ghcr.io/kubewarden/policies/pod-privileged:v1.0.0",
			Mode:   mode,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
}

// object reads an object of gvr from c, nil when it does not exist.
func object(t *testing.T, c client.Client, gvr schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	kinds := map[schema.GroupVersionResource]string{capGVR: "ClusterAdmissionPolicy", apGVR: "AdmissionPolicy", rlpGVR: "RateLimitPolicy"}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvr.GroupVersion().WithKind(kinds[gvr]))
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatalf("reading %s %s/%s: %v", gvr.Resource, namespace, name, err)
	}
	return u
}

func policySync(t *testing.T, c client.Client, name string) *syncv1alpha1.PolicySync {
	t.Helper()
	return get(t, c, &syncv1alpha1.PolicySync{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

func clusterStatus(ps *syncv1alpha1.PolicySync, name string) *syncv1alpha1.ClusterStatus {
	for i := range ps.Status.Clusters {
		if ps.Status.Clusters[i].Name == name {
			return &ps.Status.Clusters[i]
		}
	}
	return nil
}

func objectStatusOf(cs *syncv1alpha1.ClusterStatus, gvr schema.GroupVersionResource, namespace, name string) *syncv1alpha1.ObjectStatus {
	if cs == nil {
		return nil
	}
	for i := range cs.Objects {
		o := &cs.Objects[i]
		if o.Group == gvr.Group && o.Resource == gvr.Resource && o.Namespace == namespace && o.Name == name {
			return o
		}
	}
	return nil
}

func readyReason(ps *syncv1alpha1.PolicySync) string {
	c := meta.FindStatusCondition(ps.Status.Conditions, syncv1alpha1.ConditionReady)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason
}

// assertCopy checks that the spoke's object is the hub's spec, labels and
// annotations plus the synced annotation.
func assertCopy(t *testing.T, spoke client.Client, gvr schema.GroupVersionResource, hub *unstructured.Unstructured, syncName string) {
	t.Helper()
	c := object(t, spoke, gvr, hub.GetNamespace(), hub.GetName())
	if c == nil {
		t.Fatalf("%s %s/%s: no copy in the spoke", gvr.Resource, hub.GetNamespace(), hub.GetName())
	}
	wantAnnotations := map[string]string{}
	maps.Copy(wantAnnotations, hub.GetAnnotations())
	wantAnnotations[syncv1alpha1.SyncedAnnotation] = syncName
	if got := c.GetAnnotations(); !reflect.DeepEqual(got, wantAnnotations) {
		t.Errorf("%s: annotations %v, want %v", hub.GetName(), got, wantAnnotations)
	}
	if got, want := c.GetLabels(), hub.GetLabels(); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: labels %v, want %v", hub.GetName(), got, want)
	}
	if !reflect.DeepEqual(c.Object["spec"], hub.Object["spec"]) {
		t.Errorf("%s: spec %v, want the hub's %v", hub.GetName(), c.Object["spec"], hub.Object["spec"])
	}
}

func TestPolicySync(t *testing.T) {
	hub, spokeA, spokeB := startSyncCluster(t), startSyncCluster(t), startSyncCluster(t)
	ctx := t.Context()
	for _, cl := range []*clustertest.Cluster{hub, spokeA, spokeB} {
		mustCreate(t, cl.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	}
	mustCreate(t, hub.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: syncNamespace}})
	mustCreate(t, hub.Client, kubeconfigSecret(t, "spoke-a", spokeA))
	mustCreate(t, hub.Client, kubeconfigSecret(t, "spoke-b", spokeB))

	syncLabel := map[string]string{"sync": "true"}
	mustCreate(t, hub.Client, syncedPolicy("baseline", syncLabel, policiesv1.PolicyModeMonitor))
	mustCreate(t, hub.Client, syncedPolicy("hub-only", nil, policiesv1.PolicyModeProtect))
	mustCreate(t, hub.Client, &policiesv1.AdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "team-policy", Labels: syncLabel},
		Spec:       policiesv1.AdmissionPolicySpec{PolicySpec: syncedPolicy("", nil, policiesv1.PolicyModeProtect).Spec.PolicySpec},
	})
	rlp := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sync.warden.test/v1", "kind": "RateLimitPolicy",
		"metadata": map[string]any{"namespace": "team", "name": "edge-limits", "labels": map[string]any{"sync": "true"}},
		"spec": map[string]any{
			"targetRef": map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "edge", "uid": "hub-gateway-uid"},
			"limit":     int64(100),
		},
	}}
	mustCreate(t, hub.Client, rlp)
	// Made in spoke A and on the hub under the same name: spoke A's wins.
	local := syncedPolicy("local", nil, policiesv1.PolicyModeProtect)
	mustCreate(t, spokeA.Client, local)
	mustCreate(t, hub.Client, syncedPolicy("local", syncLabel, policiesv1.PolicyModeMonitor))

	startSyncer(t, hub)
	ps := &syncv1alpha1.PolicySync{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
		Spec: syncv1alpha1.PolicySyncSpec{
			PoliciesToSync: []syncv1alpha1.GroupVersionResource{
				{Group: capGVR.Group, Version: "v1", Resource: capGVR.Resource},
				{Group: apGVR.Group, Version: "v1", Resource: apGVR.Resource},
				{Group: rlpGVR.Group, Version: "v1", Resource: rlpGVR.Resource},
				{Group: "sync.warden.test", Version: "v1", Resource: "widgets"},
				{Group: "apps", Version: "v1", Resource: "deployments"},
				{Group: "nothing.example", Version: "v1", Resource: "gizmos"},
			},
			Selector: &metav1.LabelSelector{MatchLabels: syncLabel},
			Clusters: []syncv1alpha1.Cluster{
				{Name: "spoke-a", KubeconfigSecretRef: syncv1alpha1.SecretKeySelector{Namespace: syncNamespace, Name: "spoke-a", Key: "kubeconfig"}},
				{Name: "spoke-b", KubeconfigSecretRef: syncv1alpha1.SecretKeySelector{Name: "spoke-b"}},
			},
			StatusFeedback: []syncv1alpha1.StatusFeedback{
				{Name: "policyStatus", JSONPath: ".status.policyStatus"},
				{Name: "limit", JSONPath: "{.spec.limit}"},
			},
		},
	}
	mustCreate(t, hub.Client, ps)

	t.Log("invalid GVRs are reported, the valid ones synced")
	eventually(t, "the PolicySync reports its GVRs", func() bool {
		return len(policySync(t, hub.Client, "fleet").Status.PoliciesToSync) == 6
	})
	got := policySync(t, hub.Client, "fleet")
	wantGVRs := []syncv1alpha1.GVRStatus{
		{Group: capGVR.Group, Version: "v1", Resource: capGVR.Resource, Valid: true},
		{Group: apGVR.Group, Version: "v1", Resource: apGVR.Resource, Valid: true},
		{Group: rlpGVR.Group, Version: "v1", Resource: rlpGVR.Resource, Valid: true},
		{Group: "sync.warden.test", Version: "v1", Resource: "widgets",
			Message: "widgets.v1.sync.warden.test is not a policy: it is not one of Warden's policy kinds and its schema has no .spec.targetRef"},
		{Group: "apps", Version: "v1", Resource: "deployments",
			Message: "deployments.v1.apps is not a policy: it is not one of Warden's policy kinds and its schema has no .spec.targetRef"},
		{Group: "nothing.example", Version: "v1", Resource: "gizmos", Message: "the hub does not serve gizmos.v1.nothing.example"},
	}
	if !reflect.DeepEqual(got.Status.PoliciesToSync, wantGVRs) {
		t.Errorf("status.policiesToSync:\n got %+v\nwant %+v", got.Status.PoliciesToSync, wantGVRs)
	}
	eventually(t, "Ready is False with reason InvalidGVR", func() bool {
		return readyReason(policySync(t, hub.Client, "fleet")) == "False/InvalidGVR"
	})

	hubBaseline := object(t, hub.Client, capGVR, "", "baseline")
	hubTeam := object(t, hub.Client, apGVR, "team", "team-policy")
	hubLocal := object(t, hub.Client, capGVR, "", "local")
	for name, spoke := range map[string]*clustertest.Cluster{"spoke-a": spokeA, "spoke-b": spokeB} {
		eventually(t, name+" holds the copies", func() bool {
			return object(t, spoke.Client, capGVR, "", "baseline") != nil && object(t, spoke.Client, apGVR, "team", "team-policy") != nil &&
				object(t, spoke.Client, rlpGVR, "team", "edge-limits") != nil
		})
		assertCopy(t, spoke.Client, capGVR, hubBaseline, "fleet")
		assertCopy(t, spoke.Client, apGVR, hubTeam, "fleet")
		if object(t, spoke.Client, capGVR, "", "hub-only") != nil {
			t.Errorf("%s: hub-only, which the selector does not match, was copied", name)
		}
		copied := object(t, spoke.Client, rlpGVR, "team", "edge-limits")
		wantRef := map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "edge"}
		if ref := copied.Object["spec"].(map[string]any)["targetRef"]; !reflect.DeepEqual(ref, wantRef) {
			t.Errorf("%s: targetRef %v, want the spoke's own Gateway %v", name, ref, wantRef)
		}
	}
	assertCopy(t, spokeB.Client, capGVR, hubLocal, "fleet")

	t.Log("a spoke-local object wins and the conflict is reported")
	if a := object(t, spokeA.Client, capGVR, "", "local"); a.GetAnnotations()[syncv1alpha1.SyncedAnnotation] != "" ||
		a.Object["spec"].(map[string]any)["mode"] != "protect" {
		t.Errorf("spoke A's own policy was changed: %v", a.Object)
	}
	// Each spoke's status is written on its own: spoke-b's copy of local
	// may be reported after spoke-a's conflict.
	eventually(t, "spoke-a reports the conflict, spoke-b its copy", func() bool {
		ps := policySync(t, hub.Client, "fleet")
		cs := clusterStatus(ps, "spoke-a")
		return cs != nil && len(cs.Conflicts) == 1 && objectStatusOf(clusterStatus(ps, "spoke-b"), capGVR, "", "local") != nil
	})
	got = policySync(t, hub.Client, "fleet")
	csA := clusterStatus(got, "spoke-a")
	wantConflict := syncv1alpha1.ConflictStatus{Group: capGVR.Group, Resource: capGVR.Resource, Name: "local",
		Message: "a ClusterAdmissionPolicy of the same name was made in the cluster; it wins over the hub's"}
	if !reflect.DeepEqual(csA.Conflicts, []syncv1alpha1.ConflictStatus{wantConflict}) {
		t.Errorf("spoke-a conflicts %+v, want %+v", csA.Conflicts, wantConflict)
	}
	if objectStatusOf(csA, capGVR, "", "local") != nil {
		t.Errorf("spoke-a lists the conflicting object among its synced objects")
	}
	if !csA.Reachable {
		t.Errorf("spoke-a not reachable: %s", csA.Message)
	}
	wantObject := syncv1alpha1.ObjectStatus{Group: capGVR.Group, Resource: capGVR.Resource, Name: "baseline", HubGeneration: 1, Synced: true}
	if o := objectStatusOf(csA, capGVR, "", "baseline"); o == nil || !reflect.DeepEqual(*o, wantObject) {
		t.Errorf("spoke-a baseline status %+v, want %+v", o, wantObject)
	}
	wantLimits := syncv1alpha1.ObjectStatus{Group: rlpGVR.Group, Resource: rlpGVR.Resource, Namespace: "team", Name: "edge-limits",
		HubGeneration: 1, Synced: true, Feedback: map[string]string{"limit": "100"}}
	if o := objectStatusOf(csA, rlpGVR, "team", "edge-limits"); o == nil || !reflect.DeepEqual(*o, wantLimits) {
		t.Errorf("spoke-a edge-limits status %+v, want %+v", o, wantLimits)
	}
	if objectStatusOf(clusterStatus(got, "spoke-b"), capGVR, "", "local") == nil {
		t.Errorf("spoke-b does not list local, which it holds a copy of")
	}

	t.Log("only valid GVRs left: Ready says Conflict")
	got.Spec.PoliciesToSync = got.Spec.PoliciesToSync[:3]
	if err := hub.Client.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Ready is False with reason Conflict", func() bool {
		return readyReason(policySync(t, hub.Client, "fleet")) == "False/Conflict"
	})

	t.Log("feedback from the spokes' copies")
	for _, spoke := range []*clustertest.Cluster{spokeA, spokeB} {
		// Stands in for the spoke's controller, which is not running here.
		p := get(t, spoke.Client, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "baseline"}})
		p.SetStatus(policiesv1.PolicyStatusActive)
		if err := spoke.Client.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "both spokes feed policyStatus back", func() bool {
		ps := policySync(t, hub.Client, "fleet")
		for _, name := range []string{"spoke-a", "spoke-b"} {
			o := objectStatusOf(clusterStatus(ps, name), capGVR, "", "baseline")
			if o == nil || o.Feedback["policyStatus"] != "active" {
				return false
			}
		}
		return true
	})

	t.Log("an update reaches both spokes")
	baseline := get(t, hub.Client, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "baseline"}})
	baseline.Spec.Mode = policiesv1.PolicyModeProtect
	if err := hub.Client.Update(ctx, baseline); err != nil {
		t.Fatal(err)
	}
	hubBaseline = object(t, hub.Client, capGVR, "", "baseline")
	for name, spoke := range map[string]*clustertest.Cluster{"spoke-a": spokeA, "spoke-b": spokeB} {
		eventually(t, name+" holds generation 2", func() bool {
			c := object(t, spoke.Client, capGVR, "", "baseline")
			o := objectStatusOf(clusterStatus(policySync(t, hub.Client, "fleet"), name), capGVR, "", "baseline")
			return c.Object["spec"].(map[string]any)["mode"] == "protect" && o != nil && o.HubGeneration == 2 && o.Synced
		})
		assertCopy(t, spoke.Client, capGVR, hubBaseline, "fleet")
	}

	t.Log("a copy edited in a spoke is put back")
	edited := object(t, spokeB.Client, capGVR, "", "baseline")
	edited.Object["spec"].(map[string]any)["module"] = "registry://example.com/edited-in-the-spoke:v1"
	if err := spokeB.Client.Update(ctx, edited); err != nil {
		t.Fatal(err)
	}
	eventually(t, "spoke-b's copy is mended", func() bool {
		return object(t, spokeB.Client, capGVR, "", "baseline").Object["spec"].(map[string]any)["module"] == hubBaseline.Object["spec"].(map[string]any)["module"]
	})

	t.Log("deleting on the hub deletes the copies only")
	if err := hub.Client.Delete(ctx, syncedPolicy("local", nil, "")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "spoke-b's copy of local is deleted", func() bool { return object(t, spokeB.Client, capGVR, "", "local") == nil })
	eventually(t, "the conflict is gone and Ready is True", func() bool {
		ps := policySync(t, hub.Client, "fleet")
		return len(clusterStatus(ps, "spoke-a").Conflicts) == 0 && readyReason(ps) == "True/Synced"
	})
	if object(t, spokeA.Client, capGVR, "", "local") == nil {
		t.Fatal("spoke A's own policy was deleted with the hub's")
	}

	t.Log("an object that stops matching the selector is deleted from the spokes")
	baseline = get(t, hub.Client, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "baseline"}})
	baseline.Labels = nil
	if err := hub.Client.Update(ctx, baseline); err != nil {
		t.Fatal(err)
	}
	eventually(t, "baseline is deleted from both spokes", func() bool {
		return object(t, spokeA.Client, capGVR, "", "baseline") == nil && object(t, spokeB.Client, capGVR, "", "baseline") == nil
	})

	t.Log("a spoke that goes down is reported and does not hold the other up")
	spokeB.Stop()
	eventually(t, "spoke-b is unreachable", func() bool {
		ps := policySync(t, hub.Client, "fleet")
		cs := clusterStatus(ps, "spoke-b")
		return cs != nil && !cs.Reachable && cs.Message != "" && readyReason(ps) == "False/ClusterUnreachable"
	})
	mustCreate(t, hub.Client, syncedPolicy("late", syncLabel, policiesv1.PolicyModeProtect))
	eventually(t, "spoke-a gets late", func() bool { return object(t, spokeA.Client, capGVR, "", "late") != nil })

	t.Log("the spoke comes back as a new API server, with a new kubeconfig")
	spokeB2 := startSyncCluster(t)
	mustCreate(t, spokeB2.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	secret := get(t, hub.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: syncNamespace, Name: "spoke-b"}})
	secret.Data["kubeconfig"] = clustertest.Kubeconfig(t, spokeB2.Config)
	if err := hub.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, "spoke-b converges", func() bool {
		return object(t, spokeB2.Client, capGVR, "", "late") != nil && object(t, spokeB2.Client, apGVR, "team", "team-policy") != nil &&
			object(t, spokeB2.Client, rlpGVR, "team", "edge-limits") != nil
	})
	eventually(t, "Ready is True again", func() bool {
		ps := policySync(t, hub.Client, "fleet")
		return readyReason(ps) == "True/Synced" && clusterStatus(ps, "spoke-b").Reachable
	})

	t.Log("a selector change on the PolicySync deletes the copies it no longer selects")
	late := get(t, hub.Client, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "late"}})
	late.Labels["tier"] = "gold"
	if err := hub.Client.Update(ctx, late); err != nil {
		t.Fatal(err)
	}
	fleet := policySync(t, hub.Client, "fleet")
	fleet.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"sync": "true", "tier": "gold"}}
	if err := hub.Client.Update(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	for name, spoke := range map[string]*clustertest.Cluster{"spoke-a": spokeA, "spoke-b": spokeB2} {
		eventually(t, name+" keeps late only", func() bool {
			return object(t, spoke.Client, apGVR, "team", "team-policy") == nil && object(t, spoke.Client, rlpGVR, "team", "edge-limits") == nil &&
				object(t, spoke.Client, capGVR, "", "late") != nil
		})
		assertCopy(t, spoke.Client, capGVR, object(t, hub.Client, capGVR, "", "late"), "fleet")
	}

	t.Log("kubeconfig Secrets that cannot be used are reported")
	mustCreate(t, hub.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}})
	mustCreate(t, hub.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "spoke-a"},
		Data: map[string][]byte{"kubeconfig": clustertest.Kubeconfig(t, spokeA.Config)}})
	mustCreate(t, hub.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: syncNamespace, Name: "garbage"},
		Data: map[string][]byte{"kubeconfig": []byte("not: [a kubeconfig")}})
	mustCreate(t, hub.Client, &syncv1alpha1.PolicySync{
		ObjectMeta: metav1.ObjectMeta{Name: "broken"},
		Spec: syncv1alpha1.PolicySyncSpec{
			PoliciesToSync: []syncv1alpha1.GroupVersionResource{{Group: capGVR.Group, Version: "v1", Resource: capGVR.Resource}},
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"nothing": "matches"}},
			Clusters: []syncv1alpha1.Cluster{
				{Name: "other-namespace", KubeconfigSecretRef: syncv1alpha1.SecretKeySelector{Namespace: "elsewhere", Name: "spoke-a"}},
				{Name: "no-secret", KubeconfigSecretRef: syncv1alpha1.SecretKeySelector{Name: "nosuch"}},
				{Name: "no-key", KubeconfigSecretRef: syncv1alpha1.SecretKeySelector{Name: "spoke-a", Key: "other"}},
				{Name: "garbage", KubeconfigSecretRef: syncv1alpha1.SecretKeySelector{Name: "garbage"}},
			},
		},
	})
	wantMessages := map[string]string{
		"other-namespace": "the kubeconfig Secret elsewhere/spoke-a is not in the syncer's namespace kubewarden",
		"no-secret":       "the kubeconfig Secret kubewarden/nosuch does not exist",
		"no-key":          `the kubeconfig Secret kubewarden/spoke-a has no key "other"`,
		"garbage":         "reading the kubeconfig: ",
	}
	eventually(t, "the broken clusters are reported", func() bool {
		ps := policySync(t, hub.Client, "broken")
		for name, message := range wantMessages {
			cs := clusterStatus(ps, name)
			if cs == nil || cs.Reachable || !strings.HasPrefix(cs.Message, message) {
				return false
			}
		}
		return readyReason(ps) == "False/ClusterUnreachable"
	})

	t.Log("deleting the PolicySync deletes its copies")
	if err := hub.Client.Delete(ctx, &syncv1alpha1.PolicySync{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the copies are gone", func() bool {
		for _, spoke := range []*clustertest.Cluster{spokeA, spokeB2} {
			for _, key := range []struct {
				gvr             schema.GroupVersionResource
				namespace, name string
			}{{capGVR, "", "late"}} {
				if object(t, spoke.Client, key.gvr, key.namespace, key.name) != nil {
					return false
				}
			}
		}
		return true
	})
	if object(t, spokeA.Client, capGVR, "", "local") == nil {
		t.Error("spoke A's own policy was deleted with the PolicySync")
	}
	eventually(t, "the PolicySync is gone", func() bool {
		err := hub.Client.Get(ctx, client.ObjectKey{Name: "fleet"}, &syncv1alpha1.PolicySync{})
		return apierrors.IsNotFound(err)
	})
}

// ocmAPI is the directory of the open-cluster-management.io/api module
// that hack/ocm-crds pins, in the module cache (downloaded if need be): its
// CRDs are those of a real OCM hub, not copies kept here.
func ocmAPI(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "open-cluster-management.io/api")
	cmd.Dir = filepath.Join(policybuild.RepoRootForTest(t), "hack", "ocm-crds")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	var module struct{ Dir, Error string }
	if jsonErr := json.Unmarshal(out, &module); err != nil || jsonErr != nil || module.Error != "" || module.Dir == "" {
		t.Fatalf("finding open-cluster-management.io/api in the module cache: %v %s %s", err, module.Error, out)
	}
	return module.Dir
}

// ocmWorkAgent returns OCM's work agent, from WARDEN_OCM_WORK_AGENT
// (hack/cluster-test.sh sets it) or built by hack/ocm-work-agent.sh.
func ocmWorkAgent(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("WARDEN_OCM_WORK_AGENT"); bin != "" {
		return bin
	}
	cmd := exec.Command("hack/ocm-work-agent.sh")
	cmd.Dir = policybuild.RepoRootForTest(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building OCM's work agent: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// runWorkAgent runs OCM's work agent for the managed cluster name: it
// applies the ManifestWorks of the hub namespace name to spoke and reports
// on them, reading status feedback every second. It is stopped when the
// test ends, and its output logged if the test failed.
func runWorkAgent(t *testing.T, bin, name string, hub, spoke *clustertest.Cluster) {
	t.Helper()
	dir := t.TempDir()
	hubKubeconfig, spokeKubeconfig := filepath.Join(dir, "hub.kubeconfig"), filepath.Join(dir, "spoke.kubeconfig")
	for path, cfg := range map[string]*rest.Config{hubKubeconfig: hub.Config, spokeKubeconfig: spoke.Config} {
		if err := os.WriteFile(path, clustertest.Kubeconfig(t, cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logs logtest.Buffer
	cmd := exec.Command(bin, "--hub-kubeconfig", hubKubeconfig, "--spoke-kubeconfig", spokeKubeconfig,
		"--cluster-name", name, "--status-sync-interval", "1s")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("work agent of %s:\n%s", name, logs.String())
		}
	})
}

// TestPolicySyncOCM syncs through Open Cluster Management: a ManifestWork
// per cluster, in the cluster's namespace on the hub. The hub has the CRDs
// of open-cluster-management.io/api (hack/ocm-crds), and OCM's own work
// agent (hack/ocm-work-agent) applies the ManifestWork of edge-1 in a spoke
// API server and reports the feedback. edge-2 is not a ManagedCluster.
func TestPolicySyncOCM(t *testing.T) {
	api, agent := ocmAPI(t), ocmWorkAgent(t)
	scheme, err := policysync.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := policiesv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	hub := clustertest.Start(t, clustertest.WithScheme(scheme), clustertest.WithCRDDirectory("../../config/crd/bases",
		filepath.Join(api, "work", "v1"), filepath.Join(api, "cluster", "v1"),
		filepath.Join(api, "cluster", "v1beta1"), filepath.Join(api, "cluster", "v1beta2")))
	// The spoke has the AppliedManifestWork CRD the agent records its work in.
	spoke := clustertest.Start(t, clustertest.WithScheme(scheme),
		clustertest.WithCRDDirectory("../../config/crd/bases", filepath.Join(api, "work", "v1")))
	ctx := t.Context()
	mustCreate(t, hub.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: syncNamespace}})
	// What OCM's registration makes on the hub for an accepted cluster.
	mustCreate(t, hub.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}})
	mustCreate(t, hub.Client, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
		"metadata": map[string]any{"name": "edge-1"},
		"spec":     map[string]any{"hubAcceptsClient": true},
	}})
	runWorkAgent(t, agent, "edge-1", hub, spoke)

	syncLabel := map[string]string{"sync": "true"}
	mustCreate(t, hub.Client, syncedPolicy("baseline", syncLabel, policiesv1.PolicyModeMonitor))
	syncerLogs := startSyncer(t, hub)
	mustCreate(t, hub.Client, &syncv1alpha1.PolicySync{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
		Spec: syncv1alpha1.PolicySyncSpec{
			PoliciesToSync: []syncv1alpha1.GroupVersionResource{{Group: capGVR.Group, Version: "v1", Resource: capGVR.Resource}},
			Selector:       &metav1.LabelSelector{MatchLabels: syncLabel},
			Placement:      &syncv1alpha1.Placement{ClusterNames: []string{"edge-1", "edge-2"}},
			StatusFeedback: []syncv1alpha1.StatusFeedback{
				{Name: "policyStatus", JSONPath: ".status.policyStatus"},
				{Name: "mode", JSONPath: "{.spec.mode}"},
			},
		},
	})

	workGVK := schema.GroupVersionKind{Group: "work.open-cluster-management.io", Version: "v1", Kind: "ManifestWork"}
	work := func() *unstructured.Unstructured {
		w := &unstructured.Unstructured{}
		w.SetGroupVersionKind(workGVK)
		if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: "edge-1", Name: "policysync-fleet"}, w); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			t.Fatal(err)
		}
		return w
	}
	eventually(t, "the ManifestWork is written", func() bool { return work() != nil })
	w := work()
	hubBaseline := object(t, hub.Client, capGVR, "", "baseline")
	manifests, _, _ := unstructured.NestedSlice(w.Object, "spec", "workload", "manifests")
	if len(manifests) != 1 {
		t.Fatalf("manifests %v, want the one copy", manifests)
	}
	m := manifests[0].(map[string]any)
	wantMeta := map[string]any{"name": "baseline", "labels": map[string]any{"sync": "true"},
		"annotations": map[string]any{"team": "platform", syncv1alpha1.SyncedAnnotation: "fleet"}}
	if m["kind"] != "ClusterAdmissionPolicy" || !reflect.DeepEqual(m["metadata"], wantMeta) || !reflect.DeepEqual(m["spec"], hubBaseline.Object["spec"]) {
		t.Errorf("manifest %v, want the copy of %v", m, hubBaseline.Object)
	}
	configs, _, _ := unstructured.NestedSlice(w.Object, "spec", "manifestConfigs")
	wantConfig := []any{map[string]any{
		"resourceIdentifier": map[string]any{"group": capGVR.Group, "resource": capGVR.Resource, "name": "baseline", "namespace": ""},
		"updateStrategy": map[string]any{"type": "ServerSideApply",
			"serverSideApply": map[string]any{"fieldManager": "work-agent-warden-policy-syncer", "force": false}},
		"feedbackRules": []any{map[string]any{"type": "JSONPaths", "jsonPaths": []any{
			map[string]any{"name": "policyStatus", "path": ".status.policyStatus"},
			map[string]any{"name": "mode", "path": ".spec.mode"},
		}}},
	}}
	if !reflect.DeepEqual(configs, wantConfig) {
		t.Errorf("manifestConfigs %v, want %v", configs, wantConfig)
	}
	// dryRunWork says whether the hub would take a ManifestWork of spec.
	dryRunWork := func(spec map[string]any) error {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetGroupVersionKind(workGVK)
		u.SetNamespace("edge-1")
		u.SetName("probe")
		return hub.Client.Create(ctx, u, client.DryRunAll)
	}
	// The hub validates ManifestWorks with OCM's schema, which takes the
	// agent's field manager only under work-agent.
	spec := w.DeepCopy().Object["spec"].(map[string]any)
	_ = unstructured.SetNestedField(configs[0].(map[string]any), "warden-policy-syncer", "updateStrategy", "serverSideApply", "fieldManager")
	spec["manifestConfigs"] = configs
	if err := dryRunWork(spec); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "work-agent") {
		t.Errorf("a field manager outside work-agent: %v, want it refused by the ManifestWork schema", err)
	}
	eventually(t, "edge-2 has no namespace", func() bool {
		e2 := clusterStatus(policySync(t, hub.Client, "fleet"), "edge-2")
		return e2 != nil && !e2.Reachable && e2.Message == "the hub has no namespace edge-2: is edge-2 a ManagedCluster?"
	})

	fleet := policySync(t, hub.Client, "fleet")
	fleet.Spec.Placement.ClusterNames = []string{"edge-1"}
	if err := hub.Client.Update(ctx, fleet); err != nil {
		t.Fatal(err)
	}

	t.Log("the work agent applies the copy in the spoke and reports it")
	eventually(t, "the spoke holds the copy", func() bool { return object(t, spoke.Client, capGVR, "", "baseline") != nil })
	assertCopy(t, spoke.Client, capGVR, hubBaseline, "fleet")
	if managers := object(t, spoke.Client, capGVR, "", "baseline").GetManagedFields(); len(managers) == 0 || managers[0].Manager != "work-agent-warden-policy-syncer" {
		t.Errorf("the copy's field managers %+v, want work-agent-warden-policy-syncer", managers)
	}
	eventually(t, "edge-1 is synced, with the feedback the agent read", func() bool {
		cs := clusterStatus(policySync(t, hub.Client, "fleet"), "edge-1")
		o := objectStatusOf(cs, capGVR, "", "baseline")
		return cs.Reachable && o != nil && o.Synced && o.HubGeneration == 1 && reflect.DeepEqual(o.Feedback, map[string]string{"mode": "monitor"})
	})
	// Stands in for the spoke's controller, which is not running here.
	p := get(t, spoke.Client, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "baseline"}})
	p.SetStatus(policiesv1.PolicyStatusActive)
	if err := spoke.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the copy's status reaches the PolicySync through the ManifestWork", func() bool {
		o := objectStatusOf(clusterStatus(policySync(t, hub.Client, "fleet"), "edge-1"), capGVR, "", "baseline")
		return o != nil && o.Synced && reflect.DeepEqual(o.Feedback, map[string]string{"policyStatus": "active", "mode": "monitor"})
	})

	t.Log("an update reaches the spoke through the agent")
	baseline := get(t, hub.Client, &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "baseline"}})
	baseline.Spec.Mode = policiesv1.PolicyModeProtect
	if err := hub.Client.Update(ctx, baseline); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the update is applied and synced", func() bool {
		o := objectStatusOf(clusterStatus(policySync(t, hub.Client, "fleet"), "edge-1"), capGVR, "", "baseline")
		return o != nil && o.HubGeneration == 2 && o.Synced && o.Feedback["mode"] == "protect"
	})
	eventually(t, "Ready is True", func() bool { return readyReason(policySync(t, hub.Client, "fleet")) == "True/Synced" })
	assertCopy(t, spoke.Client, capGVR, object(t, hub.Client, capGVR, "", "baseline"), "fleet")

	t.Log("a ManifestWork the hub refuses is reported, and written once the hub takes it")
	// Stands in for a hub admission rule such as OCM's webhook, which
	// refuses ManifestWorks whose manifests are over 500 KiB in all.
	mustCreate(t, hub.Client, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "one-manifest"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{workGVK.Group}, APIVersions: []string{"v1"},
						Resources: []string{"manifestworks"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.spec.workload.manifests.size() <= 1",
				Message:    "this hub takes one manifest per ManifestWork",
			}},
		},
	})
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "one-manifest"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "one-manifest",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	mustCreate(t, hub.Client, binding)
	if err := dryRunWork(map[string]any{"workload": map[string]any{"manifests": []any{m, m}}}); err != nil {
		t.Fatalf("a ManifestWork of two manifests, before the policy: %v", err)
	}
	eventually(t, "the hub refuses a ManifestWork of two manifests", func() bool {
		err := dryRunWork(map[string]any{"workload": map[string]any{"manifests": []any{m, m}}})
		return err != nil && strings.Contains(err.Error(), "this hub takes one manifest per ManifestWork")
	})
	mustCreate(t, hub.Client, syncedPolicy("second", syncLabel, policiesv1.PolicyModeProtect))
	const refused = "the hub refused the ManifestWork edge-1/policysync-fleet: "
	eventually(t, "edge-1 reports the refusal", func() bool {
		ps := policySync(t, hub.Client, "fleet")
		cs := clusterStatus(ps, "edge-1")
		o := objectStatusOf(cs, capGVR, "", "second")
		return cs.Reachable && strings.HasPrefix(cs.Message, refused) && strings.Contains(cs.Message, "this hub takes one manifest per ManifestWork") &&
			o != nil && !o.Synced && readyReason(ps) == "False/SyncFailed"
	})
	if !strings.Contains(syncerLogs.String(), `level=ERROR msg="the hub refused the ManifestWork"`) {
		t.Errorf("the refusal was not logged as an error:\n%s", syncerLogs.String())
	}
	if err := hub.Client.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the ManifestWork is written and applied", func() bool {
		cs := clusterStatus(policySync(t, hub.Client, "fleet"), "edge-1")
		o := objectStatusOf(cs, capGVR, "", "second")
		return cs.Reachable && cs.Message == "" && o != nil && o.Synced && object(t, spoke.Client, capGVR, "", "second") != nil
	})

	t.Log("deleting the PolicySync deletes its ManifestWork, and the agent the copies")
	if err := hub.Client.Delete(ctx, &syncv1alpha1.PolicySync{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the ManifestWork and the copies are deleted", func() bool {
		return work() == nil && object(t, spoke.Client, capGVR, "", "baseline") == nil && object(t, spoke.Client, capGVR, "", "second") == nil
	})
}

// TestPolicySyncChartRBAC runs the syncer with exactly the permissions the
// Helm chart gives it (testdata/policysync-rbac, a copy of the chart's
// rendering kept by hack/charttest), impersonating its ServiceAccount: it
// syncs what it is given and reports, in the status, what it is not.
func TestPolicySyncChartRBAC(t *testing.T) {
	hub, spoke := startSyncCluster(t), startSyncCluster(t)
	ctx := t.Context()
	mustCreate(t, hub.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: syncNamespace}})
	raw, err := os.ReadFile("testdata/policysync-rbac/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, hub.Client, u)
	}
	mustCreate(t, hub.Client, kubeconfigSecret(t, "spoke-a", spoke))
	mustCreate(t, hub.Client, kubeconfigSecret(t, "spoke-b", spoke)) // not granted
	mustCreate(t, hub.Client, syncedPolicy("baseline", map[string]string{"sync": "true"}, policiesv1.PolicyModeProtect))

	cfg := rest.CopyConfig(hub.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + syncNamespace + ":warden-policy-syncer",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + syncNamespace, "system:authenticated"},
	}
	startSyncer(t, &clustertest.Cluster{Config: cfg})
	mustCreate(t, hub.Client, &syncv1alpha1.PolicySync{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
		Spec: syncv1alpha1.PolicySyncSpec{
			PoliciesToSync: []syncv1alpha1.GroupVersionResource{
				{Group: capGVR.Group, Version: "v1", Resource: capGVR.Resource},
				{Group: apGVR.Group, Version: "v1", Resource: apGVR.Resource}, // not granted
			},
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"sync": "true"}},
			Clusters: []syncv1alpha1.Cluster{
				{Name: "spoke-a", KubeconfigSecretRef: syncv1alpha1.SecretKeySelector{Name: "spoke-a"}},
				{Name: "spoke-b", KubeconfigSecretRef: syncv1alpha1.SecretKeySelector{Name: "spoke-b"}},
			},
		},
	})
	eventually(t, "spoke-a holds the copy", func() bool { return object(t, spoke.Client, capGVR, "", "baseline") != nil })
	eventually(t, "the status says what the syncer may not read", func() bool {
		ps := policySync(t, hub.Client, "fleet")
		a, b := clusterStatus(ps, "spoke-a"), clusterStatus(ps, "spoke-b")
		return len(ps.Status.PoliciesToSync) == 2 && ps.Status.PoliciesToSync[0].Valid && a != nil && a.Reachable &&
			objectStatusOf(a, capGVR, "", "baseline") != nil && b != nil && !b.Reachable
	})
	ps := policySync(t, hub.Client, "fleet")
	if got, want := ps.Status.PoliciesToSync[1].Message, "the syncer may not list admissionpolicies.v1.policies.kubewarden.io on the hub"; got != want {
		t.Errorf("admissionpolicies: %q, want %q", got, want)
	}
	if got, want := clusterStatus(ps, "spoke-b").Message, "reading the kubeconfig Secret kubewarden/spoke-b: "; !strings.HasPrefix(got, want) || !strings.Contains(got, "forbidden") {
		t.Errorf("spoke-b: %q, want %q... forbidden", got, want)
	}

	// The finalizer is removed, and the copy deleted, with these rights too.
	if err := hub.Client.Delete(ctx, &syncv1alpha1.PolicySync{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the copy is deleted and the PolicySync gone", func() bool {
		err := hub.Client.Get(ctx, client.ObjectKey{Name: "fleet"}, &syncv1alpha1.PolicySync{})
		return apierrors.IsNotFound(err) && object(t, spoke.Client, capGVR, "", "baseline") == nil
	})
}
