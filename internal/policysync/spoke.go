package policysync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// fieldManager is the syncer's server-side apply field manager in spokes.
const fieldManager = "warden-policy-syncer"

// maxBackoff caps the delay between two attempts to reach a spoke that
// failed.
const maxBackoff = 30 * time.Second

// minBackoff is the delay after a spoke's first failure.
const minBackoff = time.Second

// nextBackoff is the delay after a failure that follows one retried after
// backoff (0 for the first failure): twice as long, within minBackoff and
// maxBackoff.
func nextBackoff(backoff time.Duration) time.Duration {
	return min(max(2*backoff, minBackoff), maxBackoff)
}

// desiredState is what one PolicySync wants in one spoke.
type desiredState struct {
	// gvrs are the valid resources of the PolicySync: the spoke's objects
	// of these resources are compared with copies.
	gvrs []schema.GroupVersionResource
	// copies holds one copy per selected hub object.
	copies map[objectKey]spokeCopy
	// feedback are the PolicySync's statusFeedback rules, checked by
	// compileFeedback. Each pass compiles its own: a compiled JSONPath
	// cannot be used by two goroutines at once.
	feedback []syncv1alpha1.StatusFeedback
	// digest identifies the whole state, to tell whether it changed.
	digest string
}

// sameShape says whether d syncs the same resources with the same
// feedback as o: only then can a pass bring a spoke from o to d
// incrementally.
func (d *desiredState) sameShape(o *desiredState) bool {
	return slices.Equal(d.gvrs, o.gvrs) && slices.Equal(d.feedback, o.feedback)
}

// applied is what the syncer knows of a copy it wrote: while the spoke's
// object keeps its uid and generation, and the copy its digest, the copy
// needs no new apply.
type applied struct {
	digest     string
	uid        types.UID
	generation int64
}

// spoke keeps one cluster of one PolicySync in sync with the hub. It runs
// in a goroutine of its own (run), so that a slow or unreachable cluster
// holds up no other: the reconciler hands it a desired state and a client
// configuration, and reads back its status.
type spoke struct {
	syncName string
	cluster  string
	resync   time.Duration
	timeout  time.Duration
	logger   *slog.Logger
	// changed is called after each pass, with the spoke's new status.
	changed func()

	workerState
	// Guarded by workerState.mu: kubeconfig is the content of the
	// cluster's kubeconfig Secret, or readErr why it could not be read, as
	// last handed over (configSet once they were); config is the client
	// configuration read from it, and configErr says why there is none.
	kubeconfig []byte
	readErr    error
	configSet  bool
	config     *rest.Config
	configErr  error
	// configChanged is set when a new configuration arrives, so that the
	// next kick is tried at once even during a backoff.
	configChanged bool

	// Owned by run's goroutine.
	client    dynamic.Interface
	clientCfg *rest.Config // the configuration client was made for
	// applied holds the copies the spoke is known to hold.
	applied map[objectKey]applied
	// objects and conflicts are the status of each desired object, as of
	// the last pass.
	objects   map[objectKey]syncv1alpha1.ObjectStatus
	conflicts map[objectKey]syncv1alpha1.ConflictStatus
	// last is the desired state the last pass reached, nil when the next
	// pass must be a full one.
	last        *desiredState
	touchedGVRs map[schema.GroupVersionResource]bool
}

func newSpoke(syncName, cluster string, resync, timeout time.Duration, logger *slog.Logger, changed func()) *spoke {
	return &spoke{
		syncName:    syncName,
		cluster:     cluster,
		resync:      resync,
		timeout:     timeout,
		logger:      logger.With("policySync", syncName, "cluster", cluster),
		changed:     changed,
		workerState: newWorkerState(cluster),
		applied:     map[objectKey]applied{},
		objects:     map[objectKey]syncv1alpha1.ObjectStatus{},
		conflicts:   map[objectKey]syncv1alpha1.ConflictStatus{},
		touchedGVRs: map[schema.GroupVersionResource]bool{},
	}
}

