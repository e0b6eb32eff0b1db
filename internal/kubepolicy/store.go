package kubepolicy

import (
	"context"
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

var errVariableComposition = errors.New("variable composition is not allowed")

// store is what the API server's plugin reads its policies, bindings,
// params and namespaces from. In kube-apiserver these are informers on
// etcd; here they are client-go's fake clientsets holding exactly the
// objects of the settings. The fakes are the plugin's store, not a stand-in
// for what a user meets: every answer still comes from the plugin's code.
type store struct {
	client  kubernetes.Interface
	dynamic dynamic.Interface
	mapper  meta.RESTMapper
}

// clusterScoped are the built-in kinds, among those a param could be, that
// have no namespace.
var clusterScoped = map[schema.GroupKind]bool{
	{Kind: "Namespace"}:        true,
	{Kind: "Node"}:             true,
	{Kind: "PersistentVolume"}: true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:  true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                   true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:               true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                      true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: true,
}

// newStore puts the policy objects, params and namespaces of m in fake
// clientsets. Params of a kind client-go knows go to the typed clientset,
// as the plugin reads those through the typed informer factory; the others
// go to the dynamic one. The REST mapper knows the param kinds, namespaced
// unless a param or a binding's paramRef says otherwise (see scopeOf).
func newStore(m *manifests, policyObjects []runtime.Object, ns NamespaceFunc) (*store, error) {
	typed := append([]runtime.Object(nil), policyObjects...)
	for _, n := range m.namespaces {
		typed = append(typed, n)
	}
	var untyped []runtime.Object
	listKinds := map[schema.GroupVersionResource]string{}
	mapper := meta.NewDefaultRESTMapper(nil)
	kinds := map[schema.GroupVersionKind]bool{}
	if pk := m.paramKind(); pk != nil {
		kinds[*pk] = true
	}
	for _, p := range m.params {
		kinds[p.GroupVersionKind()] = true
	}
	for gvk := range kinds {
		scope := m.scopeOf(gvk)
		mapper.Add(gvk, scope)
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		listKinds[plural] = gvk.Kind + "List"
	}
	for _, p := range m.params {
		gvk := p.GroupVersionKind()
		if scheme.Scheme.Recognizes(gvk) {
			obj, err := scheme.Scheme.New(gvk)
			if err != nil {
				return nil, err
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(p.Object, obj); err != nil {
				return nil, err
			}
			typed = append(typed, obj)
			continue
		}
		untyped = append(untyped, p.DeepCopy())
	}
	if ns == nil {
		ns = assumedNamespace
	}
	return &store{
		client:  &liveNamespaces{Clientset: fake.NewClientset(typed...), get: ns},
		dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, untyped...),
		mapper:  mapper,
	}, nil
}

func (m *manifests) paramKind() *schema.GroupVersionKind {
	var pk *struct{ APIVersion, Kind string }
	switch {
	case m.vap != nil && m.vap.Spec.ParamKind != nil:
		pk = &struct{ APIVersion, Kind string }{m.vap.Spec.ParamKind.APIVersion, m.vap.Spec.ParamKind.Kind}
	case m.mapPolicy != nil && m.mapPolicy.Spec.ParamKind != nil:
		pk = &struct{ APIVersion, Kind string }{m.mapPolicy.Spec.ParamKind.APIVersion, m.mapPolicy.Spec.ParamKind.Kind}
	default:
		return nil
	}
	gv, err := schema.ParseGroupVersion(pk.APIVersion)
	if err != nil {
		// The plugin reports the unparsable paramKind itself.
		return nil
	}
	gvk := gv.WithKind(pk.Kind)
	return &gvk
}

// scopeOf is the scope the settings give a param kind: namespaced when a
// param of that kind has a namespace or a binding's paramRef names one,
// cluster-wide when params of that kind have none or the kind is a
// cluster-scoped built-in, namespaced otherwise (as custom resources
// mostly are).
func (m *manifests) scopeOf(gvk schema.GroupVersionKind) meta.RESTScope {
	sawParam := false
	for _, p := range m.params {
		if p.GroupVersionKind() != gvk {
			continue
		}
		if p.GetNamespace() != "" {
			return meta.RESTScopeNamespace
		}
		sawParam = true
	}
	for _, b := range m.vapBindings {
		if pr := b.Spec.ParamRef; pr != nil && pr.Namespace != "" {
			return meta.RESTScopeNamespace
		}
	}
	for _, b := range m.mapBindings {
		if pr := b.Spec.ParamRef; pr != nil && pr.Namespace != "" {
			return meta.RESTScopeNamespace
		}
	}
	if sawParam || clusterScoped[gvk.GroupKind()] {
		return meta.RESTScopeRoot
	}
	return meta.RESTScopeNamespace
}

// NamespaceFunc returns the Namespace called name. Its error for a
// namespace that does not exist satisfies apierrors.IsNotFound.
type NamespaceFunc func(ctx context.Context, name string) (*corev1.Namespace, error)

// assumedNamespace is the namespace a Policy without a live source assumes
// exists when the settings do not hold it: with only the label the API
// server gives every namespace, kubernetes.io/metadata.name.
func assumedNamespace(_ context.Context, name string) (*corev1.Namespace, error) {
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelMetadataName: name}},
	}, nil
}

// liveNamespaces answers the plugin's reads of a namespace its store does
// not hold (the plugin reads its lister first, then the client, as the API
// server does when its cache lags) from a live source, with the request's
// context.
type liveNamespaces struct {
	*fake.Clientset
	get NamespaceFunc
}

func (c *liveNamespaces) CoreV1() typedcorev1.CoreV1Interface {
	return liveCoreV1{CoreV1Interface: c.Clientset.CoreV1(), get: c.get}
}

type liveCoreV1 struct {
	typedcorev1.CoreV1Interface
	get NamespaceFunc
}

func (c liveCoreV1) Namespaces() typedcorev1.NamespaceInterface {
	return liveNamespaceClient{NamespaceInterface: c.CoreV1Interface.Namespaces(), get: c.get}
}

type liveNamespaceClient struct {
	typedcorev1.NamespaceInterface
	get NamespaceFunc
}

func (c liveNamespaceClient) Get(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	return c.get(ctx, name)
}

// objectOf decodes a request's object as the plugin sees it, unstructured
// (numbers as int64 or float64, as the API server's decoder makes them),
// with its kind set from the request when the object lacks one.
func objectOf(raw []byte, gvk schema.GroupVersionKind) (runtime.Object, error) {
	if len(raw) == 0 || strings.TrimSpace(string(raw)) == "null" {
		return nil, nil
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: obj}
	if u.GetKind() == "" {
		u.SetGroupVersionKind(gvk)
	}
	return u, nil
}
