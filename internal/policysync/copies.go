package policysync

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// objectKey names one object of a synced resource, the same on the hub and
// in every spoke.
type objectKey struct {
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

func (k objectKey) String() string {
	if k.namespace == "" {
		return fmt.Sprintf("%s %s", k.gvr.GroupResource(), k.name)
	}
	return fmt.Sprintf("%s %s/%s", k.gvr.GroupResource(), k.namespace, k.name)
}

func compareKeys(a, b objectKey) int {
	return cmp.Or(
		cmp.Compare(a.gvr.Group, b.gvr.Group),
		cmp.Compare(a.gvr.Resource, b.gvr.Resource),
		cmp.Compare(a.gvr.Version, b.gvr.Version),
		cmp.Compare(a.namespace, b.namespace),
		cmp.Compare(a.name, b.name),
	)
}

// spokeCopy is what a spoke should hold for one hub object.
type spokeCopy struct {
	key objectKey
	// hubGeneration is the hub object's metadata.generation.
	hubGeneration int64
	// object is the copy, as applied to the spoke.
	object *unstructured.Unstructured
	// digest identifies object's content: a copy applied with the same
	// digest, and not changed in the spoke since, needs no new apply.
	digest string
}

// makeCopy returns the copy of hub made by the PolicySync syncName: the
// hub object's spec, labels and annotations, plus SyncedAnnotation. A
// .spec.targetRef is retargeted: see retarget.
func makeCopy(gvr schema.GroupVersionResource, hub *unstructured.Unstructured, syncName string) (spokeCopy, error) {
	annotations := maps.Clone(hub.GetAnnotations())
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[syncv1alpha1.SyncedAnnotation] = syncName

	c := &unstructured.Unstructured{Object: map[string]any{}}
	c.SetAPIVersion(hub.GetAPIVersion())
	c.SetKind(hub.GetKind())
	c.SetName(hub.GetName())
	c.SetNamespace(hub.GetNamespace())
	if labels := hub.GetLabels(); len(labels) > 0 {
		c.SetLabels(labels)
	}
	c.SetAnnotations(annotations)
	if spec, ok := hub.Object["spec"].(map[string]any); ok {
		spec = runtime.DeepCopyJSON(spec)
		retarget(spec)
		c.Object["spec"] = spec
	}

	raw, err := json.Marshal(c.Object) // map keys are sorted: the digest is stable
	if err != nil {
		return spokeCopy{}, fmt.Errorf("encoding the copy of %s/%s: %w", hub.GetNamespace(), hub.GetName(), err)
	}
	sum := sha256.Sum256(raw)
	return spokeCopy{
		key:           objectKey{gvr: gvr, namespace: hub.GetNamespace(), name: hub.GetName()},
		hubGeneration: hub.GetGeneration(),
		object:        c,
		digest:        hex.EncodeToString(sum[:]),
	}, nil
}

// retarget points a policy's .spec.targetRef at the spoke's own target:
// the object of the same group, kind and name (and namespace, when the
// reference has one) in the spoke. The reference keeps those fields and
// sectionName; fields that identify one object of the hub (uid,
// resourceVersion) are dropped, since the spoke's target is another object.
func retarget(spec map[string]any) {
	ref, ok := spec["targetRef"].(map[string]any)
	if !ok {
		return
	}
	delete(ref, "uid")
	delete(ref, "resourceVersion")
}

// cachedCopy is the copy of a hub object made at its resourceVersion.
type cachedCopy struct {
	resourceVersion string
	copy            spokeCopy
}

// desiredCopies builds the copies the PolicySync ps wants in every
// cluster from the hub watches' caches (stores), reusing those st holds of
// unchanged hub objects.
func desiredCopies(ps *syncv1alpha1.PolicySync, st *syncState, stores map[schema.GroupVersionResource]cache.Store) (*desiredState, error) {
	selector := labels.Everything()
	if ps.Spec.Selector != nil {
		var err error
		if selector, err = metav1.LabelSelectorAsSelector(ps.Spec.Selector); err != nil {
			return nil, fmt.Errorf("spec.selector: %w", err)
		}
	}
	if _, err := compileFeedback(ps.Spec.StatusFeedback); err != nil {
		return nil, err
	}
	d := &desiredState{copies: map[objectKey]spokeCopy{}, feedback: ps.Spec.StatusFeedback}
	hash := sha256.New()
	copies := make(map[types.UID]cachedCopy, len(st.copies))
	for _, r := range st.resources {
		if r.err != nil {
			continue
		}
		d.gvrs = append(d.gvrs, r.gvr)
		fmt.Fprintf(hash, "gvr %s\n", r.gvr)
		for _, item := range stores[r.gvr].List() {
			obj, ok := item.(*unstructured.Unstructured)
			if !ok || !selector.Matches(labels.Set(obj.GetLabels())) {
				continue
			}
			cached, ok := st.copies[obj.GetUID()]
			if !ok || cached.resourceVersion != obj.GetResourceVersion() {
				c, err := makeCopy(r.gvr, obj, ps.Name)
				if err != nil {
					return nil, err
				}
				cached = cachedCopy{resourceVersion: obj.GetResourceVersion(), copy: c}
			}
			copies[obj.GetUID()] = cached
			d.copies[cached.copy.key] = cached.copy
		}
	}
	st.copies = copies
	keys := slices.SortedFunc(maps.Keys(d.copies), compareKeys)
	for _, k := range keys {
		fmt.Fprintf(hash, "%s %d %s\n", k, d.copies[k].hubGeneration, d.copies[k].digest)
	}
	for _, f := range ps.Spec.StatusFeedback {
		fmt.Fprintf(hash, "feedback %q %q\n", f.Name, f.JSONPath)
	}
	d.digest = hex.EncodeToString(hash.Sum(nil))
	return d, nil
}