// setKubeconfig hands the spoke the content of its kubeconfig Secret, or
// why it could not be read. A new kubeconfig is tried at once, even during
// a backoff.
func (s *spoke) setKubeconfig(kubeconfig []byte, readErr error) {
	s.mu.Lock()
	// The same Secret content, or the same reason it cannot be read, is
	// no news, whether or not it made a usable configuration: a poke then
	// would retry a kubeconfig known to be unusable at once, again and
	// again, as the status it reports comes back through the reconciler.
	unchanged := s.configSet && (readErr == nil && s.readErr == nil && bytes.Equal(kubeconfig, s.kubeconfig) ||
		readErr != nil && s.readErr != nil && readErr.Error() == s.readErr.Error())
	if !unchanged {
		s.configSet = true
		s.kubeconfig, s.readErr, s.config, s.configErr = kubeconfig, readErr, nil, readErr
		if readErr == nil {
			s.config, s.configErr = clientcmd.RESTConfigFromKubeConfig(kubeconfig)
			if s.configErr != nil {
				s.configErr = fmt.Errorf("reading the kubeconfig: %w", s.configErr)
			}
		}
		s.configChanged = true
	}
	s.mu.Unlock()
	if !unchanged {
		s.poke()
	}
}

// run syncs until ctx is done: at each kick, and every resync period, or
// after a failure with a backoff doubling from minBackoff to maxBackoff. A
// kick after a successful pass makes an incremental pass; the others are
// full passes.
func (s *spoke) run(ctx context.Context) {
	timer := time.NewTimer(s.resync)
	defer timer.Stop()
	var backoff time.Duration
	for {
		full := true
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			s.mu.Lock()
			retryNow := s.configChanged
			s.configChanged = false
			s.mu.Unlock()
			if backoff > 0 && !retryNow {
				continue // the timer retries
			}
			full = retryNow
		case <-timer.C:
		}
		if err := s.pass(ctx, full); err != nil {
			backoff = nextBackoff(backoff)
			s.logger.Info("cluster unreachable", "error", err, "retryIn", backoff)
			timer.Reset(backoff)
		} else {
			backoff = 0
			timer.Reset(s.resync)
		}
		s.changed()
	}
}

// cleanup deletes the copies the spoke's PolicySync made, once: the
// PolicySync was deleted or no longer names the cluster.
func (s *spoke) cleanup(ctx context.Context) error {
	s.mu.Lock()
	s.desired = &desiredState{}
	s.mu.Unlock()
	return s.pass(ctx, true)
}

// unreachableError is a failure to talk to a spoke's API server at all, as
// opposed to the API server refusing one request.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// pass brings the spoke to the desired state once: it creates and updates
// copies, deletes the copies of objects no longer desired, and records
// conflicts and feedback. A full pass lists the spoke's objects of every
// resource and compares them all; an incremental one only writes what
// changed in the desired state since the last pass, and falls back to a
// full pass when the spoke surprises it. pass returns an unreachableError
// when the spoke's API server could not be reached; the status then keeps
// the objects of the last pass.
func (s *spoke) pass(ctx context.Context, full bool) error {
	s.mu.Lock()
	desired, cfg, cfgErr := s.desired, s.config, s.configErr
	s.mu.Unlock()
	if desired == nil || cfg == nil && cfgErr == nil {
		return nil // the reconciler has not said what to sync, or where, yet
	}
	if cfgErr != nil {
		return s.unreachable(cfgErr)
	}
	client, err := s.clientFor(cfg)
	if err != nil {
		return s.unreachable(err)
	}
	feedback, err := compileFeedback(desired.feedback)
	if err != nil {
		return s.unreachable(err) // checked by the reconciler: not reached
	}

	if !full && s.last != nil && s.last.sameShape(desired) {
		err = s.update(ctx, client, desired, feedback)
		if errors.Is(err, errNeedFullPass) {
			full = true
		} else if err != nil {
			return s.unreachable(err)
		}
	} else {
		full = true
	}
	if full {
		s.objects = map[objectKey]syncv1alpha1.ObjectStatus{}
		s.conflicts = map[objectKey]syncv1alpha1.ConflictStatus{}
		gvrs := slices.Clone(desired.gvrs)
		for gvr := range s.touchedGVRs {
			if !slices.Contains(gvrs, gvr) {
				gvrs = append(gvrs, gvr) // to delete the copies of a resource no longer synced
			}
		}
		for _, gvr := range gvrs {
			if err := s.syncResource(ctx, client, gvr, desired, feedback); err != nil {
				return s.unreachable(err)
			}
		}
	}
	s.last = desired

	status := syncv1alpha1.ClusterStatus{Name: s.cluster, Reachable: true}
	status.Objects = slices.SortedFunc(maps.Values(s.objects), compareObjectStatus)
	status.Conflicts = slices.SortedFunc(maps.Values(s.conflicts), compareConflictStatus)
	s.setStatus(status)
	return nil
}

