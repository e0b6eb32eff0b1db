package policysync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// Open Cluster Management's ManifestWork (work.open-cluster-management.io/v1).
// Its Go module is not used: the syncer writes and reads the few fields it
// needs as unstructured objects.
var manifestWorkGVR = schema.GroupVersionResource{Group: "work.open-cluster-management.io", Version: "v1", Resource: "manifestworks"}

// manifestWorkLabel names the PolicySync a ManifestWork belongs to.
const manifestWorkLabel = "sync.wardenhq.io/policysync"

// manifestWorkName is the name of a PolicySync's ManifestWork in each
// cluster's namespace.
func manifestWorkName(syncName string) string { return "policysync-" + syncName }

// agentFieldManager is the server-side apply field manager the work agent
// applies the copies with. The ManifestWork API accepts only names that
// start with "work-agent": the agent's own manager, or one under it.
const agentFieldManager = "work-agent-" + fieldManager

// ocmCluster keeps one ManagedCluster of one PolicySync in sync through a
// ManifestWork in the cluster's namespace on the hub, which OCM's work
// agent applies in the cluster; the agent's status and JSONPaths feedback
// come back in the ManifestWork's status. It runs in a goroutine of its
// own, like spoke.
type ocmCluster struct {
	syncName string
	cluster  string
	hub      dynamic.Interface
	resync   time.Duration
	timeout  time.Duration
	logger   *slog.Logger
	changed  func()

	workerState
}

func newOCMCluster(syncName, cluster string, hub dynamic.Interface, resync, timeout time.Duration, logger *slog.Logger, changed func()) *ocmCluster {
	return &ocmCluster{
		syncName:    syncName,
		cluster:     cluster,
		hub:         hub,
		resync:      resync,
		timeout:     timeout,
		logger:      logger.With("policySync", syncName, "managedCluster", cluster),
		changed:     changed,
		workerState: newWorkerState(cluster),
	}
}

// run writes the ManifestWork at each change and reads its status every
// resync period, until ctx is done. After a failure it tries again with a
// backoff doubling from minBackoff to maxBackoff, or at once when the
// desired state changes: a new ManifestWork may be one the hub accepts.
func (o *ocmCluster) run(ctx context.Context) {
	timer := time.NewTimer(o.resync)
	defer timer.Stop()
	var backoff time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.kick:
		case <-timer.C:
		}
		if err := o.pass(ctx); err != nil {
			backoff = o.failed(err, backoff)
			timer.Reset(backoff)
		} else {
			backoff = 0
			timer.Reset(o.resync)
		}
		o.changed()
	}
}

// failed logs a failed pass, and returns how long to wait before the next
// one: the backoff after the previous failure (0: none) doubled, within
// minBackoff and maxBackoff. A ManifestWork the hub refused is an error
// that needs someone to look at it; a hub or a namespace that is not there
// (yet) is not.
func (o *ocmCluster) failed(err error, backoff time.Duration) time.Duration {
	backoff = nextBackoff(backoff)
	var refused *refusedError
	if errors.As(err, &refused) {
		o.logger.Error("the hub refused the ManifestWork", "error", err, "retryIn", backoff)
	} else {
		o.logger.Info("writing the ManifestWork", "error", err, "retryIn", backoff)
	}
	return backoff
}

