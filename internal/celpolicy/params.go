package celpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// ParamSource reads the parameter resources of a policy whose settings have
// a paramRef, with the two calls of Kubewarden's kubernetes host capability
// that cel-policy makes (docs/compatibility.md#cel-policy-params). Each
// answer is the JSON the host capability answers: an object, or a List. An
// error's text is the host call's error as a policy sees it; it becomes
// part of the rejection message. Implementations must be safe for
// concurrent use.
type ParamSource interface {
	// GetResource answers kubernetes get_resource.
	GetResource(ctx context.Context, r GetResourceRequest) ([]byte, error)
	// ListResourcesByNamespace answers kubernetes list_resources_by_namespace.
	ListResourcesByNamespace(ctx context.Context, r ListResourcesByNamespaceRequest) ([]byte, error)
}

// GetResourceRequest asks for one object. It marshals to the payload of
// kubernetes get_resource that cel-policy sends (Kubewarden's Go SDK's
// request): a nil Namespace is left out.
type GetResourceRequest struct {
	APIVersion   string  `json:"api_version"`
	Kind         string  `json:"kind"`
	Name         string  `json:"name"`
	Namespace    *string `json:"namespace,omitempty"`
	DisableCache bool    `json:"disable_cache"`
}

// ListResourcesByNamespaceRequest asks for the objects of a kind in a
// namespace that match a label selector. It marshals to the payload of
// kubernetes list_resources_by_namespace that cel-policy sends.
type ListResourcesByNamespaceRequest struct {
	APIVersion    string `json:"api_version"`
	Kind          string `json:"kind"`
	Namespace     string `json:"namespace"`
	LabelSelector string `json:"label_selector"`
}

// The kubernetes host capability operations a ParamSource answers.
const (
	operationGetResource              = "get_resource"
	operationListResourcesByNamespace = "list_resources_by_namespace"
)

// KubernetesHostCall is a ParamSource that makes the host calls themselves:
// it calls the function with the operation of the kubernetes namespace and
// the JSON payload cel-policy sends, and answers what it answers. The
// engine's gate (hostCapabilities, contextAwareResources) behind such a
// function checks the call as it checks a wasm policy's.
type KubernetesHostCall func(ctx context.Context, operation string, payload []byte) ([]byte, error)

// GetResource implements ParamSource.
func (f KubernetesHostCall) GetResource(ctx context.Context, r GetResourceRequest) ([]byte, error) {
	return f.call(ctx, operationGetResource, r)
}

// ListResourcesByNamespace implements ParamSource.
func (f KubernetesHostCall) ListResourcesByNamespace(ctx context.Context, r ListResourcesByNamespaceRequest) ([]byte, error) {
	return f.call(ctx, operationListResourcesByNamespace, r)
}

func (f KubernetesHostCall) call(ctx context.Context, operation string, r any) ([]byte, error) {
	payload, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("cannot serialize request object: %w", err)
	}
	return f(ctx, operation, payload)
}

// ErrNoParamSource is the evaluation error of a policy with a paramRef
// evaluated without a ParamSource.
var ErrNoParamSource = errors.New("the policy reads params (paramRef) from the cluster, and this evaluation has no source of Kubernetes resources")

// errParamRefWithoutKind is the evaluation error of settings with a paramRef
// and no paramKind, which cel-policy accepts and then fails on every
// request (it dereferences the missing paramKind).
var errParamRefWithoutKind = errors.New("failed to get params: paramRef is set but paramKind is not, so there is no kind to read the params from")

// paramsMissingPrefix begins cel-policy's rejection when it cannot get the
// params.
const paramsMissingPrefix = "failed to get params for performing policy evaluation: "