// errNeedFullPass: an incremental pass met a spoke that is not as the last
// pass left it.
var errNeedFullPass = errors.New("the cluster changed: compare it all")

// update is an incremental pass: it applies the copies whose digest
// changed since the last pass and deletes those no longer desired, without
// listing the spoke.
func (s *spoke) update(ctx context.Context, client dynamic.Interface, desired *desiredState, feedback []feedbackRule) error {
	for key, c := range desired.copies {
		var was *spokeCopy
		if p, ok := s.last.copies[key]; ok {
			was = &p
		}
		_, conflict := s.conflicts[key]
		a, known := s.applied[key]
		v := decideChange(&c, was, conflict, a, known)
		if v.action != actionApply {
			continue // unchanged, or the spoke's own object still wins
		}
		obj, err := s.apply(ctx, client, c, v.uid)
		if err != nil {
			var unreachable *unreachableError
			if errors.As(err, &unreachable) {
				return err
			}
			return errNeedFullPass
		}
		s.objects[key] = objectStatus(c, true, "", readFeedback(feedback, obj))
	}
	for key, was := range s.last.copies {
		if _, ok := desired.copies[key]; ok {
			continue
		}
		delete(s.objects, key)
		delete(s.conflicts, key)
		a, known := s.applied[key]
		if v := decideChange(nil, &was, false, a, known); v.action == actionDelete {
			if err := s.delete(ctx, client, key, v.uid); err != nil {
				var unreachable *unreachableError
				if errors.As(err, &unreachable) {
					return err
				}
				return errNeedFullPass
			}
		}
	}
	return nil
}

// unreachable records err as the reason the spoke cannot be reached, and
// returns it as an unreachableError.
func (s *spoke) unreachable(err error) error {
	s.last = nil
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status.Reachable = false
	s.status.Message = err.Error()
	s.reported = true
	var u *unreachableError
	if errors.As(err, &u) {
		return err
	}
	return &unreachableError{err}
}

// clientFor returns a dynamic client for cfg, made once per configuration.
func (s *spoke) clientFor(cfg *rest.Config) (dynamic.Interface, error) {
	if s.client != nil && s.clientCfg == cfg {
		return s.client, nil
	}
	c := rest.CopyConfig(cfg)
	c.Timeout = s.timeout
	c.UserAgent = fieldManager
	// The spoke's worker sends one request at a time: client-go's default
	// limit of 5 a second would make the first sync of many objects slow.
	c.QPS, c.Burst = 200, 400
	client, err := dynamic.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("making a client from the kubeconfig: %w", err)
	}
	s.client, s.clientCfg = client, cfg
	return client, nil
}

// syncResource lists the spoke's objects of one resource, mends them, and
// records their status.
func (s *spoke) syncResource(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource,
	desired *desiredState, feedback []feedbackRule) error {
	// From the API server's watch cache: cheaper than a quorum read, and
	// a stale answer only makes the pass apply or delete once more.
	list, err := client.Resource(gvr).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		if isUnreachable(err) {
			return &unreachableError{err}
		}
		message := fmt.Sprintf("listing %s in the cluster: %v", gvr.GroupResource(), err)
		if apierrors.IsNotFound(err) {
			message = fmt.Sprintf("the cluster does not serve %s", gvr.GroupResource())
		}
		for key, c := range desired.copies {
			if key.gvr == gvr {
				s.objects[key] = objectStatus(c, false, message, nil)
			}
		}
		return nil
	}

	actual := make(map[objectKey]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		o := &list.Items[i]
		actual[objectKey{gvr: gvr, namespace: o.GetNamespace(), name: o.GetName()}] = o
	}
	for key, c := range desired.copies {
		if key.gvr != gvr {
			continue
		}
		s.touchedGVRs[gvr] = true
		obj := actual[key]
		a, known := s.applied[key]
		switch v := decideObject(s.syncName, &c, obj, a, known); v.action {
		case actionConflict:
			s.conflicts[key] = conflictStatus(key, v.reason)
			continue
		case actionApply:
			obj, err = s.apply(ctx, client, c, v.uid)
			if err != nil {
				var unreachable *unreachableError
				switch {
				case errors.As(err, &unreachable):
					return err
				case apierrors.IsConflict(err):
					// Made in the cluster between the list and the apply:
					// the next pass sees it and reports the conflict.
					s.objects[key] = objectStatus(c, false, "changed in the cluster while it was synced; retrying", nil)
				default:
					s.objects[key] = objectStatus(c, false, err.Error(), nil)
				}
				continue
			}
		}
		s.objects[key] = objectStatus(c, true, "", readFeedback(feedback, obj))
	}

	remaining := 0
	for key, obj := range actual {
		if _, ok := desired.copies[key]; ok {
			continue
		}
		a, known := s.applied[key]
		v := decideObject(s.syncName, nil, obj, a, known)
		if v.action != actionDelete {
			continue
		}
		if err := s.delete(ctx, client, key, v.uid); err != nil {
			var unreachable *unreachableError
			if errors.As(err, &unreachable) {
				return err
			}
			s.logger.Warn("deleting a copy", "object", key.String(), "error", err)
			remaining++
		}
	}
	if remaining == 0 && !slices.Contains(desired.gvrs, gvr) {
		delete(s.touchedGVRs, gvr)
	}
	return nil
}

