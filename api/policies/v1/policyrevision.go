package v1

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
)

// revisionData is the shape of PolicyRevision spec.data.
//
// +kubebuilder:object:generate=false
type revisionData struct {
	Spec json.RawMessage `json:"spec"`
}

// NewPolicyReference returns the reference to p that a PolicyRevision of p
// carries in spec.objectReference.
func NewPolicyReference(p Policy) PolicyReference {
	return PolicyReference{
		APIVersion: GroupVersion.String(),
		Kind:       PolicyKind(p),
		Name:       p.GetName(),
		Namespace:  p.GetNamespace(),
		UID:        p.GetUID(),
	}
}

// NewPolicyRevisionData returns the spec.data of a PolicyRevision of p: an
// object whose only key, "spec", holds p's spec.
func NewPolicyRevisionData(p Policy) (runtime.RawExtension, error) {
	spec, err := policySpec(p)
	if err != nil {
		return runtime.RawExtension{}, err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return runtime.RawExtension{}, fmt.Errorf("encoding spec of %s %q: %w", PolicyKind(p), p.GetName(), err)
	}
	data, err := json.Marshal(revisionData{Spec: raw})
	if err != nil {
		return runtime.RawExtension{}, fmt.Errorf("encoding revision data of %s %q: %w", PolicyKind(p), p.GetName(), err)
	}
	return runtime.RawExtension{Raw: data}, nil
}

// DecodePolicy returns the policy the revision holds: a new object of the
// referenced kind whose spec is decoded from spec.data, named, namespaced
// and identified (UID) as spec.objectReference says, with
// metadata.generation set to spec.policyGeneration. Fields of the spec that
// this version of the API does not know are ignored.
func (r *PolicyRevision) DecodePolicy() (Policy, error) {
	ref := r.Spec.ObjectReference
	p := NewPolicy(ref.Kind)
	if p == nil {
		return nil, fmt.Errorf("PolicyRevision %q refers to kind %q, which is not a policy kind", r.Name, ref.Kind)
	}
	raw := r.Spec.Data.Raw
	if len(raw) == 0 && r.Spec.Data.Object != nil {
		var err error
		if raw, err = json.Marshal(r.Spec.Data.Object); err != nil {
			return nil, fmt.Errorf("encoding data of PolicyRevision %q: %w", r.Name, err)
		}
	}
	var data revisionData
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, fmt.Errorf("decoding data of PolicyRevision %q: %w", r.Name, err)
	}
	if len(data.Spec) == 0 || string(data.Spec) == "null" {
		return nil, fmt.Errorf("decoding data of PolicyRevision %q: %w", r.Name, errors.New("no spec"))
	}
	spec, err := policySpec(p)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data.Spec, spec); err != nil {
		return nil, fmt.Errorf("decoding spec in PolicyRevision %q: %w", r.Name, err)
	}
	p.GetObjectKind().SetGroupVersionKind(GroupVersion.WithKind(ref.Kind))
	p.SetName(ref.Name)
	p.SetNamespace(ref.Namespace)
	p.SetUID(ref.UID)
	p.SetGeneration(r.Spec.PolicyGeneration)
	return p, nil
}

// ApplyTo replaces p's spec with the one the revision holds: the rollback
// of p to the revision. Fields this version of the API does not know are
// ignored.
func (r *PolicyRevision) ApplyTo(p Policy) error {
	old, err := r.DecodePolicy()
	if err != nil {
		return err
	}
	if PolicyKind(old) != PolicyKind(p) {
		return fmt.Errorf("PolicyRevision %q holds a %s, not a %s", r.Name, PolicyKind(old), PolicyKind(p))
	}
	from, err := policySpec(old)
	if err != nil {
		return err
	}
	to, err := policySpec(p)
	if err != nil {
		return err
	}
	reflect.ValueOf(to).Elem().Set(reflect.ValueOf(from).Elem())
	return nil
}

// policySpec returns a pointer to the spec of p.
func policySpec(p Policy) (any, error) {
	switch p := p.(type) {
	case *ClusterAdmissionPolicy:
		return &p.Spec, nil
	case *AdmissionPolicy:
		return &p.Spec, nil
	case *ClusterAdmissionPolicyGroup:
		return &p.Spec, nil
	case *AdmissionPolicyGroup:
		return &p.Spec, nil
	default:
		return nil, fmt.Errorf("%T is not a policy kind", p)
	}
}
