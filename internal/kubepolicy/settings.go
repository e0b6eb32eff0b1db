package kubepolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"
)

// The kinds a Policy can be, as its manifest names them.
const (
	KindVAP = "ValidatingAdmissionPolicy"
	KindMAP = "MutatingAdmissionPolicy"
)

// The kinds of their bindings.
const (
	kindVAPBinding = "ValidatingAdmissionPolicyBinding"
	kindMAPBinding = "MutatingAdmissionPolicyBinding"
)

// settings is the raw shape of builtin://vap and builtin://map settings.
type settings struct {
	Policy     json.RawMessage   `json:"policy"`
	Bindings   []json.RawMessage `json:"bindings"`
	Params     []json.RawMessage `json:"params"`
	Namespaces []json.RawMessage `json:"namespaces"`
}

// manifests are the decoded settings: exactly one of vap and mapPolicy is
// set, with bindings of its own kind.
type manifests struct {
	vap         *admissionregistrationv1.ValidatingAdmissionPolicy
	vapBindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	mapPolicy   *admissionregistrationv1.MutatingAdmissionPolicy
	mapBindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	params      []*unstructured.Unstructured
	namespaces  []*corev1.Namespace
}

// decodeSettings reads settings. Manifests are decoded strictly, as kubectl
// sends them with field validation Strict: an unknown field is an error.
func decodeSettings(raw []byte) (*manifests, error) {
	var s settings
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decoding settings: %w", err)
	}
	if len(s.Policy) == 0 || string(s.Policy) == "null" {
		return nil, errors.New("settings: policy is required")
	}
	m := &manifests{}
	tm, err := typeMeta(s.Policy)
	if err != nil {
		return nil, fmt.Errorf("settings: policy: %w", err)
	}
	var bindingKind string
	switch tm {
	case admissionregistrationv1.SchemeGroupVersion.WithKind(KindVAP):
		m.vap = &admissionregistrationv1.ValidatingAdmissionPolicy{}
		err, bindingKind = decodeStrict(s.Policy, m.vap), kindVAPBinding
	case admissionregistrationv1.SchemeGroupVersion.WithKind(KindMAP):
		m.mapPolicy = &admissionregistrationv1.MutatingAdmissionPolicy{}
		err, bindingKind = decodeStrict(s.Policy, m.mapPolicy), kindMAPBinding
	default:
		return nil, fmt.Errorf("settings: policy is a %s, not an admissionregistration.k8s.io/v1 %s or %s", describe(tm), KindVAP, KindMAP)
	}
	if err != nil {
		return nil, fmt.Errorf("settings: policy: %w", err)
	}
	for i, b := range s.Bindings {
		tm, err := typeMeta(b)
		if err != nil {
			return nil, fmt.Errorf("settings: bindings[%d]: %w", i, err)
		}
		if tm != admissionregistrationv1.SchemeGroupVersion.WithKind(bindingKind) {
			return nil, fmt.Errorf("settings: bindings[%d] is a %s, not an admissionregistration.k8s.io/v1 %s", i, describe(tm), bindingKind)
		}
		if m.vap != nil {
			vb := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			err = decodeStrict(b, vb)
			m.vapBindings = append(m.vapBindings, vb)
		} else {
			mb := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
			err = decodeStrict(b, mb)
			m.mapBindings = append(m.mapBindings, mb)
		}
		if err != nil {
			return nil, fmt.Errorf("settings: bindings[%d]: %w", i, err)
		}
	}
	for i, p := range s.Params {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(p); err != nil {
			return nil, fmt.Errorf("settings: params[%d]: %w", i, err)
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("settings: params[%d]: metadata.name is required", i)
		}
		m.params = append(m.params, u)
	}
	for i, n := range s.Namespaces {
		tm, err := typeMeta(n)
		if err != nil {
			return nil, fmt.Errorf("settings: namespaces[%d]: %w", i, err)
		}
		if tm != corev1.SchemeGroupVersion.WithKind("Namespace") {
			return nil, fmt.Errorf("settings: namespaces[%d] is a %s, not a v1 Namespace", i, describe(tm))
		}
		ns := &corev1.Namespace{}
		if err := decodeStrict(n, ns); err != nil {
			return nil, fmt.Errorf("settings: namespaces[%d]: %w", i, err)
		}
		m.namespaces = append(m.namespaces, ns)
	}
	return m, nil
}

// typeMeta reads the apiVersion and kind of a manifest.
func typeMeta(raw json.RawMessage) (schema.GroupVersionKind, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(raw, &tm); err != nil {
		return schema.GroupVersionKind{}, err
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return gv.WithKind(tm.Kind), nil
}

func describe(gvk schema.GroupVersionKind) string {
	if gvk.Kind == "" {
		return "manifest without a kind"
	}
	return fmt.Sprintf("%s %s", gvk.GroupVersion(), gvk.Kind)
}

// decodeStrict decodes a manifest into a typed object, refusing unknown and
// duplicate fields as the API server's strict field validation does.
func decodeStrict(raw json.RawMessage, into runtime.Object) error {
	strict, err := sigsjson.UnmarshalStrict(raw, into)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return fmt.Errorf("strict decoding error: %w", errors.Join(strict...))
	}
	return nil
}