// apply writes c to the spoke with server-side apply. A copy the spoke
// holds (uid, its object's, not empty) is applied with force, since the
// syncer owns it, and with its uid, which the API server refuses to change:
// an object deleted and made again in the cluster in between is not
// overwritten. A new copy is applied without force: an object made in the
// cluster meanwhile with other values makes the apply fail with a conflict
// instead of being taken over.
func (s *spoke) apply(ctx context.Context, client dynamic.Interface, c spokeCopy, uid types.UID) (*unstructured.Unstructured, error) {
	obj := c.object
	if uid != "" {
		obj = obj.DeepCopy()
		obj.SetUID(uid)
	}
	out, err := client.Resource(c.key.gvr).Namespace(c.key.namespace).Apply(ctx, c.key.name, obj,
		metav1.ApplyOptions{FieldManager: fieldManager, Force: uid != ""})
	if err != nil {
		if isUnreachable(err) {
			return nil, &unreachableError{err}
		}
		if apierrors.IsNotFound(err) && c.key.namespace != "" {
			return nil, fmt.Errorf("namespace %s does not exist in the cluster", c.key.namespace)
		}
		return nil, fmt.Errorf("applying the copy: %w", err)
	}
	s.applied[c.key] = applied{digest: c.digest, uid: out.GetUID(), generation: out.GetGeneration()}
	return out, nil
}

// delete deletes a copy the syncer made, if it is still the object of uid.
func (s *spoke) delete(ctx context.Context, client dynamic.Interface, key objectKey, uid types.UID) error {
	err := client.Resource(key.gvr).Namespace(key.namespace).Delete(ctx, key.name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(uid)}})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		delete(s.applied, key)
		return nil
	case isUnreachable(err):
		return &unreachableError{err}
	}
	return err
}

// isUnreachable says whether err means the spoke's API server could not
// be used at all: no HTTP answer (connection refused, timeout), an answer
// saying it is unavailable, or credentials it refuses.
func isUnreachable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	switch status.Status().Code {
	case http.StatusUnauthorized, http.StatusServiceUnavailable, http.StatusGatewayTimeout, 0:
		return true
	}
	return false
}

func objectStatus(c spokeCopy, synced bool, message string, feedback map[string]string) syncv1alpha1.ObjectStatus {
	return syncv1alpha1.ObjectStatus{
		Group:         c.key.gvr.Group,
		Resource:      c.key.gvr.Resource,
		Name:          c.key.name,
		Namespace:     c.key.namespace,
		HubGeneration: c.hubGeneration,
		Synced:        synced,
		Message:       message,
		Feedback:      feedback,
	}
}

func conflictStatus(key objectKey, message string) syncv1alpha1.ConflictStatus {
	return syncv1alpha1.ConflictStatus{
		Group:     key.gvr.Group,
		Resource:  key.gvr.Resource,
		Name:      key.name,
		Namespace: key.namespace,
		Message:   message,
	}
}

func compareObjectStatus(a, b syncv1alpha1.ObjectStatus) int {
	return compareKeys(statusKey(a.Group, a.Resource, a.Namespace, a.Name), statusKey(b.Group, b.Resource, b.Namespace, b.Name))
}

func compareConflictStatus(a, b syncv1alpha1.ConflictStatus) int {
	return compareKeys(statusKey(a.Group, a.Resource, a.Namespace, a.Name), statusKey(b.Group, b.Resource, b.Namespace, b.Name))
}

func statusKey(group, resource, namespace, name string) objectKey {
	return objectKey{gvr: schema.GroupVersionResource{Group: group, Resource: resource}, namespace: namespace, name: name}
}