// cleanup deletes the PolicySync's ManifestWork: the work agent deletes
// the copies it applied.
func (o *ocmCluster) cleanup(ctx context.Context) error {
	err := o.hub.Resource(manifestWorkGVR).Namespace(o.cluster).Delete(ctx, manifestWorkName(o.syncName), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// pass writes the ManifestWork for the desired state, when it changed, and
// reads the cluster's status back from it.
func (o *ocmCluster) pass(ctx context.Context) error {
	o.mu.Lock()
	desired := o.desired
	o.mu.Unlock()
	if desired == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	works := o.hub.Resource(manifestWorkGVR).Namespace(o.cluster)
	var work *unstructured.Unstructured
	var err error
	if len(desired.copies) == 0 {
		err = o.cleanup(ctx) // a ManifestWork holds one manifest at least
	} else {
		work, err = works.Apply(ctx, manifestWorkName(o.syncName), o.manifestWork(desired),
			metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	}
	if err != nil {
		status, err := writeFailure(o.cluster, manifestWorkName(o.syncName), desired, err)
		o.setStatus(status)
		return err
	}
	o.setStatus(workStatus(o.cluster, work, desired))
	return nil
}

// refusedError is a write of a ManifestWork that the hub answered and
// refused: the API's validation (the ManifestWork CRD's schema), an
// admission webhook or policy (OCM's own webhook refuses manifests over
// 500 KiB in all), or the syncer's permissions. Writing the same
// ManifestWork again cannot succeed until something changes.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// writeFailure is the status of a cluster whose ManifestWork work could
// not be written (or deleted), and the error to log. A ManifestWork the
// hub refused leaves the cluster reachable (the hub answered) with the
// API's message, and every object not synced, so that Ready says
// SyncFailed; a hub that did not answer, or a cluster without a namespace
// on the hub, is not reachable.
func writeFailure(cluster, work string, desired *desiredState, err error) (syncv1alpha1.ClusterStatus, error) {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsNotFound(err) && errors.As(err, &status) &&
		status.Status().Details != nil && status.Status().Details.Kind == "namespaces":
		err = fmt.Errorf("the hub has no namespace %s: is %s a ManagedCluster?", cluster, cluster)
	case hubRefused(err):
		err = &refusedError{fmt.Errorf("the hub refused the ManifestWork %s/%s: %w", cluster, work, err)}
		cs := syncv1alpha1.ClusterStatus{Name: cluster, Reachable: true, Message: err.Error()}
		for _, k := range slices.SortedFunc(maps.Keys(desired.copies), compareKeys) {
			cs.Objects = append(cs.Objects, objectStatus(desired.copies[k], false, "not synced: the hub refused the ManifestWork", nil))
		}
		return cs, err
	default:
		err = fmt.Errorf("writing the ManifestWork %s/%s on the hub: %w", cluster, work, err)
	}
	return syncv1alpha1.ClusterStatus{Name: cluster, Message: err.Error()}, err
}

// hubRefused says whether err is the hub's answer refusing a request, as
// opposed to a hub that could not answer (isUnreachable), one that failed
// (5xx), or one that asks to be tried again later (408, 429).
func hubRefused(err error) bool {
	var status apierrors.APIStatus
	if isUnreachable(err) || !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
}

// manifestWork is the ManifestWork holding the copies of desired, with a
// JSONPaths feedback rule per statusFeedback entry for each of them.
// Copies are applied by the agent with server-side apply without force:
// an object made in the cluster with other values is not taken over, and
// the agent reports the conflict in the manifest's Applied condition.
func (o *ocmCluster) manifestWork(desired *desiredState) *unstructured.Unstructured {
	keys := slices.SortedFunc(maps.Keys(desired.copies), compareKeys)
	manifests := make([]any, 0, len(keys))
	configs := make([]any, 0, len(keys))
	var paths []any
	for _, f := range desired.feedback {
		paths = append(paths, map[string]any{"name": f.Name, "path": agentJSONPath(f.JSONPath)})
	}
	for _, k := range keys {
		manifests = append(manifests, desired.copies[k].object.Object)
		config := map[string]any{
			"resourceIdentifier": map[string]any{"group": k.gvr.Group, "resource": k.gvr.Resource, "name": k.name, "namespace": k.namespace},
			"updateStrategy":     map[string]any{"type": "ServerSideApply", "serverSideApply": map[string]any{"fieldManager": agentFieldManager, "force": false}},
		}
		if len(paths) > 0 {
			config["feedbackRules"] = []any{map[string]any{"type": "JSONPaths", "jsonPaths": paths}}
		}
		configs = append(configs, config)
	}
	w := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"workload":        map[string]any{"manifests": manifests},
			"manifestConfigs": configs,
		},
	}}
	w.SetAPIVersion(manifestWorkGVR.GroupVersion().String())
	w.SetKind("ManifestWork")
	w.SetNamespace(o.cluster)
	w.SetName(manifestWorkName(o.syncName))
	w.SetLabels(map[string]string{manifestWorkLabel: o.syncName})
	return w
}