// params returns the parameters to evaluate the validations against, one
// evaluation each, as cel-policy finds them (internal/validate/params.go in
// kubewarden/cel-policy): the object paramRef names, or the objects its
// selector matches, of paramKind, in paramRef's namespace or else the
// request's. When they cannot be read the rejection is cel-policy's (400),
// or an acceptance when parameterNotFoundAction is Allow or failurePolicy
// is Ignore. A src that fails because ctx ended fails the evaluation.
func (p *Policy) params(ctx context.Context, src ParamSource, request any) ([]ref.Val, *Result, error) {
	if p.paramKind == nil {
		return nil, nil, errParamRefWithoutKind
	}
	if src == nil {
		return nil, nil, ErrNoParamSource
	}
	pr := p.paramRef
	namespace := pr.Namespace
	if namespace == "" {
		// cel-policy defaults to the request's namespace whatever the
		// scope of paramKind: get_resource ignores it for a cluster-scoped
		// kind, list_resources_by_namespace refuses it.
		namespace = stringField(request, "namespace")
	}
	var params []ref.Val
	var err error
	if pr.Selector != nil {
		params, err = p.listParams(ctx, src, namespace)
	} else {
		var param ref.Val
		param, err = p.getParam(ctx, src, namespace)
		params = []ref.Val{param}
	}
	switch {
	case err == nil:
		return params, nil, nil
	case ctx.Err() != nil:
		// Out of time: the evaluation fails as any other does.
		return nil, nil, fmt.Errorf("failed to get params: %w", ctx.Err())
	}
	if *pr.ParameterNotFoundAction == parameterNotFoundAllow || p.failurePolicy == failurePolicyIgnore {
		return nil, &Result{Accepted: true}, nil
	}
	return nil, &Result{Message: paramsMissingPrefix + err.Error(), Code: reasonCodes[reasonInvalid]}, nil
}

// getParam reads the object paramRef names.
func (p *Policy) getParam(ctx context.Context, src ParamSource, namespace string) (ref.Val, error) {
	raw, err := src.GetResource(ctx, GetResourceRequest{
		APIVersion: p.paramKind.APIVersion,
		Kind:       p.paramKind.Kind,
		Name:       p.paramRef.Name,
		Namespace:  &namespace,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot get Kubernetes resource: %w", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("cannot unmarshal Kubernetes resource response: %w", err)
	}
	return paramValue(obj), nil
}

// listParams reads the objects paramRef's selector matches.
func (p *Policy) listParams(ctx context.Context, src ParamSource, namespace string) ([]ref.Val, error) {
	selector, err := selectorString(p.paramRef.Selector)
	if err != nil {
		return nil, err
	}
	raw, err := src.ListResourcesByNamespace(ctx, ListResourcesByNamespaceRequest{
		APIVersion:    p.paramKind.APIVersion,
		Kind:          p.paramKind.Kind,
		Namespace:     namespace,
		LabelSelector: selector,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list Kubernetes resources: %w", err)
	}
	var list map[string]any
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("cannot unmarshal Kubernetes list resources response: %w", err)
	}
	items, ok := list["items"].([]any)
	if !ok {
		// cel-policy formats a nil error here.
		return nil, errors.New("cannot unmarshal Kubernetes list resources response: %!w(<nil>)")
	}
	if len(items) == 0 {
		return nil, errors.New("no parameters found")
	}
	params := make([]ref.Val, len(items))
	for i, item := range items {
		params[i] = paramValue(item)
	}
	return params, nil
}

// paramValue is the CEL value of a parameter decoded by encoding/json, as
// cel-policy binds it: a map adapted in place.
func paramValue(v any) ref.Val {
	if m, ok := v.(map[string]any); ok {
		return types.NewDynamicMap(types.DefaultTypeAdapter, m)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// selectorString is the label selector in the text form the host
// capability parses, as cel-policy writes it (Kubernetes' labels package:
// requirements sorted by key); its error is the first invalid requirement's.
// matchLabels are read in key order, so that the error is the same every
// time (cel-policy reads them in Go's map order).
func selectorString(s *LabelSelector) (string, error) {
	sel := labels.NewSelector()
	keys := make([]string, 0, len(s.MatchLabels))
	for k := range s.MatchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		r, err := labels.NewRequirement(k, selection.Equals, []string{s.MatchLabels[k]})
		if err != nil {
			return "", err
		}
		sel = sel.Add(*r)
	}
	for _, e := range s.MatchExpressions {
		op, ok := selectorOperators[e.Operator]
		if !ok {
			return "", errors.New("unknown label selector operator")
		}
		r, err := labels.NewRequirement(e.Key, op, e.Values)
		if err != nil {
			return "", err
		}
		sel = sel.Add(*r)
	}
	return sel.String(), nil
}

// selectorOperators maps the operators of a LabelSelector's expressions to
// those of a requirement.
var selectorOperators = map[string]selection.Operator{
	"In":           selection.In,
	"NotIn":        selection.NotIn,
	"Exists":       selection.Exists,
	"DoesNotExist": selection.DoesNotExist,
}

// stringField returns the string member key of a decoded JSON object (the
// lazy tape object or encoding/json's map), "" when it has none.
func stringField(v any, key string) string {
	switch o := v.(type) {
	case *jsonObject:
		f, _ := o.Find(types.String(key))
		s, _ := f.(types.String)
		return string(s)
	case map[string]any:
		s, _ := o[key].(string)
		return s
	}
	return ""
}