// agentJSONPath is a statusFeedback JSONPath as the work agent takes it:
// the agent puts the braces around the path itself, so the ones the
// PolicySync may have (kubectl's syntax) are taken off. The agent reads
// the path from the whole object, as the direct transport does.
func agentJSONPath(path string) string {
	path = strings.TrimSpace(path)
	if strings.HasPrefix(path, "{") && strings.HasSuffix(path, "}") {
		path = path[1 : len(path)-1]
	}
	return path
}

// workStatus reads a cluster's status from its ManifestWork: the cluster
// is reachable once the work agent has reported on the ManifestWork, and an
// object is synced when the agent applied it at the ManifestWork's
// current generation.
func workStatus(cluster string, work *unstructured.Unstructured, desired *desiredState) syncv1alpha1.ClusterStatus {
	status := syncv1alpha1.ClusterStatus{Name: cluster}
	if work == nil {
		status.Reachable = true // nothing to hold: no ManifestWork
		return status
	}
	conditions, _, _ := unstructured.NestedSlice(work.Object, "status", "conditions")
	if len(conditions) == 0 {
		status.Message = fmt.Sprintf("the work agent of %s has not reported on ManifestWork %s yet", cluster, work.GetName())
	}
	status.Reachable = len(conditions) > 0
	current := false
	for _, c := range conditions {
		c, _ := c.(map[string]any)
		if c["type"] == "Applied" {
			generation, _, _ := unstructured.NestedInt64(c, "observedGeneration")
			current = generation == work.GetGeneration()
		}
	}

	reported := map[objectKey]map[string]any{}
	manifests, _, _ := unstructured.NestedSlice(work.Object, "status", "resourceStatus", "manifests")
	for _, m := range manifests {
		m, _ := m.(map[string]any)
		meta, _ := m["resourceMeta"].(map[string]any)
		key := statusKey(str(meta["group"]), str(meta["resource"]), str(meta["namespace"]), str(meta["name"]))
		reported[key] = m
	}
	for _, k := range slices.SortedFunc(maps.Keys(desired.copies), compareKeys) {
		c := desired.copies[k]
		m := reported[statusKey(k.gvr.Group, k.gvr.Resource, k.namespace, k.name)]
		switch applied, message := manifestApplied(m); {
		case m == nil || !current:
			status.Objects = append(status.Objects, objectStatus(c, false, "not applied by the work agent yet", nil))
		case !applied:
			status.Objects = append(status.Objects, objectStatus(c, false, message, nil))
		default:
			status.Objects = append(status.Objects, objectStatus(c, true, "", manifestFeedback(m)))
		}
	}
	return status
}

// manifestApplied reads a manifest's Applied condition.
func manifestApplied(m map[string]any) (bool, string) {
	conditions, _, _ := unstructured.NestedSlice(m, "conditions")
	for _, c := range conditions {
		c, _ := c.(map[string]any)
		if c["type"] == "Applied" {
			return c["status"] == "True", str(c["message"])
		}
	}
	return false, "not applied by the work agent yet"
}

// manifestFeedback reads the values of a manifest's feedback rules as
// strings, as the direct transport reports them.
func manifestFeedback(m map[string]any) map[string]string {
	values, _, _ := unstructured.NestedSlice(m, "statusFeedback", "values")
	out := map[string]string{}
	for _, v := range values {
		v, _ := v.(map[string]any)
		field, _ := v["fieldValue"].(map[string]any)
		name := str(v["name"])
		switch field["type"] {
		case "String":
			out[name] = str(field["string"])
		case "Integer":
			if i, ok, _ := unstructured.NestedInt64(field, "integer"); ok {
				out[name] = strconv.FormatInt(i, 10)
			}
		case "Boolean":
			if b, ok, _ := unstructured.NestedBool(field, "boolean"); ok {
				out[name] = strconv.FormatBool(b)
			}
		case "JsonRaw":
			out[name] = str(field["jsonRaw"])
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
